//! `--partition K/N`: a deterministic share of an audit's inputs, so that CI's parallel jobs
//! can split one audit and `tensorplay merge` can put it back together.
//!
//! Every part discovers the same inputs, weighs each by its bytes on disk and deals them
//! greedily, largest first, to the lightest part. A sharded set (an index and its shards, a
//! distributed checkpoint's files) is dealt file by file when the audit reads tensor bytes:
//! every part given one of its files reads the whole set's metadata and judges it in full,
//! but scans only its own files' bytes, which is where the time goes. Equal sizes go by path and equal
//! loads to the lower part, so every job computes the same split without talking to the others.

use crate::discover::Target;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use tensorplay_audit::report::{PartInput, Partition, Report};
use tensorplay_audit::share::ScanShare;
use tensorplay_engine::files;

/// `K/N`: part K (1-based) of N.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    pub k: usize,
    pub n: usize,
}

impl FromStr for Part {
    type Err = String;

    fn from_str(text: &str) -> Result<Part, String> {
        let (k, n) = text
            .split_once('/')
            .ok_or_else(|| format!("expected K/N (such as 2/4), got '{text}'"))?;
        let number = |s: &str| {
            s.trim()
                .parse::<usize>()
                .map_err(|_| format!("expected K/N with whole numbers, got '{text}'"))
        };
        let (k, n) = (number(k)?, number(n)?);
        if n == 0 || k == 0 || k > n {
            return Err(format!("part {k} of {n}: K must be between 1 and N"));
        }
        Ok(Part { k, n })
    }
}

/// `--partition`: `K/N`, or `auto` to read them from the scheduler running the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionArg {
    Fixed(Part),
    Auto,
}

impl FromStr for PartitionArg {
    type Err = String;

    fn from_str(text: &str) -> Result<PartitionArg, String> {
        match text {
            "auto" => Ok(PartitionArg::Auto),
            _ => text.parse().map(PartitionArg::Fixed),
        }
    }
}

impl PartitionArg {
    /// The part this job audits, and where it came from (`None` for an explicit `K/N`).
    pub fn resolve(
        self,
        source: Option<&str>,
        total: Option<usize>,
    ) -> anyhow::Result<(Part, Option<String>)> {
        match self {
            PartitionArg::Fixed(part) => {
                if source.is_some() || total.is_some() {
                    anyhow::bail!(
                        "--partition-source and --partition-total go with --partition auto, not --partition {part}"
                    );
                }
                Ok((part, None))
            }
            PartitionArg::Auto => {
                let env = |name: &str| std::env::var(name).ok();
                let share = crate::scheduler::detect(&env, source, total)?;
                Ok((
                    Part {
                        k: share.rank + 1,
                        n: share.n,
                    },
                    Some(share.source),
                ))
            }
        }
    }
}

impl fmt::Display for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.k, self.n)
    }
}

/// A part's share: what its report records, and for each sharded set divided by shard, the
/// files whose bytes it scans.
pub struct Selected {
    pub partition: Partition,
    pub shares: HashMap<PathBuf, Arc<ScanShare>>,
}

/// One unit of work: a whole input, or one file of a sharded set.
struct Unit {
    target: usize,
    input: PartInput,
    file: Option<PathBuf>,
}

/// Keeps `part`'s share of `targets` (in their order) and says which share it is. With
/// `by_shard`, a sharded set (an index and its shards, a directory of files) is dealt file by
/// file, so that one large set keeps every part busy.
pub fn select(
    targets: &mut Vec<Target>,
    part: Part,
    source: Option<String>,
    by_shard: bool,
) -> Selected {
    let units = units(targets, by_shard);
    let inputs: Vec<PartInput> = units.iter().map(|u| u.input.clone()).collect();
    let digest = digest(&inputs, source.as_deref());
    let bins = assign(&inputs, part.n);
    let ours = |i: usize| bins[i] == part.k - 1;
    let mut shares: HashMap<PathBuf, ScanShare> = HashMap::new();
    for (i, unit) in units.iter().enumerate() {
        let Some(file) = &unit.file else { continue };
        let path = targets[unit.target].path().to_owned();
        let share = shares.entry(path).or_insert_with(|| ScanShare {
            mine: Vec::new(),
            all: Vec::new(),
            strays: false,
        });
        // The set's first file also takes the bytes read from none of its files.
        if share.all.is_empty() && ours(i) {
            share.strays = true;
        }
        share.all.push(file.clone());
        if ours(i) {
            share.mine.push(file.clone());
        }
    }
    let kept: Vec<bool> = (0..targets.len())
        .map(|t| {
            units
                .iter()
                .enumerate()
                .any(|(i, u)| u.target == t && ours(i))
        })
        .collect();
    let mut keep = kept.iter();
    targets.retain(|_| *keep.next().unwrap_or(&false));
    shares.retain(|_, share| !share.mine.is_empty() || share.strays);
    let inputs = units
        .into_iter()
        .enumerate()
        .filter(|(i, _)| ours(*i))
        .map(|(_, unit)| unit.input)
        .collect();
    Selected {
        partition: Partition {
            k: part.k,
            n: part.n,
            source,
            inputs,
            inputs_digest: digest,
            shared_sets: Vec::new(),
            report_digest: String::new(),
        },
        shares: shares
            .into_iter()
            .map(|(path, share)| (path, Arc::new(share)))
            .collect(),
    }
}

/// The units `targets` are dealt as: a sharded set of two files or more, with `by_shard`, one
/// per file (its index or other files that hold no tensor weigh with the first); anything
/// else whole.
fn units(targets: &[Target], by_shard: bool) -> Vec<Unit> {
    let mut units = Vec::new();
    for (t, target) in targets.iter().enumerate() {
        let path = target.path();
        let shown = path.display().to_string();
        let files = target.files();
        let shards: Vec<&PathBuf> = files.iter().filter(|f| f.as_path() != path).collect();
        if !by_shard || shards.len() < 2 || files::is_remote(path) {
            units.push(Unit {
                target: t,
                input: PartInput {
                    path: shown,
                    shard: None,
                    bytes: weight(target),
                },
                file: None,
            });
            continue;
        }
        // Files beside an index, or inside a checkpoint directory.
        let base = if files::is_dir(path) {
            path
        } else {
            path.parent().unwrap_or(Path::new(""))
        };
        let head = if files.len() > shards.len() {
            file_size(path)
        } else {
            0
        };
        for (i, file) in shards.into_iter().enumerate() {
            let name = file
                .strip_prefix(base)
                .unwrap_or(file)
                .display()
                .to_string();
            let bytes = file_size(file).saturating_add(if i == 0 { head } else { 0 });
            units.push(Unit {
                target: t,
                input: PartInput {
                    path: shown.clone(),
                    shard: Some(name),
                    bytes,
                },
                file: Some(file.clone()),
            });
        }
    }
    units
}

/// The environment variable holding the key that seals partial reports.
pub const MERGE_KEY: &str = "TENSORPLAY_MERGE_KEY";

/// The key in [`MERGE_KEY`], if set and not empty.
pub fn merge_key() -> Option<Vec<u8>> {
    std::env::var_os(MERGE_KEY)
        .filter(|key| !key.is_empty())
        .map(|key| key.into_encoded_bytes())
}

/// A partial report's `report_digest`: SHA-256 of its JSON with that field empty, or with a
/// key, HMAC-SHA256 (parts are CI artifacts; whoever can write one can recompute a plain
/// hash, so pipelines whose artifacts cross a trust boundary set the key).
pub fn report_digest(report: &Report, key: Option<&[u8]>) -> anyhow::Result<String> {
    let mut unsealed = report.clone();
    if let Some(partition) = unsealed.partition.as_mut() {
        partition.report_digest.clear();
    }
    let text = serde_json::to_vec(&unsealed)?;
    Ok(match key {
        Some(key) => {
            let mut mac = Hmac::<Sha256>::new_from_slice(key)?;
            mac.update(&text);
            format!("hmac-sha256:{}", hex(&mac.finalize().into_bytes()))
        }
        None => format!("sha256:{}", hex(&Sha256::digest(&text))),
    })
}

/// Seals a partial report (one with a partition) with its `report_digest`, under the key
/// `TENSORPLAY_MERGE_KEY` gives: the last change made to it before it is written.
pub fn seal(report: &mut Report) -> anyhow::Result<()> {
    if report.partition.is_some() {
        let digest = report_digest(report, merge_key().as_deref())?;
        if let Some(partition) = report.partition.as_mut() {
            partition.report_digest = digest;
        }
    }
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The part (0-based) each input goes to: largest first, to the part with the fewest bytes.
pub fn assign(inputs: &[PartInput], n: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..inputs.len()).collect();
    order.sort_by(|&a, &b| {
        let (a, b) = (&inputs[a], &inputs[b]);
        b.bytes.cmp(&a.bytes).then_with(|| a.path.cmp(&b.path))
    });
    let mut load = vec![0u64; n.max(1)];
    let mut bins = vec![0; inputs.len()];
    for i in order {
        // min_by_key keeps the first of equal loads: the lower part.
        let (bin, _) = load
            .iter()
            .enumerate()
            .min_by_key(|&(_, bytes)| *bytes)
            .expect("at least one part");
        load[bin] = load[bin].saturating_add(inputs[i].bytes);
        bins[i] = bin;
    }
    bins
}

/// SHA-256 of the whole input list, independent of its order, and of where the share came
/// from (`--partition auto`): parts of one run agree on it, and the union of their input
/// lists must give it back.
pub fn digest(inputs: &[PartInput], source: Option<&str>) -> String {
    let mut sorted: Vec<&PartInput> = inputs.iter().collect();
    sorted.sort();
    let mut hash = Sha256::new();
    if let Some(source) = source {
        // Marked off from the paths: no input list can hash like a source.
        hash.update(b"source\0");
        hash.update((source.len() as u64).to_le_bytes());
        hash.update(source.as_bytes());
    }
    for input in sorted {
        // Length-prefixed: no path can run into the next entry.
        hash.update((input.path.len() as u64).to_le_bytes());
        hash.update(input.path.as_bytes());
        if let Some(shard) = &input.shard {
            // Tagged: a whole input and a set's file never hash alike.
            hash.update(b"\x01");
            hash.update((shard.len() as u64).to_le_bytes());
            hash.update(shard.as_bytes());
        }
        hash.update(input.bytes.to_le_bytes());
    }
    hex(&hash.finalize())
}

/// Bytes an input stands for: its files' (an index and its shards, a directory's files); 0
/// for those that cannot be read (the audit then reports why).
fn weight(target: &Target) -> u64 {
    target
        .files()
        .iter()
        .map(|p| file_size(p))
        .fold(0, u64::saturating_add)
}

fn file_size(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs(sizes: &[(&str, u64)]) -> Vec<PartInput> {
        sizes
            .iter()
            .map(|&(path, bytes)| PartInput {
                path: path.into(),
                shard: None,
                bytes,
            })
            .collect()
    }

    #[test]
    fn parses_k_of_n_and_rejects_the_rest() {
        assert_eq!("2/4".parse::<Part>(), Ok(Part { k: 2, n: 4 }));
        assert_eq!("1/1".parse::<Part>(), Ok(Part { k: 1, n: 1 }));
        for (bad, why) in [
            ("0/4", "part 0 of 4: K must be between 1 and N"),
            ("5/4", "part 5 of 4: K must be between 1 and N"),
            ("1/0", "part 1 of 0: K must be between 1 and N"),
            ("2", "expected K/N (such as 2/4), got '2'"),
            ("a/b", "expected K/N with whole numbers, got 'a/b'"),
            ("-1/4", "expected K/N with whole numbers, got '-1/4'"),
            ("", "expected K/N (such as 2/4), got ''"),
        ] {
            assert_eq!(bad.parse::<Part>(), Err(why.to_owned()), "{bad}");
        }
    }

    #[test]
    fn largest_first_to_the_lightest_part() {
        let list = inputs(&[("a", 10), ("b", 7), ("c", 5), ("d", 3), ("e", 3)]);
        // a → 0 [10, 0]; b → 1 [10, 7]; c → 1 [10, 12]; d → 0 [13, 12]; e → 1 [13, 15].
        assert_eq!(assign(&list, 2), vec![0, 1, 1, 0, 1]);
    }

    #[test]
    fn ties_go_by_path_then_to_the_lower_part() {
        let list = inputs(&[("z", 4), ("a", 4), ("m", 4)]);
        assert_eq!(assign(&list, 3), vec![2, 0, 1]);
        // More parts than inputs: the last parts stay empty.
        assert_eq!(assign(&list, 5), vec![2, 0, 1]);
    }

    #[test]
    fn the_digest_ignores_order_but_not_content() {
        let list = inputs(&[("a", 1), ("b", 2)]);
        let swapped = inputs(&[("b", 2), ("a", 1)]);
        let digest = |list: &[PartInput]| digest(list, None);
        assert_eq!(digest(&list), digest(&swapped));
        assert_ne!(digest(&list), digest(&inputs(&[("a", 1), ("b", 3)])));
        assert_ne!(digest(&list), digest(&inputs(&[("a", 1)])));
        assert_ne!(
            digest(&inputs(&[("ab", 1)])),
            digest(&inputs(&[("a", 1), ("b", 1)]))
        );
    }

    #[test]
    fn the_digest_covers_the_source() {
        let list = inputs(&[("a", 1), ("b", 2)]);
        let gitlab = digest(&list, Some("gitlab:CI_NODE_INDEX/CI_NODE_TOTAL"));
        assert_ne!(gitlab, digest(&list, None));
        assert_ne!(
            gitlab,
            digest(&list, Some("circleci:CIRCLE_NODE_INDEX/CIRCLE_NODE_TOTAL"))
        );
        assert_eq!(
            gitlab,
            digest(&list, Some("gitlab:CI_NODE_INDEX/CI_NODE_TOTAL"))
        );
    }
}
