//! `tensorplay audit`: the CI gate.

mod options;

pub use options::{AuditOptions, FileOptions, OptionError, RuleOptions, Scope};

use crate::color::ColorArg;
use crate::discover::{discover, skip_declared, Target};
use crate::exit::ExitStatus;
use crate::progress::Progress;
use crate::render;
use anyhow::Context as _;
use clap::Args;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tensorplay_audit::audit::{audit, read_failure_with};
use tensorplay_audit::baseline::Baseline;
use tensorplay_audit::config::{self, Config};
use tensorplay_audit::options::Options;
use tensorplay_audit::report::{FailOn, FileReport, Report, SharedSet};
use tensorplay_audit::template::TemplateBaseline;
use tensorplay_audit::text::{plural, printable};
use tensorplay_engine::alloc::cuda::{gpu_status, GpuStatus};
use tensorplay_engine::alloc::device_load::load_to_device;
use tensorplay_engine::Error as ReadError;
use tensorplay_engine::{files, load};

#[derive(Debug, Args)]
pub struct AuditArgs {
    /// Checkpoint files, sharded indexes, or directories to walk.
    #[arg(required = true, value_name = "PATH")]
    pub(crate) paths: Vec<PathBuf>,
    /// The JSON report on stdout, no colours, no progress (kept for scripts; CI templates
    /// write reports with --json/--junit/--sarif and keep the human log).
    #[arg(long)]
    ci_mode: bool,
    /// What stdout shows [default: github inside GitHub Actions, else human].
    #[arg(long, value_enum, conflicts_with = "ci_mode")]
    format: Option<render::stdout::Format>,
    /// Colour the human log: auto (a terminal; NO_COLOR, FORCE_COLOR, CLICOLOR_FORCE honoured).
    #[arg(long, value_enum, value_name = "WHEN", default_value_t = ColorArg::Auto)]
    color: ColorArg,
    #[command(flatten)]
    files: render::files::ReportFiles,
    #[command(flatten)]
    pub(crate) rules: RuleOptions,
    #[command(flatten)]
    pub(crate) file: FileOptions,
    /// Record the current findings as a baseline in FILE.
    #[arg(long, value_name = "FILE")]
    write_baseline: Option<PathBuf>,
    /// List every tensor of every finding in the human output (otherwise the first 10), and
    /// note the run's peak resident memory on stderr.
    #[arg(long)]
    verbose: bool,
    /// Audit only part K of N (1-based) of the inputs, for CI's parallel jobs: whole files
    /// and sharded sets, balanced by bytes; `tensorplay merge` combines the parts' JSON reports.
    /// `auto` reads K and N from the scheduler running the job (GitLab, Kubernetes, AWS Batch,
    /// Slurm, Buildkite, CircleCI).
    #[arg(long, value_name = "K/N|auto")]
    partition: Option<crate::partition::PartitionArg>,
    /// With `--partition auto`: the scheduler to read when several schedulers' variables are set.
    #[arg(long, value_name = "NAME", requires = "partition")]
    partition_source: Option<String>,
    /// With `--partition auto` in a Kubernetes Indexed Job: the Job's completions (also
    /// TENSORPLAY_PARTITION_TOTAL).
    #[arg(long, value_name = "N", requires = "partition")]
    partition_total: Option<usize>,
    /// Worker threads [default: one per core].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    jobs: Option<u16>,
    /// For remote paths, read tensor bytes too (TP401): every byte is fetched, within
    /// --max-remote-bytes. Remote audits read metadata only otherwise.
    #[arg(long)]
    deep: bool,
    #[command(flatten)]
    remote: crate::remote::RemoteArgs,
    #[command(flatten)]
    signature: crate::signature::SignatureArgs,
}

fn load_config(explicit: Option<&Path>) -> anyhow::Result<Config> {
    match explicit {
        Some(path) => Ok(Config::load(path)?),
        None if Path::new(config::FILE_NAME).is_file() => {
            Ok(Config::load(Path::new(config::FILE_NAME))?)
        }
        None => Ok(Config::default()),
    }
}

/// What the flags decide before any file is read: the configuration, the rule options, the
/// fail-on level and the baseline to judge by.
pub struct Settings {
    pub config: Arc<Config>,
    pub options: Options,
    pub fail_on: FailOn,
    pub baseline: Option<Baseline>,
}

impl Settings {
    /// The settings `args` ask for, read and checked as the command reads them.
    pub fn from_args(args: &AuditArgs) -> anyhow::Result<Settings> {
        let config = Arc::new(load_config(args.rules.config.as_deref())?);
        let mut options = Options::new(
            &args.rules.select,
            &args.rules.ignore,
            args.rules.metadata_only,
        )?;
        options.gpu_budget = args.rules.gpu_budget;
        options.layout_facts = args.files.draws_layout();
        options.inventory =
            args.files.writes_bom() || args.format == Some(render::stdout::Format::Cyclonedx);
        // The flag overrides the file's `max_memory`.
        options.max_memory = args.rules.max_memory.or(config.max_memory);
        options.expect = match &args.rules.expect {
            Some(path) => Some(std::sync::Arc::new(crate::expect::load_layout(path)?)),
            None => None,
        };
        options.template_baseline = args
            .file
            .template_baseline
            .as_deref()
            .map(TemplateBaseline::load)
            .transpose()?
            .map(Arc::new);
        let baseline = args
            .rules
            .baseline
            .as_deref()
            .map(Baseline::load)
            .transpose()?;
        Ok(Settings {
            config,
            options,
            fail_on: FailOn::from(args.rules.fail_on),
            baseline,
        })
    }
}

/// The report of the files `args` name, and the messages of those that could not be judged
/// (no rule claims their failure): the audit without its output. `progress` draws the
/// progress line where the terminal allows it.
pub fn audit_paths(
    args: &AuditArgs,
    settings: &Settings,
    progress: bool,
) -> anyhow::Result<(Report, Vec<String>)> {
    let Settings {
        config,
        options,
        fail_on,
        ..
    } = settings;
    let (config, mut options, fail_on) = (Arc::clone(config), options.clone(), *fail_on);
    let gpu = gpu_target(args.file.load_to.as_deref())?;
    // Before any file is read: a job that cannot tell its share must say so at once.
    let share = args
        .partition
        .map(|arg| arg.resolve(args.partition_source.as_deref(), args.partition_total))
        .transpose()?;
    let gpu_lock = Arc::new(Mutex::new(()));
    let paths = args
        .paths
        .iter()
        .map(|p| args.remote.resolve(p))
        .collect::<anyhow::Result<Vec<_>>>()?;
    // Before any checkpoint is read: a missing trust source fails at once. A signature covers
    // a whole directory, which a partitioned run deals out in parts: it is verified in a run
    // of its own.
    if args.partition.is_some() && args.signature.any() {
        anyhow::bail!(
            "model signatures are not verified in a partitioned run: verify them in a job of its own (without --partition)"
        );
    }
    let signatures = args.signature.check(&paths, args.deep)?;
    let mut found = discover(&paths)?;
    let declared = skip_declared(&mut found, &config);
    // An audit of nothing must not read as a pass (a cache of symlinks, a wrong folder); files
    // the configuration declares are not checkpoints, and files named that no loader accepts,
    // were judged, so they are not nothing (a pre-commit run whose only staged `.bin` is a
    // tokenizer passes). A model directory whose signature was checked was judged too.
    if found.checkpoints.is_empty()
        && declared == 0
        && found.named_skipped == 0
        && signatures.is_empty()
        && !args.file.allow_empty
    {
        let paths: Vec<String> = args.paths.iter().map(|p| p.display().to_string()).collect();
        anyhow::bail!(
            "nothing to audit: no checkpoint found in {} ({} skipped; --allow-empty accepts this)",
            paths.join(", "),
            found.skipped.len()
        );
    }
    // After the emptiness check: a part may be empty when the whole run is not.
    // A set is dealt by shard only when its bytes are read here: its metadata alone is what
    // every part of it reads again.
    let by_shard = !args.rules.metadata_only && gpu.is_none();
    let (partition, shares) = match share {
        Some((part, source)) => {
            let selected = crate::partition::select(&mut found.checkpoints, part, source, by_shard);
            (Some(selected.partition), selected.shares)
        }
        None => (None, HashMap::new()),
    };
    let shared_sets: Arc<Mutex<Vec<SharedSet>>> = Arc::default();
    let scanned = Arc::new(AtomicU64::new(0));
    options.progress = Some(Arc::clone(&scanned));
    let progress = if args.rules.metadata_only || !progress {
        None
    } else {
        Progress::start(&scanned, &found.checkpoints, args.ci_mode)
    };
    // One memory budget for the run: files read side by side get an equal share of it each;
    // a file its share cannot hold is read again afterwards, alone, with the whole budget, so
    // that its verdict never depends on how many files ran beside it.
    let workers = rayon::current_num_threads().max(1);
    let shared = (workers > 1 && found.checkpoints.len() > 1).then(|| {
        let mut share = options.clone();
        share.max_memory = Some(options.read_limits(false).max_memory / workers as u64);
        share
    });
    let limit = Duration::from_secs(args.file.timeout_per_file);
    let audit_in = |target: Target, options: &Options, deferrable: bool| {
        let shown = target.path().display().to_string();
        let failed = |error: ReadError| {
            read_failure_with(&shown, &error, &config)
                .map(|file| Audited::Judged(Box::new(file)))
                .ok_or_else(|| error.to_string())
        };
        let (config, mut options, gpu_lock) =
            (Arc::clone(&config), options.clone(), Arc::clone(&gpu_lock));
        options.scan_share = shares.get(target.path()).cloned();
        let shared_sets = Arc::clone(&shared_sets);
        // A remote checkpoint is audited from its metadata unless --deep asks for every byte.
        options.metadata_only |= files::is_remote(target.path()) && !args.deep;
        let work = {
            let shown = shown.clone();
            move || {
                // A panic is a bug in tensorplay, and this file's verdict: it fails, the
                // others go on.
                std::panic::catch_unwind(AssertUnwindSafe(|| {
                    audit_one(
                        target,
                        &shown,
                        &config,
                        &options,
                        deferrable,
                        gpu,
                        &gpu_lock,
                        &shared_sets,
                    )
                }))
                .map_err(|panic| panic_message(panic.as_ref()))
            }
        };
        match within(limit, work).and_then(|done| done.transpose()) {
            Ok(Some(audited)) => audited,
            Err(detail) => failed(ReadError::Internal {
                path: PathBuf::from(&shown),
                detail,
            }),
            Ok(None) => failed(ReadError::TimeLimit {
                path: PathBuf::from(&shown),
                seconds: limit.as_secs(),
            }),
        }
    };
    // Files are handed out to `workers` threads of their own, which wait for each file's
    // audit with its time limit: the audit itself uses rayon's pool, which a worker waiting on
    // it must not occupy.
    let threads = workers.min(found.checkpoints.len()).max(1);
    let queue = Mutex::new(found.checkpoints.into_iter().enumerate());
    let finished: Option<Vec<(usize, Result<Audited, String>)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let next = queue.lock().unwrap_or_else(|e| e.into_inner()).next();
                        let Some((i, target)) = next else { break };
                        let result = match &shared {
                            Some(share) => audit_in(target, share, true),
                            None => audit_in(target, &options, false),
                        };
                        done.push((i, result));
                    }
                    done
                })
            })
            .collect();
        // A worker that panicked lost the files it had: the run has no verdict.
        handles
            .into_iter()
            .map(|h| h.join().ok())
            .collect::<Option<Vec<_>>>()
            .map(|parts| parts.into_iter().flatten().collect())
    });
    let mut results = finished.context("a worker thread failed: the run has no verdict")?;
    results.sort_by_key(|(i, _)| *i);
    let mut results: Vec<Result<Audited, String>> =
        results.into_iter().map(|(_, result)| result).collect();
    for result in &mut results {
        if let Ok(Audited::Alone(path)) = result {
            *result = audit_in(Target::again(path.clone()), &options, false);
        }
    }
    drop(progress);
    let mut files = Vec::with_capacity(results.len());
    let mut unreadable = Vec::new();
    for result in results {
        match result {
            Ok(Audited::Judged(file)) => files.push(*file),
            // Every deferred file was read again above.
            Ok(Audited::Alone(_)) => {}
            Err(message) => unreadable.push(message),
        }
    }
    for checked in &signatures {
        let mut file =
            tensorplay_audit::audit::signature_report(&checked.outcome, &config, &options);
        file.remote = checked.remote;
        if options.inventory {
            // The signature file is small and read whole to verify: hashed, as any file is.
            let path = PathBuf::from(&file.path);
            let (digests, _) = crate::inventory::gather(&path, std::slice::from_ref(&path), None);
            crate::inventory::attach(&mut file, digests, None);
        }
        files.push(file);
    }
    let mut report = Report::new(files, found.skipped, fail_on);
    report.signatures = signatures.into_iter().map(|c| c.outcome.facts).collect();
    report.partition = partition.map(|mut partition| {
        let mut sets = std::mem::take(&mut *shared_sets.lock().unwrap_or_else(|e| e.into_inner()));
        // Workers finish in any order; a retried part must write the same bytes.
        sets.sort_by(|a, b| a.path.cmp(&b.path));
        partition.shared_sets = sets;
        partition
    });
    Ok((report, unreadable))
}

pub fn run(args: &AuditArgs) -> anyhow::Result<ExitStatus> {
    let settings = Settings::from_args(args)?;
    if let Some(jobs) = args.jobs {
        rayon::ThreadPoolBuilder::new()
            .num_threads(usize::from(jobs))
            .build_global()
            .context("cannot start worker threads")?;
    }
    let format = render::stdout::Format::choose(args.format, args.ci_mode);
    let (mut report, unreadable) = match audit_paths(args, &settings, true) {
        Ok(audited) => audited,
        Err(e) => {
            // No report: the verdict is said where a report would have said it too.
            let lines: Vec<String> = crate::exit::error_lines(&e);
            could_not_judge(format, &lines)?;
            return Err(e);
        }
    };
    // A file that could not be read leaves the run without a verdict: it did not pass.
    if !unreadable.is_empty() {
        report.summary.passed = false;
    }
    let Settings {
        config, baseline, ..
    } = settings;
    // Writing a baseline records today's findings and judges the run by it, as the next run
    // with `--baseline` will be judged: it passes unless something no baseline hides (an
    // unreadable checkpoint) is there.
    let baseline = match &args.write_baseline {
        Some(path) => {
            let written = Baseline::from_report(&report);
            render::files::write_file(path, &written.to_json())?;
            let shown = printable(&path.display().to_string(), false);
            eprintln!(
                "tensorplay: wrote {shown}: {} recorded; runs with --baseline {shown} fail only on others",
                plural(written.findings.len(), "finding"),
            );
            Some(written)
        }
        None => baseline,
    };
    let mut stale = 0;
    if let Some(baseline) = &baseline {
        stale = baseline.suppress(&mut report).1;
    }

    crate::partition::seal(&mut report)?;
    args.files.write(&report)?;
    if format == render::stdout::Format::Github {
        render::github::append_step_summary(&report);
        crate::exit::print_commands(&render::github::annotations(&report))?;
    }
    let color = crate::color::enabled(args.color, args.ci_mode);
    let style = render::human::Style {
        color,
        verbose: args.verbose,
    };
    crate::exit::print(&render::stdout::render(&report, format, style)?)?;
    for note in crate::remote::read_notes() {
        eprintln!("note: {note}");
    }
    // A pattern that matched nothing is most likely misspelt; a part of a partitioned run
    // sees only its share of the files, so it cannot tell.
    if report.partition.is_none() {
        let file = args
            .rules
            .config
            .as_deref()
            .unwrap_or(Path::new(config::FILE_NAME));
        for unmatched in config.unmatched_ignores() {
            eprintln!(
                "warning: {}:{}: [[ignore]] path = \"{}\" matched no {}",
                printable(&file.display().to_string(), false),
                unmatched.line,
                printable(unmatched.pattern, false),
                if unmatched.skips {
                    "file"
                } else {
                    "checkpoint"
                }
            );
        }
    }
    if stale > 0 {
        eprintln!(
            "note: {} of the baseline occurred nowhere in this run (fixed, or under another path); --write-baseline refreshes it",
            plural(stale, "recorded finding")
        );
    }
    if args.verbose {
        if let Some(peak) = crate::peak::resident_bytes() {
            eprintln!("note: peak resident memory {} MiB", peak >> 20);
        }
    }

    if !unreadable.is_empty() {
        // Messages quote paths a server named: escaped like every report's text.
        let unreadable: Vec<String> = unreadable.iter().map(|m| printable(m, false)).collect();
        for message in &unreadable {
            eprintln!("error: {message}");
        }
        could_not_judge(format, &unreadable)?;
        return Ok(ExitStatus::Error);
    }
    Ok(if report.summary.passed {
        ExitStatus::Success
    } else {
        ExitStatus::Findings
    })
}

/// Ends a text report on stdout with why the run has no verdict (`reasons`, escaped), so
/// that a log read without stderr never reads as a pass; a JSON or SARIF document stays one.
fn could_not_judge(format: render::stdout::Format, reasons: &[String]) -> anyhow::Result<()> {
    use render::stdout::Format;
    if matches!(format, Format::Human | Format::Github) {
        let text: String = reasons
            .iter()
            .map(|reason| format!("could not judge: {reason}\n"))
            .collect();
        crate::exit::print(&text)?;
    }
    Ok(())
}

/// Reads one checkpoint and audits it, after loading it onto the GPU when asked.
/// A file's audit, or, read with a share of the budget that could not hold it, its path to
/// read again alone.
enum Audited {
    Judged(Box<FileReport>),
    Alone(PathBuf),
}

#[allow(clippy::too_many_arguments)]
fn audit_one(
    target: Target,
    shown: &str,
    config: &Config,
    options: &Options,
    deferrable: bool,
    gpu: Option<usize>,
    gpu_lock: &Mutex<()>,
    shared_sets: &Mutex<Vec<SharedSet>>,
) -> Result<Audited, String> {
    let path = target.path().to_owned();
    let remote = files::is_remote(&path);
    // The files the checkpoint is made of: for a bill of materials, and a remote one's facts.
    let parts = if options.inventory || remote {
        target.files()
    } else {
        Vec::new()
    };
    let why_not = crate::inventory::why_not_hashed(&path, options.metadata_only);
    let read = |target| {
        audit_read(
            target,
            shown,
            config,
            options,
            deferrable,
            gpu,
            gpu_lock,
            shared_sets,
        )
    };
    if !remote {
        let (audited, gathered) = std::thread::scope(|scope| {
            // For a bill of materials: the files' digests, hashed beside the audit.
            let hashing = options
                .inventory
                .then(|| scope.spawn(|| crate::inventory::gather(&path, &parts, why_not)));
            let audited = read(target);
            (audited, hashing.map(|h| h.join()))
        });
        let mut audited = audited?;
        if let Some(gathered) = gathered {
            let (digests, arch) = gathered.map_err(|panic| panic_message(panic.as_ref()))?;
            if let Audited::Judged(file) = &mut audited {
                crate::inventory::attach(file, digests, arch);
            }
        }
        return Ok(audited);
    }
    // Remote: bytes a scan asked for and could not have fetched (a storage's, under --deep)
    // fail the audit here, with the reason they could not be.
    let mut audited = match files::checked(&path, read(target)) {
        Ok(audited) => audited,
        Err(e) => read_failure_with(shown, &e, config)
            .map(|file| Audited::Judged(Box::new(file)))
            .ok_or_else(|| e.to_string()),
    };
    if let Ok(Audited::Judged(file)) = &mut audited {
        file.remote = crate::remote::facts(&parts, !options.metadata_only);
        if options.inventory {
            let (digests, arch) = crate::inventory::gather(&path, &parts, why_not);
            crate::inventory::attach(file, digests, arch);
        }
    }
    audited
}

/// Reads one checkpoint and audits it; for a share of a sharded set, records where the
/// tensors its byte-reading findings name stand in the set.
#[allow(clippy::too_many_arguments)]
fn audit_read(
    target: Target,
    shown: &str,
    config: &Config,
    options: &Options,
    deferrable: bool,
    gpu: Option<usize>,
    gpu_lock: &Mutex<()>,
    shared_sets: &Mutex<Vec<SharedSet>>,
) -> Result<Audited, String> {
    let limits = options.read_limits(gpu.is_some());
    let path = target.path().to_owned();
    let over_share = |over_budget: bool| deferrable && over_budget;
    let ckpt = match target.into_probe().and_then(|p| load::read_with(p, limits)) {
        Ok(ckpt) => ckpt,
        Err(e) if over_share(e.over_budget()) => return Ok(Audited::Alone(path)),
        Err(e) => {
            return read_failure_with(shown, &e, config)
                .map(|file| Audited::Judged(Box::new(file)))
                .ok_or_else(|| e.to_string())
        }
    };
    // Asked only of a share, which may defer the file: the audit asks again of every file.
    if deferrable && tensorplay_audit::audit::views_within_budget(&ckpt, shown, options).is_err() {
        return Ok(Audited::Alone(path));
    }
    let loaded = match gpu {
        Some(ordinal) => {
            // One device: loads take turns.
            let _turn = gpu_lock.lock().unwrap_or_else(|e| e.into_inner());
            let loaded = load_to_device(&ckpt, ordinal, config.allocator.clone())
                .map_err(|e| format!("{shown}: loading onto cuda:{ordinal}: {e}"))?;
            Some(loaded)
        }
        None => None,
    };
    let report = audit(&ckpt, shown, config, options, loaded.as_ref());
    if options.scan_share.is_some() {
        let set = SharedSet {
            path: shown.to_owned(),
            tensor_order: scan_order(&ckpt, &report),
        };
        shared_sets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(set);
    }
    // Freeing a million tensors' layers takes a while and decides nothing: it runs beside
    // the rest of the audit on a thread of its own (started at once, so memory stays bounded
    // over many files), and the process may end before it is done. Where no thread can be
    // started, the checkpoint is freed here, with the closure that holds it.
    let _ = std::thread::Builder::new()
        .name("drop-checkpoint".into())
        .spawn(move || drop(ckpt));
    Ok(Audited::Judged(Box::new(report)))
}

/// Where each tensor named by `report`'s byte-reading findings stands in `ckpt`.
fn scan_order(
    ckpt: &tensorplay_engine::Checkpoint,
    report: &FileReport,
) -> BTreeMap<String, usize> {
    let named: BTreeSet<&str> = report
        .findings
        .iter()
        .filter(|f| crate::rules_bytes::reads_bytes(f))
        .flat_map(|f| f.tensors.iter().map(String::as_str))
        .collect();
    let mut order = BTreeMap::new();
    for (i, t) in ckpt.tensors.iter().enumerate() {
        if named.contains(t.name()) {
            order.entry(t.name().to_owned()).or_insert(i);
        }
    }
    order
}

/// `work`'s result, or `Ok(None)` when it takes longer than `limit`: it runs on a thread of its
/// own, left behind (and ended with the process) if it overruns, so one file never hangs the
/// run. `Err` says why it could not run.
fn within<T: Send + 'static>(
    limit: Duration,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<Option<T>, String> {
    use std::sync::mpsc::RecvTimeoutError;
    let (done, result) = std::sync::mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("audit-file".into())
        .spawn(move || {
            let _ = done.send(work());
        })
        .map_err(|e| format!("cannot start a thread to audit it: {e}"))?;
    match result.recv_timeout(limit) {
        Ok(value) => Ok(Some(value)),
        Err(RecvTimeoutError::Timeout) => Ok(None),
        Err(RecvTimeoutError::Disconnected) => Err("its audit ended without a result".into()),
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    let text = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a worker panicked".to_owned());
    format!("{text} (please report this)")
}

/// The device `--load-to` asks for, if it can be had: `cuda:N` without a usable GPU is an
/// error (exit 2); `auto` without one is a note and no load.
fn gpu_target(load_to: Option<&str>) -> anyhow::Result<Option<usize>> {
    let Some(wanted) = load_to else {
        return Ok(None);
    };
    let ordinal = match wanted {
        "auto" => None,
        other => match other
            .strip_prefix("cuda:")
            .and_then(|n| n.parse::<usize>().ok())
        {
            Some(n) => Some(n),
            None => anyhow::bail!("--load-to {other}: expected cuda:N or auto"),
        },
    };
    match (gpu_status(), ordinal) {
        (GpuStatus::Available { devices }, Some(n)) if n >= devices => {
            anyhow::bail!("--load-to cuda:{n}: this machine has {devices} CUDA device(s)")
        }
        (GpuStatus::Available { .. }, n) => Ok(Some(n.unwrap_or(0))),
        (GpuStatus::Unavailable(reason), Some(n)) => {
            anyhow::bail!("--load-to cuda:{n}: the GPU path is unavailable: {reason}")
        }
        (GpuStatus::Unavailable(reason), None) => {
            eprintln!(
                "note: --load-to auto: no GPU load ({reason}); the simulated load still runs"
            );
            Ok(None)
        }
    }
}
