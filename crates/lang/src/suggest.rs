//! "Did you mean …?": the closest known name to a misspelt one.

/// The candidate closest to `word` by edit distance (case-insensitive
/// matches count as distance 0), if it is close enough to be a plausible
/// typo: at most one edit for short words, two for longer ones, and never
/// more than a third of the word.
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    if word.len() > 64 {
        return None;
    }
    let chars = word.chars().count();
    let limit = match chars {
        0..=2 => 1,
        3..=5 => 2,
        _ => 3,
    };
    candidates
        .into_iter()
        // The distance is at least the difference in length: most
        // candidates are dismissed without computing it.
        .filter(|c| *c != word && c.chars().count().abs_diff(chars) <= limit)
        .map(|c| (distance(word, c), c.len().abs_diff(word.len()), c))
        .filter(|(d, ..)| *d <= limit)
        .min_by_key(|(d, len_diff, _)| (*d, *len_diff))
        .map(|(.., c)| c)
}

/// The longest word [`distance`] compares (longer ones are never close).
const MAX_CHARS: usize = 68;

/// Optimal string alignment distance (Levenshtein plus adjacent swaps),
/// ignoring ASCII case; `usize::MAX` past [`MAX_CHARS`] characters. On the
/// stack: it runs for each candidate of each misspelt name.
fn distance(a: &str, b: &str) -> usize {
    let mut ca = ['\0'; MAX_CHARS];
    let mut cb = ['\0'; MAX_CHARS];
    let (Some(n), Some(m)) = (fill(&mut ca, a), fill(&mut cb, b)) else {
        return usize::MAX;
    };
    // rows[i % 3][j]: distance between a[..i] and b[..j].
    let mut rows = [[0usize; MAX_CHARS + 1]; 3];
    for (j, cell) in rows[0].iter_mut().enumerate().take(m + 1) {
        *cell = j;
    }
    for i in 1..=n {
        let (cur, prev, prev2) = (i % 3, (i + 2) % 3, (i + 1) % 3);
        rows[cur][0] = i;
        for j in 1..=m {
            let cost = usize::from(ca[i - 1] != cb[j - 1]);
            let mut d = (rows[prev][j] + 1)
                .min(rows[cur][j - 1] + 1)
                .min(rows[prev][j - 1] + cost);
            if i > 1 && j > 1 && ca[i - 1] == cb[j - 2] && ca[i - 2] == cb[j - 1] {
                d = d.min(rows[prev2][j - 2] + 1);
            }
            rows[cur][j] = d;
        }
    }
    rows[n % 3][m]
}

/// Puts `s`'s characters, lowercased (ASCII), into `out`; their number, or
/// `None` if they do not fit.
fn fill(out: &mut [char; MAX_CHARS], s: &str) -> Option<usize> {
    let mut n = 0;
    for c in s.chars() {
        *out.get_mut(n)? = c.to_ascii_lowercase();
        n += 1;
    }
    Some(n)
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
        assert_eq!(distance("KB", "kb"), 0);
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(distance("kitten", "sitting"), 3);
        assert_eq!(distance(&"x".repeat(69), "x"), usize::MAX);
    }
}
