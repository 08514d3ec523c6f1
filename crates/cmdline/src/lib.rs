//! What Clarion's command-line binaries (`clarion`, `clarion-lab`) share:
//! how a command fails and what exit status that gives, durations as their
//! flags take them, numbers as their summaries print them, and how the
//! long-running ones log ([`log`]).

mod exit;
pub mod log;

pub use exit::{exit, parse_exit, Failure};

/// Parses `60s`, `500ms`, `2m`, `1h`, `250us` (a bare number: seconds) into nanoseconds.
pub fn parse_duration(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a duration; write e.g. 60s or 500ms"))?;
    let mult: u64 = match unit {
        "ns" => 1,
        "us" => 1_000,
        "ms" => 1_000_000,
        "s" | "" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => {
            return Err(format!(
                "unknown unit `{unit}` in `{s}`; use ns, us, ms, s, m or h"
            ))
        }
    };
    n.checked_mul(mult).ok_or_else(|| format!("`{s}` is too long"))
}

/// `1234567` as `1,234,567`.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The nearest-rank percentile `q` (0–1) of sorted values.
pub fn percentile<T: Copy + Default>(sorted: &[T], q: f64) -> T {
    if sorted.is_empty() {
        return T::default();
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("60s"), Ok(60_000_000_000));
        assert_eq!(parse_duration("500ms"), Ok(500_000_000));
        assert_eq!(parse_duration("10ms"), Ok(10_000_000));
        assert_eq!(parse_duration("5us"), Ok(5_000));
        assert_eq!(parse_duration("2"), Ok(2_000_000_000));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("99999999999999h").is_err());
    }

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_000), "1,000");
        assert_eq!(thousands(14_880_000), "14,880,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 0.5), 50);
        assert_eq!(percentile(&v, 0.99), 99);
        assert_eq!(percentile(&v, 1.0), 100);
        assert_eq!(percentile(&[7u64], 0.99), 7);
        assert_eq!(percentile::<u64>(&[], 0.5), 0);
    }
}
