use crate::finding::Draft;
use crate::rule::{declare_rule, Context};
use crate::text::{flag_size, human_bytes};
use tensorplay_engine::Error as ReadError;
use tensorplay_engine::{ErrorKind, RemoteBound};

declare_rule!(OverBudget {
    code: "TP506",
    name: "over-budget",
    severity: Error,
    reads_bytes: false,
    tags: ["integrity"],
    summary: "A file was not judged within a limit of the run (memory, remote reads, time).",
    doc: "\
What it checks
  That each file is judged within the limits the run sets: `--max-memory` (`max_memory` in
  tensorplay.toml; what reading a file may hold), `--max-remote-bytes` and `--max-requests`
  (what all remote reads of the run may fetch), `--remote-deadline` (how long they may go on),
  `--timeout-per-file` (how long one file may take). A file whose audit would go past one is
  refused unjudged; the finding names the limit, what the file needed so far against what the
  limit allows, and the flag that raises it. What a pickle stream builds (its values, stack,
  marks and memo) counts against `--max-memory`; its time is bounded by fixed limits, the same
  every run: 200 000 000 opcodes (a million-tensor `torch.save` runs 30 000 000), and, walking
  its values for tensors, nesting deeper than 256, more than 20 000 000 values visited (or
  twice the stream's values) and 200 000 000 bytes of tensor names built. A stream past one is
  refused unjudged too, and no flag raises them.

Why it matters
  A file that was not judged must not pass the gate, but it is not known to be corrupt
  either: the limit decided, not the file. Telling the two apart says whether to fix the
  checkpoint (TP502) or the run's limits (TP506). A file crafted to exhaust a reader (an
  inflate bomb, a pickle that builds far more than it weighs) lands here too, so raise a
  limit for a file you expect to be that large, not for one that merely claims it.

Example
  A valid checkpoint of 20 000 views of one storage at the default 1 GiB budget: 'exceeds
  the memory budget (--max-memory): the read would hold 4.5 GiB (4801715560 bytes), more
  than the 1.0 GiB (1073741824 bytes) allowed, for relating the views of shared storages
  (20000 tensors view storage 0)'.

How to fix
  Raise the limit the finding names above what it says the file needs, where the machine
  has it: `--max-memory 5GiB` (or `max_memory = \"5GiB\"` in tensorplay.toml),
  `--max-remote-bytes 1GiB`, `--max-requests 20000`, `--remote-deadline 2h`,
  `--timeout-per-file 1200`. A remote audit without `--deep` fetches metadata only; a local
  copy needs no remote budget. A stream past a fixed pickle limit is far from anything
  `torch.save`, `pickle` or `joblib` write for checkpoints: treat it as crafted.",
    check: check,
    read_failure: read_failure,
});

/// Nothing to check on a checkpoint that was read: its failures are reported when reading fails.
fn check(_: &Context<'_>, _: &mut Vec<Draft>) {}

fn read_failure(error: &ReadError) -> Option<Draft> {
    if error.kind() != ErrorKind::OverBudget {
        return None;
    }
    Some(Draft {
        tensors: Vec::new(),
        storage: None,
        message: error.to_string(),
        fix: fix(error.over_limit()?),
        ..Default::default()
    })
}

/// Which flag to raise, and to what: the file is not known to be damaged.
fn fix(limit: &ReadError) -> String {
    const NOT_CORRUPT: &str = "the file was not judged, not found corrupt";
    match limit {
        ReadError::MemoryBudget { needed, .. } => format!(
            "{NOT_CORRUPT}: raise --max-memory above the {} it needed so far, e.g. --max-memory {size} (or max_memory = \"{size}\" in tensorplay.toml), where the machine has the memory",
            human_bytes(*needed),
            size = flag_size(needed.saturating_add(1)),
        ),
        ReadError::RemoteBudget {
            bound: RemoteBound::Bytes,
            needed,
            ..
        } => format!(
            "{NOT_CORRUPT}: raise --max-remote-bytes above the {} the run needed so far, e.g. --max-remote-bytes {}; without --deep only metadata is fetched, and a local copy needs no remote budget",
            human_bytes(*needed),
            flag_size(needed.saturating_mul(2)),
        ),
        ReadError::RemoteBudget {
            bound: RemoteBound::Requests,
            limit,
            ..
        } => format!(
            "{NOT_CORRUPT}: raise --max-requests above {limit}, e.g. --max-requests {}; a local copy needs no requests",
            limit.saturating_mul(2).max(1),
        ),
        ReadError::RemoteBudget {
            bound: RemoteBound::Deadline,
            limit,
            ..
        } => format!(
            "{NOT_CORRUPT}: raise --remote-deadline above {limit} s, e.g. --remote-deadline {}s, where the store is slow rather than stalling; a local copy needs no remote reads",
            limit.saturating_mul(2).max(1),
        ),
        ReadError::PickleLimit { .. } => format!(
            "{NOT_CORRUPT}: the limit is the same for every run (no flag raises it), far above what checkpoints need; treat the file as crafted to exhaust a reader"
        ),
        ReadError::TimeLimit { seconds, .. } => format!(
            "{NOT_CORRUPT}: raise --timeout-per-file above {seconds}, e.g. --timeout-per-file {}",
            seconds.saturating_mul(2).max(1),
        ),
        _ => NOT_CORRUPT.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::OverBudget;
    use crate::audit::read_failure;
    use crate::rules::integrity::CorruptFile;
    use std::path::PathBuf;
    use tensorplay_engine::{Error as ReadError, RemoteBound};

    /// The one finding a refusal gives: its code, message and fix.
    fn finding(error: &ReadError) -> (crate::Code, String, String) {
        let report = read_failure("m.pt", error).expect("a finding");
        assert_eq!(report.checked, [OverBudget::CODE], "{error}");
        let [f] = report.findings.as_slice() else {
            panic!("{:?}", report.findings)
        };
        assert_eq!(f.severity, crate::Severity::Error);
        (f.code, f.message.clone(), f.fix.clone())
    }

    fn not_corrupt(message: &str, fix: &str) {
        for text in [message, fix] {
            assert!(!text.contains("re-upload"), "{text}");
            assert!(!text.contains("re-save"), "{text}");
        }
        assert!(!message.contains("corrupt"), "{message}");
        assert!(fix.contains("not found corrupt"), "{fix}");
    }

    #[test]
    fn a_file_over_the_memory_budget_is_not_judged_and_names_the_flag_and_sizes() {
        let error = ReadError::MemoryBudget {
            path: PathBuf::from("m.pt"),
            needed: 4_801_715_560,
            limit: 1 << 30,
            what: "relating the views of shared storages (20000 tensors view storage 0)".into(),
        };
        let (code, message, fix) = finding(&error);
        assert_eq!(code, OverBudget::CODE);
        assert!(message.contains("(--max-memory)"), "{message}");
        assert!(
            message.contains("4.5 GiB (4801715560 bytes), more than the 1.0 GiB"),
            "{message}"
        );
        assert!(
            fix.contains("--max-memory 5GiB") && fix.contains("max_memory = \"5GiB\""),
            "{fix}"
        );
        not_corrupt(&message, &fix);
    }

    #[test]
    fn remote_and_time_limits_name_their_flags() {
        let path = || PathBuf::from("m.pt");
        for (error, flag, raised) in [
            (
                ReadError::RemoteBudget {
                    path: path(),
                    bound: RemoteBound::Bytes,
                    needed: 1 << 20,
                    limit: 512 << 10,
                },
                "--max-remote-bytes",
                "--max-remote-bytes 2MiB",
            ),
            (
                ReadError::RemoteBudget {
                    path: path(),
                    bound: RemoteBound::Requests,
                    needed: 11,
                    limit: 10,
                },
                "--max-requests",
                "--max-requests 20",
            ),
            (
                ReadError::RemoteBudget {
                    path: path(),
                    bound: RemoteBound::Deadline,
                    needed: 601,
                    limit: 600,
                },
                "--remote-deadline",
                "--remote-deadline 1200s",
            ),
            (
                ReadError::TimeLimit {
                    path: path(),
                    seconds: 60,
                },
                "--timeout-per-file",
                "--timeout-per-file 120",
            ),
        ] {
            let (code, message, fix) = finding(&error);
            assert_eq!(code, OverBudget::CODE, "{message}");
            assert!(message.contains(&format!("({flag})")), "{message}");
            assert!(fix.contains(raised), "{fix}");
            not_corrupt(&message, &fix);
        }
    }

    #[test]
    fn a_fixed_pickle_limit_is_not_judged_and_says_no_flag_raises_it() {
        let error = ReadError::PickleLimit {
            path: PathBuf::from("m.pkl"),
            member: "<pickle>".into(),
            position: 200_000_002,
            what: "more than 200000000 opcodes".into(),
        };
        let (code, message, fix) = finding(&error);
        assert_eq!(code, OverBudget::CODE);
        assert_eq!(
            message,
            "m.pkl: <pickle> at byte 200000002: more than 200000000 opcodes, a fixed limit of \
             tensorplay's pickle reader"
        );
        assert!(fix.contains("no flag raises it"), "{fix}");
        not_corrupt(&message, &fix);
    }

    #[test]
    fn a_shard_over_the_budget_is_over_budget_and_a_damaged_one_is_corrupt() {
        let over = ReadError::Shard {
            path: PathBuf::from("m.index.json"),
            source: Box::new(ReadError::TimeLimit {
                path: PathBuf::from("a.safetensors"),
                seconds: 1,
            }),
        };
        assert_eq!(finding(&over).0, OverBudget::CODE);
        let damaged = ReadError::Shard {
            path: PathBuf::from("m.index.json"),
            source: Box::new(ReadError::Empty {
                path: PathBuf::from("a.safetensors"),
            }),
        };
        let report = read_failure("m.index.json", &damaged).expect("a finding");
        assert_eq!(report.checked, [CorruptFile::CODE]);
    }
}
