//! The time a report was written, as JUnit's XSDs want it: UTC, whole seconds, no zone
//! designator (`2025-01-31T12:00:00`; the Ant schema's pattern admits nothing more).

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, or the epoch on a clock set before it.
pub fn now_utc() -> String {
    format_utc(SystemTime::now().max(UNIX_EPOCH))
}

/// `time` as `YYYY-MM-DDTHH:MM:SS`: RFC 3339 in UTC without its `Z`.
pub fn format_utc(time: SystemTime) -> String {
    let text = humantime::format_rfc3339_seconds(time).to_string();
    text.strip_suffix('Z').map(str::to_owned).unwrap_or(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn known_instants() {
        let at = |secs| format_utc(UNIX_EPOCH + Duration::from_secs(secs));
        assert_eq!(at(0), "1970-01-01T00:00:00");
        assert_eq!(at(951_782_400), "2000-02-29T00:00:00");
        assert_eq!(at(1_738_324_799), "2025-01-31T11:59:59");
        assert_eq!(at(4_102_444_800), "2100-01-01T00:00:00");
    }
}
