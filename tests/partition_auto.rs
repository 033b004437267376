//! `audit --partition auto`: every scheduler's variables, for every index, give parts that
//! merge into the whole audit of `fixtures/`; parts whose shares came from different
//! schedulers do not merge; environments that name no single share exit 2 with the fix.

use crate::common::{root, stderr};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Every variable `--partition auto` reads: cleared in each run, so that the CI running these
/// tests (GitLab, Buildkite…) cannot leak its own share into them.
const SCHEDULER_VARS: &[&str] = &[
    "CI_NODE_INDEX",
    "CI_NODE_TOTAL",
    "JOB_COMPLETION_INDEX",
    "TENSORPLAY_PARTITION_TOTAL",
    "AWS_BATCH_JOB_ARRAY_INDEX",
    "AWS_BATCH_JOB_ARRAY_SIZE",
    "SLURM_ARRAY_TASK_ID",
    "SLURM_ARRAY_TASK_COUNT",
    "SLURM_ARRAY_TASK_MIN",
    "SLURM_ARRAY_TASK_MAX",
    "SLURM_ARRAY_TASK_STEP",
    "BUILDKITE_PARALLEL_JOB",
    "BUILDKITE_PARALLEL_JOB_COUNT",
    "CIRCLE_NODE_INDEX",
    "CIRCLE_NODE_TOTAL",
];

fn run(env: &[(&str, String)], args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tensorplay"));
    cmd.args(args)
        .current_dir(root())
        .env_remove("GITHUB_ACTIONS")
        .env_remove("GITHUB_STEP_SUMMARY")
        .env_remove("TENSORPLAY_MERGE_KEY");
    for var in SCHEDULER_VARS {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    cmd.output().expect("tensorplay runs")
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tensorplay-auto-{}-{name}", std::process::id()));
    std::fs::remove_dir_all(&dir).ok();
    std::fs::create_dir_all(&dir).expect("scratch folder");
    dir
}

fn s(path: &Path) -> &str {
    path.to_str().expect("UTF-8 path")
}

fn read(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("report")).expect("JSON")
}

/// A scheduler's variables for each of its jobs, in the order it starts them, and any flags.
struct Fleet {
    name: &'static str,
    jobs: Vec<Vec<(&'static str, String)>>,
    flags: Vec<&'static str>,
}

fn pair(
    index: &'static str,
    count: &'static str,
    ids: &[usize],
    n: usize,
) -> Vec<Vec<(&'static str, String)>> {
    ids.iter()
        .map(|i| vec![(index, i.to_string()), (count, n.to_string())])
        .collect()
}

fn fleets() -> Vec<Fleet> {
    let slurm = [1usize, 3]
        .iter()
        .map(|id| {
            vec![
                ("SLURM_ARRAY_TASK_ID", id.to_string()),
                ("SLURM_ARRAY_TASK_COUNT", "2".into()),
                ("SLURM_ARRAY_TASK_MIN", "1".into()),
                ("SLURM_ARRAY_TASK_MAX", "3".into()),
                ("SLURM_ARRAY_TASK_STEP", "2".into()),
            ]
        })
        .collect();
    vec![
        Fleet {
            name: "gitlab",
            jobs: pair("CI_NODE_INDEX", "CI_NODE_TOTAL", &[1, 2], 2),
            flags: vec![],
        },
        Fleet {
            name: "kubernetes",
            jobs: (0..3)
                .map(|i| vec![("JOB_COMPLETION_INDEX", i.to_string())])
                .collect(),
            flags: vec!["--partition-total", "3"],
        },
        Fleet {
            name: "aws-batch",
            jobs: pair(
                "AWS_BATCH_JOB_ARRAY_INDEX",
                "AWS_BATCH_JOB_ARRAY_SIZE",
                &[0, 1],
                2,
            ),
            flags: vec![],
        },
        Fleet {
            name: "slurm",
            jobs: slurm,
            flags: vec![],
        },
        Fleet {
            name: "buildkite",
            jobs: pair(
                "BUILDKITE_PARALLEL_JOB",
                "BUILDKITE_PARALLEL_JOB_COUNT",
                &[0, 1],
                2,
            ),
            flags: vec![],
        },
        Fleet {
            name: "circleci",
            jobs: pair("CIRCLE_NODE_INDEX", "CIRCLE_NODE_TOTAL", &[0, 1], 2),
            flags: vec![],
        },
    ]
}

/// Runs every job of `fleet` over `dir`; the parts' paths.
fn audit_fleet(fleet: &Fleet, dir: &str, out: &Path, extra: &[&str]) -> Vec<PathBuf> {
    let mut parts = Vec::new();
    for (i, env) in fleet.jobs.iter().enumerate() {
        let json = out.join(format!("{}-{i}.json", fleet.name));
        let mut args = vec![
            "audit",
            "--color",
            "never",
            "--partition",
            "auto",
            "--json",
            s(&json),
        ];
        args.extend(&fleet.flags);
        args.extend(extra);
        args.push(dir);
        let env: Vec<(&str, String)> = env.iter().map(|(k, v)| (*k, v.clone())).collect();
        let done = run(&env, &args);
        let code = done.status.code().expect("exit code");
        assert!(
            code <= 1,
            "{} job {i}: exit {code}: {}",
            fleet.name,
            stderr(&done)
        );
        let partition = read(&json)["partition"].clone();
        assert_eq!(
            partition["k"].as_u64(),
            Some(i as u64 + 1),
            "{}: job {i}'s part",
            fleet.name
        );
        assert_eq!(partition["n"].as_u64(), Some(fleet.jobs.len() as u64));
        let source = partition["source"]
            .as_str()
            .expect("source recorded")
            .to_owned();
        assert!(source.starts_with(&format!("{}:", fleet.name)), "{source}");
        parts.push(json);
    }
    parts
}

#[test]
fn every_scheduler_splits_the_fixtures_into_parts_that_merge_into_the_whole_run() {
    let out = scratch("fixtures");
    let whole_json = out.join("whole.json");
    // Metadata only, in the whole run and in every part: six fleets over every fixture stay
    // quick, and the split under test does not depend on the byte scan.
    let whole = run(
        &[],
        &[
            "audit",
            "--color",
            "never",
            "--metadata-only",
            "--json",
            s(&whole_json),
            "fixtures/",
        ],
    );
    let whole_report = read(&whole_json);
    for fleet in fleets() {
        let parts = audit_fleet(&fleet, "fixtures/", &out, &["--metadata-only"]);
        let merged_json = out.join(format!("{}-merged.json", fleet.name));
        let mut args = vec!["merge", "--color", "never", "--json", s(&merged_json)];
        args.extend(parts.iter().map(|p| s(p)));
        let merged = run(&[], &args);
        assert_eq!(
            merged.status.code(),
            whole.status.code(),
            "{}: {}",
            fleet.name,
            stderr(&merged)
        );
        assert_eq!(
            read(&merged_json),
            whole_report,
            "{}: merged report differs",
            fleet.name
        );
    }
    std::fs::remove_dir_all(&out).ok();
}

#[test]
fn parts_from_different_schedulers_do_not_merge() {
    let out = scratch("mixed");
    let fleets = fleets();
    let gitlab = audit_fleet(&fleets[0], "fixtures/safetensors", &out, &[]);
    let circle = audit_fleet(&fleets[5], "fixtures/safetensors", &out, &[]);
    let merged = run(
        &[],
        &["merge", "--color", "never", s(&gitlab[0]), s(&circle[1])],
    );
    assert_eq!(merged.status.code(), Some(2));
    let err = stderr(&merged);
    assert!(err.contains("took its share from"), "{err}");
    // An explicit K/N with the same inputs is another run too.
    let fixed = out.join("fixed.json");
    run(
        &[],
        &[
            "audit",
            "--partition",
            "2/2",
            "--json",
            s(&fixed),
            "fixtures/safetensors",
        ],
    );
    let merged = run(
        &[],
        &["merge", "--color", "never", s(&gitlab[0]), s(&fixed)],
    );
    assert_eq!(merged.status.code(), Some(2));
    assert!(
        stderr(&merged).contains("an explicit K/N"),
        "{}",
        stderr(&merged)
    );
    std::fs::remove_dir_all(&out).ok();
}

/// An environment, extra flags, and what the refusal must say.
type Case = (Vec<(&'static str, String)>, Vec<&'static str>, &'static str);

#[test]
fn environments_that_name_no_single_share_exit_2_with_the_fix() {
    let v = |pairs: &[(&'static str, &str)]| -> Vec<(&'static str, String)> {
        pairs.iter().map(|(k, v)| (*k, (*v).to_owned())).collect()
    };
    let cases: Vec<Case> = vec![
        (
            v(&[
                ("CI_NODE_INDEX", "1"),
                ("CI_NODE_TOTAL", "2"),
                ("BUILDKITE_PARALLEL_JOB", "0"),
                ("BUILDKITE_PARALLEL_JOB_COUNT", "2"),
            ]),
            vec![],
            "choose one with --partition-source NAME",
        ),
        (
            v(&[("AWS_BATCH_JOB_ARRAY_INDEX", "0")]),
            vec![],
            "set AWS_BATCH_JOB_ARRAY_SIZE",
        ),
        (
            v(&[("JOB_COMPLETION_INDEX", "0")]),
            vec![],
            "pass --partition-total N",
        ),
        (
            v(&[("CIRCLE_NODE_INDEX", "2"), ("CIRCLE_NODE_TOTAL", "2")]),
            vec![],
            "must be below the count",
        ),
        (
            v(&[("JOB_COMPLETION_INDEX", "0")]),
            vec!["--partition-total", "0"],
            "--partition-total is 0",
        ),
        (
            v(&[
                ("SLURM_ARRAY_TASK_ID", "4"),
                ("SLURM_ARRAY_TASK_COUNT", "3"),
                ("SLURM_ARRAY_TASK_MIN", "1"),
                ("SLURM_ARRAY_TASK_MAX", "4"),
                ("SLURM_ARRAY_TASK_STEP", "1"),
            ]),
            vec![],
            "not a regular range",
        ),
        (vec![], vec![], "no scheduler's index variable is set"),
    ];
    for (env, flags, expected) in cases {
        let mut args = vec!["audit", "--partition", "auto"];
        args.extend(&flags);
        args.push("fixtures/safetensors");
        let done = run(&env, &args);
        let err = stderr(&done);
        assert_eq!(done.status.code(), Some(2), "{env:?}: {err}");
        assert!(
            err.contains(expected),
            "{env:?}: expected '{expected}' in: {err}"
        );
    }
    // Naming the source settles the first case.
    let both = v(&[
        ("CI_NODE_INDEX", "1"),
        ("CI_NODE_TOTAL", "2"),
        ("BUILDKITE_PARALLEL_JOB", "0"),
        ("BUILDKITE_PARALLEL_JOB_COUNT", "2"),
    ]);
    let done = run(
        &both,
        &[
            "audit",
            "--partition",
            "auto",
            "--partition-source",
            "gitlab",
            "fixtures/safetensors",
        ],
    );
    assert!(
        done.status.code().is_some_and(|c| c <= 1),
        "{}",
        stderr(&done)
    );
}
