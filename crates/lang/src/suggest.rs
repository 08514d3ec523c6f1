//! "Did you mean …?": the closest known name to a misspelt one.

/// The candidate closest to `word` by edit distance (case-insensitive
/// matches count as distance 0), if it is close enough to be a plausible
/// typo: at most one edit for short words, two for longer ones, and never
/// more than a third of the word.
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    if word.len() > 64 {
        return None;
    }
    let lower = word.to_ascii_lowercase();
    let limit = match word.chars().count() {
        0..=2 => 1,
        3..=5 => 2,
        _ => 3,
    };
    candidates
        .into_iter()
        .filter(|c| *c != word)
        .map(|c| {
            (
                distance(&lower, &c.to_ascii_lowercase()),
                c.len().abs_diff(word.len()),
                c,
            )
        })
        .filter(|(d, ..)| *d <= limit)
        .min_by_key(|(d, len_diff, _)| (*d, *len_diff))
        .map(|(.., c)| c)
}

/// Optimal string alignment distance (Levenshtein plus adjacent swaps).
fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // rows[i][j]: distance between a[..i] and b[..j].
    let mut rows = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in rows.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in rows[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut d = (rows[i - 1][j] + 1)
                .min(rows[i][j - 1] + 1)
                .min(rows[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d = d.min(rows[i - 2][j - 2] + 1);
            }
            rows[i][j] = d;
        }
    }
    rows[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions() {
        assert_eq!(closest("volum", ["volume", "size"]), Some("volume"));
        assert_eq!(closest("wehn", ["when", "per"]), Some("when"));
        assert_eq!(closest("kb", ["KB", "MB"]), Some("KB"));
        assert_eq!(closest("xyzzy", ["when", "per"]), None);
        assert_eq!(distance("abc", "acb"), 1);
    }
}
