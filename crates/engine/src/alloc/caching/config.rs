//! The allocator settings that change block placement (`PYTORCH_CUDA_ALLOC_CONF`) and their
//! parser, after PyTorch's `AllocatorConfig`.

use super::sizes::{K_LARGE_BUFFER, MIB};

/// Number of `roundup_power2_divisions` buckets (`kRoundUpPowerOfTwoIntervals`).
const ROUNDUP_INTERVALS: usize = 16;

/// The allocator settings that change block placement (`PYTORCH_CUDA_ALLOC_CONF`).
#[derive(Debug, Clone, PartialEq)]
pub struct AllocatorConfig {
    /// Blocks at least this large are never split, and requests below it never take them
    /// (`max_split_size`, bytes). `u64::MAX` (the default) turns the limit off.
    pub max_split_size: u64,
    /// Power-of-two rounding divisions per size bucket: bucket 0 holds sizes below 2 MiB,
    /// bucket `i` sizes in `[2^(20+i), 2^(21+i))` bytes, bucket 15 everything from 32 GiB on.
    /// 0 or 1 means plain 512-byte rounding (the default).
    pub roundup_power2_divisions: [u64; ROUNDUP_INTERVALS],
}

impl Default for AllocatorConfig {
    fn default() -> Self {
        AllocatorConfig {
            max_split_size: u64::MAX,
            roundup_power2_divisions: [0; ROUNDUP_INTERVALS],
        }
    }
}

impl AllocatorConfig {
    /// Parses a `PYTORCH_CUDA_ALLOC_CONF` string the way PyTorch's `AllocatorConfig` does,
    /// e.g. `"max_split_size_mb:128,roundup_power2_divisions:[64:8,256:4,>:1]"` or
    /// `"roundup_power2_divisions:4"`. An empty string gives the defaults.
    ///
    /// - `max_split_size_mb:N` needs `N >= 20`;
    /// - `roundup_power2_divisions` takes a bare power of two (all buckets) or a list
    ///   `[K:D,...,>:D]` whose keys `K` (MiB) are powers of two and whose values `D` are powers
    ///   of two or 0: key `K` sets bucket `log2 K`, the first key also fills the buckets below
    ///   it, and `>` fills from the previous key's bucket (inclusive) to the end;
    /// - options that do not change block placement on one stream are checked and ignored:
    ///   `garbage_collection_threshold` (only acts with a memory fraction, which this model
    ///   never sets), `release_lock_on_cudamalloc`, `expandable_segments:False`,
    ///   `backend:native` and the `pinned_*` host-allocator options;
    /// - options this model cannot reproduce (`expandable_segments:True`,
    ///   `backend:cudaMallocAsync`, `max_non_split_rounding_mb`) are errors, as are unknown
    ///   options and malformed values.
    pub fn parse(text: &str) -> Result<AllocatorConfig, String> {
        let tokens = lex(text);
        let mut config = AllocatorConfig::default();
        let mut i = 0;
        while i < tokens.len() {
            let key = tokens[i].as_str();
            match key {
                "max_split_size_mb" => {
                    expect(&tokens, i + 1, ":", key)?;
                    i += 2;
                    let mb = integer(&tokens, i, key)?;
                    let min = K_LARGE_BUFFER / MIB;
                    if mb < min {
                        return Err(format!(
                            "CachingAllocator option max_split_size_mb too small, must be >= {min} (got {mb})"
                        ));
                    }
                    config.max_split_size = mb.min(u64::MAX / MIB) * MIB;
                }
                "roundup_power2_divisions" => {
                    i = parse_divisions(&tokens, i, &mut config.roundup_power2_divisions)?;
                }
                "garbage_collection_threshold" => {
                    expect(&tokens, i + 1, ":", key)?;
                    i += 2;
                    let text = value(&tokens, i, key)?;
                    let threshold: f64 = text
                        .parse()
                        .map_err(|_| format!("invalid value for {key}: {text:?}"))?;
                    if !(threshold > 0.0 && threshold < 1.0) {
                        return Err(format!(
                            "garbage_collect_threshold is invalid, set it in (0.0, 1.0) (got {text})"
                        ));
                    }
                }
                "expandable_segments" => {
                    expect(&tokens, i + 1, ":", key)?;
                    i += 2;
                    match boolean(&tokens, i, key)? {
                        false => {}
                        true => return Err(
                            "expandable_segments:True is not modelled by the allocator simulation"
                                .to_owned(),
                        ),
                    }
                }
                "release_lock_on_cudamalloc"
                | "pinned_use_cuda_host_register"
                | "pinned_use_background_threads" => {
                    expect(&tokens, i + 1, ":", key)?;
                    i += 2;
                    boolean(&tokens, i, key)?;
                }
                "pinned_num_register_threads" | "pinned_reserve_segment_size_mb" => {
                    expect(&tokens, i + 1, ":", key)?;
                    i += 2;
                    integer(&tokens, i, key)?;
                }
                "backend" => {
                    expect(&tokens, i + 1, ":", key)?;
                    i += 2;
                    match value(&tokens, i, key)? {
                        "native" => {}
                        "cudaMallocAsync" => return Err(
                            "backend:cudaMallocAsync is not modelled by the allocator simulation"
                                .to_owned(),
                        ),
                        other => return Err(format!("Unknown allocator backend: {other}")),
                    }
                }
                "max_non_split_rounding_mb" => {
                    return Err(
                        "max_non_split_rounding_mb is not modelled by the allocator simulation"
                            .to_owned(),
                    )
                }
                _ => return Err(format!("Unrecognized CachingAllocator option: {key}")),
            }
            // Options are separated by commas; a trailing comma is accepted, as in PyTorch.
            if i + 1 < tokens.len() {
                expect(&tokens, i + 1, ",", key)?;
                i += 1;
            }
            i += 1;
        }
        Ok(config)
    }

    /// The rounding divisions that apply to `size` (`roundup_power2_divisions(size)`).
    pub fn divisions(&self, size: u64) -> u64 {
        let log_size = size.max(1).ilog2() as usize;
        let index = log_size.saturating_sub(20).min(ROUNDUP_INTERVALS - 1);
        self.roundup_power2_divisions[index]
    }
}

/// PyTorch's `lexArgs`: `,` `:` `[` `]` are tokens of their own, whitespace is dropped.
fn lex(text: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut buf = String::new();
    for ch in text.chars() {
        if matches!(ch, ',' | ':' | '[' | ']') {
            if !buf.is_empty() {
                tokens.push(std::mem::take(&mut buf));
            }
            tokens.push(ch.to_string());
        } else if !ch.is_whitespace() {
            buf.push(ch);
        }
    }
    if !buf.is_empty() {
        tokens.push(buf);
    }
    tokens
}

fn expect(tokens: &[String], i: usize, token: &str, key: &str) -> Result<(), String> {
    match tokens.get(i) {
        Some(t) if t == token => Ok(()),
        Some(t) => Err(format!(
            "Error parsing CachingAllocator setting {key}: expected '{token}', found '{t}'"
        )),
        None => Err(format!(
            "Error parsing CachingAllocator setting {key}: expected '{token}' at the end"
        )),
    }
}

fn value<'a>(tokens: &'a [String], i: usize, key: &str) -> Result<&'a str, String> {
    match tokens.get(i).map(String::as_str) {
        Some(t) if !matches!(t, "," | ":" | "[" | "]") => Ok(t),
        _ => Err(format!(
            "Error parsing CachingAllocator setting {key}: missing value"
        )),
    }
}

fn integer(tokens: &[String], i: usize, key: &str) -> Result<u64, String> {
    let text = value(tokens, i, key)?;
    text.parse()
        .map_err(|_| format!("invalid value for {key}: {text:?} (expected a non-negative integer)"))
}

fn boolean(tokens: &[String], i: usize, key: &str) -> Result<bool, String> {
    match value(tokens, i, key)? {
        "True" => Ok(true),
        "False" => Ok(false),
        other => Err(format!("Expected True or False for {key}, got {other:?}")),
    }
}

/// PyTorch's `parseRoundUpPower2Divisions`; `i` is at the key, returns the last index read.
fn parse_divisions(
    tokens: &[String],
    mut i: usize,
    table: &mut [u64; ROUNDUP_INTERVALS],
) -> Result<usize, String> {
    let key = "roundup_power2_divisions";
    expect(tokens, i + 1, ":", key)?;
    i += 2;
    if tokens.get(i).map(String::as_str) == Some("[") {
        let mut last_index = 0;
        let mut first_value = true;
        loop {
            i += 1;
            match tokens.get(i).map(String::as_str) {
                None => return Err(format!("Error parsing {key}: missing ']'")),
                Some("]") => break,
                Some(_) => {}
            }
            let interval = tokens[i].as_str();
            expect(tokens, i + 1, ":", key)?;
            i += 2;
            let divisions = integer(tokens, i, key)?;
            if divisions != 0 && !divisions.is_power_of_two() {
                return Err(format!(
                    "For roundups, the divisions has to be power of 2 or 0 to disable roundup (got {divisions})"
                ));
            }
            if interval == ">" {
                table[last_index..].fill(divisions);
            } else {
                let mb: u64 = interval
                    .parse()
                    .map_err(|_| format!("invalid interval for {key}: {interval:?}"))?;
                if !mb.is_power_of_two() {
                    return Err(format!(
                        "For roundups, the intervals have to be power of 2 (got {mb})"
                    ));
                }
                let index = (mb.ilog2() as usize).min(ROUNDUP_INTERVALS - 1);
                if first_value {
                    table[..index].fill(divisions);
                    first_value = false;
                }
                table[index] = divisions;
                last_index = index;
            }
            match tokens.get(i + 1).map(String::as_str) {
                Some("]") => {}
                Some(",") => i += 1,
                _ => return Err(format!("Error parsing {key}: expected ',' or ']'")),
            }
        }
    } else {
        let divisions = integer(tokens, i, key)?;
        if !divisions.is_power_of_two() {
            return Err(format!(
                "For roundups, the divisions has to be power of 2 (got {divisions})"
            ));
        }
        table.fill(divisions);
    }
    Ok(i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::caching::test_support::divisions;

    #[test]
    fn divisions_buckets() {
        let mut config = AllocatorConfig::default();
        for (i, slot) in config.roundup_power2_divisions.iter_mut().enumerate() {
            *slot = i as u64 + 100;
        }
        assert_eq!(config.divisions(1), 100);
        assert_eq!(config.divisions(MIB), 100);
        assert_eq!(config.divisions(2 * MIB - 1), 100);
        assert_eq!(config.divisions(2 * MIB), 101);
        assert_eq!(config.divisions(64 * MIB), 106);
        assert_eq!(config.divisions(128 * MIB - 1), 106);
        assert_eq!(config.divisions(32 << 30), 115);
        assert_eq!(config.divisions(u64::MAX), 115);
    }

    #[test]
    fn parse_settings() {
        assert_eq!(
            AllocatorConfig::parse("").unwrap(),
            AllocatorConfig::default()
        );
        assert_eq!(divisions("max_split_size_mb:128").max_split_size, 128 * MIB);
        assert_eq!(
            divisions(" max_split_size_mb : 20 ,").max_split_size,
            20 * MIB
        );
        assert_eq!(
            divisions("max_split_size_mb:9999999999999999").max_split_size,
            u64::MAX / MIB * MIB
        );
        assert_eq!(
            divisions("roundup_power2_divisions:4").roundup_power2_divisions,
            [4; 16]
        );

        // The doc's example: 64 sets bucket 6 and fills below it; 128 sets bucket 7; ">"
        // refills from the last key's bucket (7) to the end.
        let mut expected = [1; 16];
        expected[..7].fill(8);
        assert_eq!(
            divisions("roundup_power2_divisions:[64:8,128:2,>:1]").roundup_power2_divisions,
            expected
        );

        let config = divisions("max_split_size_mb:128,roundup_power2_divisions:[64:8,256:4,>:1]");
        assert_eq!(config.max_split_size, 128 * MIB);
        let mut expected = [1; 16];
        expected[..7].fill(8);
        expected[7] = 0;
        assert_eq!(config.roundup_power2_divisions, expected);

        let mut expected = [0; 16];
        expected[0] = 4;
        expected[1] = 8;
        assert_eq!(
            divisions("roundup_power2_divisions:[1:4,2:8]").roundup_power2_divisions,
            expected
        );
        // Keys beyond 32 GiB land in the last bucket; 0 disables a bucket.
        assert_eq!(
            divisions("roundup_power2_divisions:[1048576:2]").roundup_power2_divisions,
            [2; 16]
        );
        let mut expected = [4; 16];
        expected[..6].fill(0);
        assert_eq!(
            divisions("roundup_power2_divisions:[64:0,>:4]").roundup_power2_divisions,
            expected
        );
        assert_eq!(
            divisions("roundup_power2_divisions:[>:2]").roundup_power2_divisions,
            [2; 16]
        );

        // Options that do not move blocks on one stream are accepted.
        assert_eq!(
            divisions(
                "expandable_segments:False,garbage_collection_threshold:0.6,backend:native,\
                 release_lock_on_cudamalloc:True,pinned_use_cuda_host_register:True,\
                 pinned_num_register_threads:8"
            ),
            AllocatorConfig::default()
        );

        // Each refused for its own reason, in PyTorch's words where PyTorch has them.
        for (bad, why) in [
            (
                "max_split_size_mb:19",
                "max_split_size_mb too small, must be >= 20 (got 19)",
            ),
            (
                "max_split_size_mb:-5",
                "invalid value for max_split_size_mb: \"-5\"",
            ),
            (
                "max_split_size_mb:abc",
                "invalid value for max_split_size_mb: \"abc\"",
            ),
            (
                "max_split_size_mb",
                "max_split_size_mb: expected ':' at the end",
            ),
            ("max_split_size_mb:", "max_split_size_mb: missing value"),
            // Whitespace is dropped, not a separator: "40roundup_power2_divisions".
            (
                "max_split_size_mb:40 roundup_power2_divisions:4",
                "invalid value for max_split_size_mb: \"40roundup_power2_divisions\"",
            ),
            (
                "max_split_size_mb:40,,roundup_power2_divisions:4",
                "Unrecognized CachingAllocator option: ,",
            ),
            ("roundup_power2_divisions:3", "has to be power of 2 (got 3)"),
            ("roundup_power2_divisions:0", "has to be power of 2 (got 0)"),
            (
                "roundup_power2_divisions:[64:3]",
                "power of 2 or 0 to disable roundup (got 3)",
            ),
            (
                "roundup_power2_divisions:[48:4]",
                "intervals have to be power of 2 (got 48)",
            ),
            (
                "roundup_power2_divisions:[0:4]",
                "intervals have to be power of 2 (got 0)",
            ),
            ("roundup_power2_divisions:[64:8", "expected ',' or ']'"),
            (
                "roundup_power2_divisions:[64:8 128:2]",
                "power of 2 or 0 to disable roundup (got 8128)",
            ),
            ("roundup_power2_divisions:[64]", "expected ':', found ']'"),
            (
                "garbage_collection_threshold:1.5",
                "garbage_collect_threshold is invalid",
            ),
            (
                "expandable_segments:True",
                "expandable_segments:True is not modelled",
            ),
            (
                "expandable_segments:yes",
                "Expected True or False for expandable_segments",
            ),
            (
                "backend:cudaMallocAsync",
                "backend:cudaMallocAsync is not modelled",
            ),
            (
                "max_non_split_rounding_mb:40",
                "max_non_split_rounding_mb is not modelled",
            ),
            (
                "max_split_mb:40",
                "Unrecognized CachingAllocator option: max_split_mb",
            ),
        ] {
            let err = AllocatorConfig::parse(bad).expect_err(bad);
            assert!(err.contains(why), "{bad}: {err}");
        }
        let err = AllocatorConfig::parse("max_split_size_mb:10").unwrap_err();
        assert!(err.contains("too small"), "{err}");
    }
}
