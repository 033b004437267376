//! Sizes for people, as every message that states one writes it: the engine's refusals and
//! the audit's findings read alike.

/// Bytes for people: `3.9 KiB`, `1.0 GiB`, `512 B` (reports keep the exact count).
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = UNITS[0];
    for next in &UNITS[1..] {
        if value < 1024.0 {
            break;
        }
        value /= 1024.0;
        unit = next;
    }
    format!("{value:.1} {unit}")
}

/// A size a limit is stated in: `4.5 GiB (4801715560 bytes)`, or `100 bytes` when the unit
/// would say nothing more.
pub fn bytes_exactly(n: u64) -> String {
    if n < 1024 {
        format!("{n} bytes")
    } else {
        format!("{} ({n} bytes)", human_bytes(n))
    }
}

/// The smallest size of at least `n` bytes in whole units of the flags' syntax (`5GiB`,
/// `129MiB`, `3KiB`, `512B`): what a flag raised to hold `n` bytes can say.
pub fn flag_size(n: u64) -> String {
    const UNITS: [(u64, &str); 4] = [
        (1 << 40, "TiB"),
        (1 << 30, "GiB"),
        (1 << 20, "MiB"),
        (1 << 10, "KiB"),
    ];
    for (unit, name) in UNITS {
        if n >= unit {
            return format!("{}{name}", n.div_ceil(unit));
        }
    }
    format!("{n}B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_well_and_flag_sizes_hold_what_they_round() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(4000), "3.9 KiB");
        assert_eq!(bytes_exactly(100), "100 bytes");
        assert_eq!(bytes_exactly(4_801_715_560), "4.5 GiB (4801715560 bytes)");
        assert_eq!(flag_size(4_801_715_560), "5GiB");
        assert_eq!(flag_size(1 << 30), "1GiB");
        assert_eq!(flag_size((128 << 20) + 1), "129MiB");
        assert_eq!(flag_size(2500), "3KiB");
        assert_eq!(flag_size(100), "100B");
    }
}
