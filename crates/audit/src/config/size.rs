//! Byte sizes as `--max-memory`, `--gpu-budget` and `max_memory` write them: `24GiB`,
//! `512MiB`, `1.5GB`, `100000`. One parser, so the flag and the file accept the same text.

/// Parses a size: a number with an optional unit (B, KB, MB, GB, TB in powers of 1000;
/// KiB, MiB, GiB, TiB in powers of 1024; case-insensitive).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let multiplier: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        other => {
            return Err(format!(
                "unknown unit '{other}' (use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)"
            ))
        }
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("'{text}' is not a size like 24GiB"))?;
    let bytes = value * multiplier as f64;
    if !bytes.is_finite() || bytes < 1.0 || bytes >= u64::MAX as f64 {
        return Err(format!("'{text}' is out of range"));
    }
    Ok(bytes.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_with_units() {
        assert_eq!(parse_size("24GiB"), Ok(24 << 30));
        assert_eq!(parse_size("24gb"), Ok(24_000_000_000));
        assert_eq!(parse_size("1.5 GiB"), Ok(3 << 29));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("2MiB"), Ok(2 << 20));
        let refused = |text: &str| parse_size(text).expect_err(text);
        assert!(refused("12 parsecs").starts_with("unknown unit 'parsecs'"));
        assert_eq!(refused("GiB"), "'GiB' is not a size like 24GiB");
        assert_eq!(refused("0"), "'0' is out of range");
        assert_eq!(refused("20000000TiB"), "'20000000TiB' is out of range");
        // No exponents: `e30` is read as the unit.
        assert!(refused("1e30").starts_with("unknown unit 'e30'"));
    }
}
