//! Words for people, shared by rule messages and the CLI's human log so both read alike:
//! sizes in binary units and counts with the right plural.

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

/// A count and its noun: `1 storage`, `2 storages`, `0 files`. Every noun tensorplay counts
/// takes a plain `s`.
pub fn plural<N: std::fmt::Display + PartialEq + From<u8>>(n: N, noun: &str) -> String {
    if n == N::from(1) {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

#[cfg(test)]
mod tests {
    use super::{human_bytes, plural};

    #[test]
    fn human_bytes_reads_well() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(4000), "3.9 KiB");
        assert_eq!(human_bytes(1 << 30), "1.0 GiB");
    }

    #[test]
    fn counts_agree_with_their_noun() {
        assert_eq!(plural(1usize, "storage"), "1 storage");
        assert_eq!(plural(0u64, "file"), "0 files");
        assert_eq!(plural(2u32, "device"), "2 devices");
    }
}
