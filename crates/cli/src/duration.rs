//! Durations on the command line: whole seconds (`600`) or with units (`10m`, `1h 30m`), as
//! `humantime` reads them.

use std::time::Duration;

/// A duration of at least one second: a bare number is seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let duration = match text.parse::<u64>() {
        Ok(seconds) => Duration::from_secs(seconds),
        Err(_) => humantime::parse_duration(text).map_err(|e| {
            format!("{e}; expected seconds (600) or a duration with units (10m, 1h, 90s)")
        })?,
    };
    if duration < Duration::from_secs(1) {
        return Err("expected at least 1 s".to_owned());
    }
    Ok(duration)
}

#[cfg(test)]
mod tests {
    use super::parse_duration;
    use std::time::Duration;

    #[test]
    fn seconds_and_units_are_read_and_less_than_a_second_is_refused() {
        let secs = |s| parse_duration(s).map(|d| d.as_secs());
        assert_eq!(secs("600"), Ok(600));
        assert_eq!(secs("10m"), Ok(600));
        assert_eq!(secs("90s"), Ok(90));
        assert_eq!(secs("1h 30m"), Ok(5400));
        assert_eq!(parse_duration("1500ms"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("0").is_err());
        assert!(parse_duration("500ms").is_err());
        assert!(parse_duration("10 minutes please").is_err());
        assert!(parse_duration("-5").is_err());
    }
}
