//! Human durations for URLs and the command line: `250us`, `500ms`, `10s`, `2m`, `1h`.

use std::time::Duration;

use crate::LockError;

/// Parses `<integer><unit>` with unit `us`, `ms`, `s`, `m` or `h` (also `1.5s`).
///
/// # Errors
/// [`LockError::InvalidConfig`] quoting the text; a bare number is rejected because its unit
/// would be a guess.
pub fn parse_duration(text: &str) -> Result<Duration, LockError> {
    let bad = |why: &str| {
        LockError::invalid_config(format!(
            "bad duration {text:?}: {why} (write e.g. 500ms, 10s, 2m)"
        ))
    };
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| bad("missing unit"))?;
    let (num, unit) = t.split_at(split);
    if num.is_empty() {
        return Err(bad("missing number"));
    }
    let value: f64 = num.parse().map_err(|_| bad("not a number"))?;
    let unit_secs = match unit {
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        _ => return Err(bad("unknown unit")),
    };
    let secs = value * unit_secs;
    if !secs.is_finite() || secs > 1e9 {
        return Err(bad("out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Formats a duration the way [`parse_duration`] reads it (`1500ms`, `30s`).
pub fn format_duration(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else if d.subsec_nanos().is_multiple_of(1_000_000) {
        format!("{}ms", d.as_millis())
    } else {
        format!("{}us", d.as_micros())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("250us").unwrap(), Duration::from_micros(250));
    }

    #[test]
    fn rejects_garbage_quoting_it() {
        for bad in ["abc", "10", "", "s", "10parsecs", "1e400s"] {
            let e = parse_duration(bad).unwrap_err();
            assert!(matches!(e, LockError::InvalidConfig(_)), "{bad}");
            assert!(e.to_string().contains(&format!("{bad:?}")), "{e}");
        }
    }

    #[test]
    fn format_round_trips() {
        for d in [
            Duration::from_secs(30),
            Duration::from_millis(1500),
            Duration::from_micros(7),
        ] {
            assert_eq!(parse_duration(&format_duration(d)).unwrap(), d);
        }
    }
}
