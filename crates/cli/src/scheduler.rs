//! `--partition auto`: the job's share read from the scheduler that runs it, each scheduler's
//! own convention (1-based GitLab, count-less Kubernetes, sparse Slurm IDs) turned into one
//! 0-based rank of N.
//!
//! A scheduler counts as present when its index variable is set: GitLab sets `CI_NODE_TOTAL=1`
//! in every job, parallel or not, so a count alone says nothing.

use std::fmt;

/// A scheduler `--partition auto` reads, with the variables it sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scheduler {
    /// `--partition-source` value and the name recorded in the part.
    pub name: &'static str,
    /// The variable holding this job's index.
    pub index: &'static str,
    /// The variable holding the job count; `None` where the scheduler sets none (Kubernetes).
    pub count: Option<&'static str>,
    /// What the first job's index is.
    base: Base,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Base {
    Zero,
    One,
    /// Slurm: (ID − SLURM_ARRAY_TASK_MIN) / SLURM_ARRAY_TASK_STEP.
    SlurmRange,
}

/// The variable giving a Kubernetes Indexed Job its count (the `--partition-total` flag wins).
pub const TOTAL_VAR: &str = "TENSORPLAY_PARTITION_TOTAL";

pub const SCHEDULERS: &[Scheduler] = &[
    Scheduler {
        name: "gitlab",
        index: "CI_NODE_INDEX",
        count: Some("CI_NODE_TOTAL"),
        base: Base::One,
    },
    Scheduler {
        name: "kubernetes",
        index: "JOB_COMPLETION_INDEX",
        count: None,
        base: Base::Zero,
    },
    Scheduler {
        name: "aws-batch",
        index: "AWS_BATCH_JOB_ARRAY_INDEX",
        count: Some("AWS_BATCH_JOB_ARRAY_SIZE"),
        base: Base::Zero,
    },
    Scheduler {
        name: "slurm",
        index: "SLURM_ARRAY_TASK_ID",
        count: Some("SLURM_ARRAY_TASK_COUNT"),
        base: Base::SlurmRange,
    },
    Scheduler {
        name: "buildkite",
        index: "BUILDKITE_PARALLEL_JOB",
        count: Some("BUILDKITE_PARALLEL_JOB_COUNT"),
        base: Base::Zero,
    },
    Scheduler {
        name: "circleci",
        index: "CIRCLE_NODE_INDEX",
        count: Some("CIRCLE_NODE_TOTAL"),
        base: Base::Zero,
    },
];

/// This job's share as the scheduler gave it: `rank` 0-based, of `n`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Share {
    pub rank: usize,
    pub n: usize,
    /// `gitlab:CI_NODE_INDEX/CI_NODE_TOTAL`: recorded in the part, so that `merge` refuses
    /// parts whose shares came from different places.
    pub source: String,
}

/// Why no share could be read; every message says what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AutoError(pub String);

impl fmt::Display for AutoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for AutoError {}

fn names() -> String {
    SCHEDULERS
        .iter()
        .map(|s| s.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The share `env` (a variable's value by name) gives: from `source` when named, else from the
/// one scheduler whose index variable is set. `total` is `--partition-total`.
pub fn detect(
    env: &dyn Fn(&str) -> Option<String>,
    source: Option<&str>,
    total: Option<usize>,
) -> Result<Share, AutoError> {
    let set = |var: &str| env(var).filter(|v| !v.trim().is_empty());
    let scheduler = match source {
        Some(name) => *SCHEDULERS.iter().find(|s| s.name == name).ok_or_else(|| {
            AutoError(format!(
                "--partition-source {name}: not a scheduler tensorplay reads (one of {})",
                names()
            ))
        })?,
        None => {
            let present: Vec<&Scheduler> = SCHEDULERS
                .iter()
                .filter(|s| set(s.index).is_some())
                .collect();
            match present.as_slice() {
                [one] => **one,
                [] => {
                    return Err(AutoError(format!(
                        "--partition auto: no scheduler's index variable is set ({}); run inside a parallel job, or give --partition K/N",
                        SCHEDULERS.iter().map(|s| s.index).collect::<Vec<_>>().join(", ")
                    )))
                }
                several => {
                    let found: Vec<String> = several
                        .iter()
                        .map(|s| format!("{} ({})", s.name, s.index))
                        .collect();
                    return Err(AutoError(format!(
                        "--partition auto: the variables of {} schedulers are set: {}; choose one with --partition-source NAME",
                        several.len(),
                        found.join(", ")
                    )));
                }
            }
        }
    };
    let index_text = set(scheduler.index).ok_or_else(|| {
        AutoError(format!(
            "--partition-source {}: {} is not set; this job was not started as one of a {} parallel set",
            scheduler.name, scheduler.index, scheduler.name
        ))
    })?;
    let number = |var: &str, text: &str| {
        text.trim().parse::<usize>().map_err(|_| {
            AutoError(format!(
                "--partition auto: {var}={text:?} is not a whole number"
            ))
        })
    };
    let index = number(scheduler.index, &index_text)?;
    let (n, count_from) = match scheduler.count {
        Some(var) => {
            let text = set(var).ok_or_else(|| {
                AutoError(format!(
                    "--partition auto: {}={index_text} is set but {var} is not: set {var} to the number of jobs, or give --partition K/N",
                    scheduler.index
                ))
            })?;
            (number(var, &text)?, var.to_owned())
        }
        // Kubernetes puts only the index in the pod: the count is the Job's `completions`.
        None => match (total, set(TOTAL_VAR)) {
            (Some(n), _) => (n, "--partition-total".to_owned()),
            (None, Some(text)) => (number(TOTAL_VAR, &text)?, TOTAL_VAR.to_owned()),
            (None, None) => {
                return Err(AutoError(format!(
                    "--partition auto: {}={index_text} gives no count: pass --partition-total N or set {TOTAL_VAR} to the Job's completions",
                    scheduler.index
                )))
            }
        },
    };
    let rank = match scheduler.base {
        Base::Zero => index,
        Base::One => index.checked_sub(1).ok_or_else(|| {
            AutoError(format!(
                "--partition auto: {}=0, but {} counts from 1",
                scheduler.index, scheduler.name
            ))
        })?,
        Base::SlurmRange => slurm_rank(&set, index, n)?,
    };
    if n == 0 {
        return Err(AutoError(format!(
            "--partition auto: {count_from} is 0: there must be at least one job"
        )));
    }
    if rank >= n {
        return Err(AutoError(format!(
            "--partition auto: {}={index_text} is job {} of {n} ({count_from}): the index must be below the count; check that {count_from} matches the jobs started",
            scheduler.index,
            rank + 1
        )));
    }
    Ok(Share {
        rank,
        n,
        source: format!("{}:{}/{count_from}", scheduler.name, scheduler.index),
    })
}

/// A Slurm task's rank in a regular array (`--array=MIN-MAX:STEP`); an irregular list
/// (`--array=1,3,4`) has no rank that every task can compute alike, so it is refused.
fn slurm_rank(
    set: &dyn Fn(&str) -> Option<String>,
    id: usize,
    count: usize,
) -> Result<usize, AutoError> {
    let get = |var: &str| -> Result<usize, AutoError> {
        let text = set(var).ok_or_else(|| {
            AutoError(format!(
                "--partition auto: SLURM_ARRAY_TASK_ID is set but {var} is not: submit with sbatch --array, or give --partition K/N"
            ))
        })?;
        text.trim().parse::<usize>().map_err(|_| {
            AutoError(format!(
                "--partition auto: {var}={text:?} is not a whole number"
            ))
        })
    };
    let (min, max, step) = (
        get("SLURM_ARRAY_TASK_MIN")?,
        get("SLURM_ARRAY_TASK_MAX")?,
        get("SLURM_ARRAY_TASK_STEP")?.max(1),
    );
    let regular = count > 0
        && max >= min
        && (max - min).is_multiple_of(step)
        && (max - min) / step + 1 == count
        && id >= min
        && id <= max
        && (id - min).is_multiple_of(step);
    if !regular {
        return Err(AutoError(format!(
            "--partition auto: the Slurm array is not a regular range (MIN={min}, MAX={max}, STEP={step}, COUNT={count}, ID={id}): submit with --array=MIN-MAX[:STEP], or give --partition K/N"
        )));
    }
    Ok((id - min) / step)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn run(
        vars: &[(&str, &str)],
        source: Option<&str>,
        total: Option<usize>,
    ) -> Result<(usize, usize), String> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        detect(&|k| map.get(k).cloned(), source, total)
            .map(|s| (s.rank, s.n))
            .map_err(|e| e.0)
    }

    #[test]
    fn each_scheduler_is_normalised_to_a_zero_based_rank() {
        assert_eq!(
            run(
                &[("CI_NODE_INDEX", "1"), ("CI_NODE_TOTAL", "3")],
                None,
                None
            ),
            Ok((0, 3))
        );
        assert_eq!(
            run(
                &[("CI_NODE_INDEX", "3"), ("CI_NODE_TOTAL", "3")],
                None,
                None
            ),
            Ok((2, 3))
        );
        assert_eq!(
            run(&[("JOB_COMPLETION_INDEX", "2")], None, Some(4)),
            Ok((2, 4))
        );
        assert_eq!(
            run(
                &[("JOB_COMPLETION_INDEX", "2"), (TOTAL_VAR, "5")],
                None,
                None
            ),
            Ok((2, 5))
        );
        // The flag wins over the variable.
        assert_eq!(
            run(
                &[("JOB_COMPLETION_INDEX", "2"), (TOTAL_VAR, "5")],
                None,
                Some(3)
            ),
            Ok((2, 3))
        );
        assert_eq!(
            run(
                &[
                    ("AWS_BATCH_JOB_ARRAY_INDEX", "0"),
                    ("AWS_BATCH_JOB_ARRAY_SIZE", "2")
                ],
                None,
                None
            ),
            Ok((0, 2))
        );
        assert_eq!(
            run(
                &[
                    ("BUILDKITE_PARALLEL_JOB", "1"),
                    ("BUILDKITE_PARALLEL_JOB_COUNT", "2")
                ],
                None,
                None
            ),
            Ok((1, 2))
        );
        assert_eq!(
            run(
                &[("CIRCLE_NODE_INDEX", "3"), ("CIRCLE_NODE_TOTAL", "4")],
                None,
                None
            ),
            Ok((3, 4))
        );
        let slurm = |id: &str| {
            run(
                &[
                    ("SLURM_ARRAY_TASK_ID", id),
                    ("SLURM_ARRAY_TASK_COUNT", "4"),
                    ("SLURM_ARRAY_TASK_MIN", "1"),
                    ("SLURM_ARRAY_TASK_MAX", "7"),
                    ("SLURM_ARRAY_TASK_STEP", "2"),
                ],
                None,
                None,
            )
        };
        assert_eq!(slurm("1"), Ok((0, 4)));
        assert_eq!(slurm("7"), Ok((3, 4)));
        assert!(slurm("4").unwrap_err().contains("not a regular range"));
    }

    #[test]
    fn a_count_alone_is_no_scheduler() {
        // Every GitLab job has CI_NODE_TOTAL=1; only CI_NODE_INDEX marks a parallel one.
        let err = run(&[("CI_NODE_TOTAL", "1")], None, None).unwrap_err();
        assert!(
            err.contains("no scheduler's index variable is set"),
            "{err}"
        );
    }

    #[test]
    fn ambiguity_and_impossible_shares_say_what_to_do() {
        let both = [
            ("CI_NODE_INDEX", "1"),
            ("CI_NODE_TOTAL", "2"),
            ("CIRCLE_NODE_INDEX", "0"),
            ("CIRCLE_NODE_TOTAL", "2"),
        ];
        let err = run(&both, None, None).unwrap_err();
        assert!(
            err.contains("gitlab (CI_NODE_INDEX), circleci (CIRCLE_NODE_INDEX)"),
            "{err}"
        );
        assert!(err.contains("--partition-source NAME"), "{err}");
        assert_eq!(run(&both, Some("circleci"), None), Ok((0, 2)));
        assert_eq!(run(&both, Some("gitlab"), None), Ok((0, 2)));
        let err = run(&both, Some("slurm"), None).unwrap_err();
        assert!(err.contains("SLURM_ARRAY_TASK_ID is not set"), "{err}");
        let err = run(&both, Some("jenkins"), None).unwrap_err();
        assert!(err.contains("not a scheduler tensorplay reads"), "{err}");

        let err = run(&[("AWS_BATCH_JOB_ARRAY_INDEX", "1")], None, None).unwrap_err();
        assert!(err.contains("AWS_BATCH_JOB_ARRAY_SIZE is not"), "{err}");
        let err = run(&[("JOB_COMPLETION_INDEX", "1")], None, None).unwrap_err();
        assert!(err.contains("--partition-total N"), "{err}");
        let err = run(
            &[("CIRCLE_NODE_INDEX", "2"), ("CIRCLE_NODE_TOTAL", "2")],
            None,
            None,
        )
        .unwrap_err();
        assert!(err.contains("must be below the count"), "{err}");
        let err = run(
            &[("CIRCLE_NODE_INDEX", "0"), ("CIRCLE_NODE_TOTAL", "0")],
            None,
            None,
        )
        .unwrap_err();
        assert!(err.contains("CIRCLE_NODE_TOTAL is 0"), "{err}");
        let err = run(
            &[("CI_NODE_INDEX", "0"), ("CI_NODE_TOTAL", "2")],
            None,
            None,
        )
        .unwrap_err();
        assert!(err.contains("counts from 1"), "{err}");
        let err = run(
            &[
                ("BUILDKITE_PARALLEL_JOB", "x"),
                ("BUILDKITE_PARALLEL_JOB_COUNT", "2"),
            ],
            None,
            None,
        )
        .unwrap_err();
        assert!(err.contains("not a whole number"), "{err}");
    }
}
