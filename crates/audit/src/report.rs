//! The report: plain data every renderer reads. The JSON renderer is its serialisation.

use crate::finding::Finding;
use crate::{Code, Severity};
use serde::{Deserialize, Serialize};

/// Version of the JSON report's shape; fields are only ever added within a version.
pub const SCHEMA_VERSION: u32 = 1;

/// Which findings fail the build.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FailOn {
    /// Errors fail (default).
    #[default]
    Error,
    /// Warnings and errors fail.
    Warning,
    /// Nothing fails; the report is informational.
    Never,
}

impl FailOn {
    /// Whether a finding of `severity` fails the build.
    pub fn fails(self, severity: Severity) -> bool {
        match self {
            FailOn::Error => severity >= Severity::Error,
            FailOn::Warning => severity >= Severity::Warning,
            FailOn::Never => false,
        }
    }
}

/// The whole run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Which tool wrote it.
    pub tool: Tool,
    /// Totals.
    pub summary: Summary,
    /// One entry per checkpoint audited (read or not).
    pub files: Vec<FileReport>,
    /// Files found but not audited, with why.
    pub skipped: Vec<Skipped>,
    /// Which share of a partitioned run (`--partition K/N`) this report covers; absent
    /// for a whole run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<Partition>,
    /// Each model directory's OpenSSF signature as verified (`--require-signature`, or a
    /// trust source given): its status and who signed it. Absent when none was checked.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signatures: Vec<crate::provenance::SignatureFacts>,
}

/// A partial report's place in its run, so that merging can prove the parts add up to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Partition {
    /// This part, 1-based.
    pub k: usize,
    /// How many parts the run has.
    pub n: usize,
    /// Where K and N came from with `--partition auto` (`gitlab:CI_NODE_INDEX/CI_NODE_TOTAL`);
    /// absent for an explicit `K/N`. Part of `inputs_digest`: parts from different sources
    /// do not merge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The checkpoints this part was given, in audit order.
    pub inputs: Vec<PartInput>,
    /// SHA-256 (hex) of the whole run's input list, every part's: parts of one run share it.
    pub inputs_digest: String,
    /// Sharded sets this part scanned a share of (their other rules judged in full): where
    /// each tensor its byte-reading findings name stands in the set, so that `merge` orders
    /// the parts' findings as one run does. Absent when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shared_sets: Vec<SharedSet>,
    /// The hash of this report with this field empty (`sha256:…`, or `hmac-sha256:…` keyed
    /// with `TENSORPLAY_MERGE_KEY`): `merge` refuses a part edited after its audit.
    #[serde(default)]
    pub report_digest: String,
}

/// A sharded set divided by shard across parts, as one part saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharedSet {
    /// The set, as the report's `files` name it.
    pub path: String,
    /// Tensor name → its index in the set, for the tensors this part's byte-reading findings
    /// name.
    pub tensor_order: std::collections::BTreeMap<String, usize>,
}

/// A checkpoint handed to a part, with the bytes that weighed it when the parts were balanced.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PartInput {
    /// The path, as the report's `files` name it.
    pub path: String,
    /// For a sharded set divided by shard: the file of the set (beside its index, or in its
    /// directory) this input stands for; absent for a whole input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<String>,
    /// Its size on disk (a sharded set's index and shards, a distributed checkpoint's files).
    pub bytes: u64,
}

/// Tool identity.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Tool {
    /// `tensorplay`.
    pub name: String,
    /// Its version.
    pub version: String,
}

/// Totals over every file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Checkpoints audited.
    pub files: usize,
    /// Tensors in them.
    pub tensors: usize,
    /// Storages in them.
    pub storages: usize,
    /// Bytes their storages hold.
    pub bytes: u64,
    /// Findings by severity.
    pub errors: usize,
    /// Warnings.
    pub warnings: usize,
    /// Infos.
    pub infos: usize,
    /// Findings a baseline suppressed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub suppressed: usize,
    /// Whether no finding reaches the fail-on level.
    pub passed: bool,
    /// The level that judged `passed`.
    #[serde(default)]
    pub fail_on: FailOn,
}

/// One checkpoint's result.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FileReport {
    /// The path as given or found.
    pub path: String,
    /// Its format, `null` when it could not be read.
    pub format: Option<String>,
    /// Tensor count.
    pub tensors: usize,
    /// Storage count.
    pub storages: usize,
    /// Bytes its storages hold.
    pub bytes: u64,
    /// Distinct storage locations, sorted.
    pub devices: Vec<String>,
    /// Distinct tensor dtypes, sorted.
    pub dtypes: Vec<String>,
    /// The rules that ran on it (JUnit reports one test case each).
    pub checked: Vec<Code>,
    /// What they found.
    pub findings: Vec<Finding>,
    /// Findings a baseline knew, kept out of the verdict but never out of sight.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub suppressed: Vec<Finding>,
    /// Globals its pickles name that `[pickle] allow_globals` accepted (so TP501 did not
    /// report them), `module.name`, sorted; left out when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_globals: Vec<String>,
    /// The simulated GPU load; `null` when the file could not be read.
    pub memory: Option<MemoryFacts>,
    /// The real GPU load (`--load-to`), when one ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<DeviceFacts>,
    /// What was read of a remote checkpoint (`https://`, `hf://`, `s3://`); absent for a
    /// local one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<RemoteFacts>,
    /// Its files with their digests and what its bytes show of the model, for a bill of
    /// materials (`--cyclonedx`); absent unless one was asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inventory: Option<crate::inventory::Inventory>,
    /// What the HTML report draws. Never serialised: the JSON report's shape is fixed, and
    /// a segment map per file would swell it.
    #[serde(skip)]
    pub layout: Option<LayoutFacts>,
}

/// How a checkpoint's storages are sized and where the simulated allocator put them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LayoutFacts {
    /// Storage sizes in log2 bins, ascending, empty bins left out.
    pub size_bins: Vec<SizeBin>,
    /// TP301's score (variance / mean² of storage sizes); `None` below two storages.
    pub fragmentation_score: Option<f64>,
    /// The threshold TP301 applies to it.
    pub fragmentation_threshold: f64,
    /// The simulated allocator's segments after the load, in address order.
    pub segments: Vec<SegmentMap>,
    /// Per storage id, the tensors that view it (`lm_head.weight`, `a and 2 more`), so the
    /// map can name what a block holds.
    pub storage_tensors: Vec<String>,
}

/// Storages of `[2^log2, 2^(log2+1))` bytes; `log2` is `None` for empty storages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SizeBin {
    /// The bin's lower bound as a power of two.
    pub log2: Option<u32>,
    /// Storages in it.
    pub count: usize,
}

/// One reserved segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentMap {
    /// Bytes reserved.
    pub size: u64,
    /// `small` or `large`.
    pub pool: &'static str,
    /// Its blocks in address order; they tile the segment.
    pub blocks: Vec<BlockMap>,
}

/// One block of a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockMap {
    /// Bytes from the segment's start.
    pub offset: u64,
    /// Bytes it covers.
    pub size: u64,
    /// The storage it holds; `None` when free.
    pub storage: Option<usize>,
}

/// What a remote checkpoint's audit fetched of it, over all the objects it is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteFacts {
    /// Bytes its objects hold.
    pub size: u64,
    /// Bytes fetched.
    pub bytes_read: u64,
    /// Range requests made.
    pub requests: u64,
    /// Whether its tensor values were read (`--deep`): a metadata-only audit judged none of
    /// them (no NaN/Inf scan).
    #[serde(default)]
    pub values_read: bool,
}

/// What loading the checkpoint onto a real GPU took and whether every DataPtr checked out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceFacts {
    /// `cuda:N`.
    pub device: String,
    /// Bytes the real caching allocator reserved.
    pub reserved_bytes: u64,
    /// Bytes in its allocated blocks.
    pub allocated_bytes: u64,
    /// Segments it reserved.
    pub segments: u64,
    /// Storages copied and checked.
    pub storages_checked: usize,
    /// Storages whose pointer attributes or round-trip checksum did not match.
    pub storages_failed: usize,
    /// Whether staging used pinned host memory (else pageable, as a fallback).
    pub pinned_staging: bool,
}

/// What loading the checkpoint through the simulated CUDA caching allocator takes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryFacts {
    /// Bytes the storages ask for.
    pub requested_bytes: u64,
    /// Bytes in allocated blocks (requests rounded to 512).
    pub allocated_bytes: u64,
    /// Bytes of GPU memory reserved in segments.
    pub reserved_bytes: u64,
    /// Segments reserved.
    pub segments: u64,
    /// Reserved but unallocated, as a share of reserved: 1 − allocated / reserved.
    pub fragmentation: f64,
    /// `--gpu-budget`, when given.
    pub budget_bytes: Option<u64>,
    /// Whether the load fits the budget, when one is given.
    pub fits_budget: Option<bool>,
}

/// A file seen but not audited.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Skipped {
    /// The path.
    pub path: String,
    /// Why.
    pub reason: String,
    /// The discovery rule that excluded it.
    pub rule: SkipRule,
}

/// Why discovery passes a file over: a file any loader would open is never one of these
/// unless it is audited another way (through its index, its directory, another path).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SkipRule {
    /// No loader accepts its bytes (text, images, compressed data that holds no pickle…).
    NoLoader,
    /// JSON that is no checkpoint index.
    NotAnIndex,
    /// Another path to the same file is audited.
    SameFile,
    /// A shard, audited through its index.
    Shard,
    /// A file of a checkpoint directory, audited as a whole.
    DirectoryPart,
    /// Declared not a checkpoint in `tensorplay.toml`.
    Declared,
    /// Not a regular file, a directory that cannot be read, a loop or a directory walked
    /// already.
    NotWalked,
}

impl Report {
    /// A report over `files`, with totals computed for `fail_on`.
    pub fn new(files: Vec<FileReport>, skipped: Vec<Skipped>, fail_on: FailOn) -> Report {
        let mut report = Report {
            schema_version: SCHEMA_VERSION,
            tool: Tool {
                name: "tensorplay".into(),
                version: env!("CARGO_PKG_VERSION").into(),
            },
            summary: Summary::default(),
            files,
            skipped,
            partition: None,
            signatures: Vec::new(),
        };
        report.summary.fail_on = fail_on;
        let mut unique = crate::fingerprint::Unique::default();
        for file in &mut report.files {
            for finding in file.findings.iter_mut().chain(&mut file.suppressed) {
                let fingerprint = unique.next(&file.path, finding);
                finding.fingerprint = fingerprint;
            }
        }
        report.recount();
        report
    }

    /// Whether a finding of `severity` fails this run.
    pub fn fails(&self, severity: Severity) -> bool {
        self.summary.fail_on.fails(severity)
    }

    /// Recomputes the totals (after a baseline removed findings, say).
    pub fn recount(&mut self) {
        let fail_on = self.summary.fail_on;
        let findings = || self.files.iter().flat_map(|f| &f.findings);
        let count = |s: Severity| findings().filter(|f| f.severity == s).count();
        self.summary = Summary {
            files: self.files.len(),
            tensors: self.files.iter().map(|f| f.tensors).sum(),
            storages: self.files.iter().map(|f| f.storages).sum(),
            bytes: self
                .files
                .iter()
                .fold(0u64, |acc, f| acc.saturating_add(f.bytes)),
            errors: count(Severity::Error),
            warnings: count(Severity::Warning),
            infos: count(Severity::Info),
            suppressed: self.files.iter().map(|f| f.suppressed.len()).sum(),
            passed: !findings().any(|f| fail_on.fails(f.severity)),
            fail_on,
        };
    }
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}
