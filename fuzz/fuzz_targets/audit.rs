//! The whole audit of a byte buffer, as `tensorplay audit` runs it on one file: the reader
//! chosen from the content, every rule with the default config (the byte scans, the
//! simulated load, the view analysis), or the read failure's report.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tensorplay_audit::audit::{audit, read_failure};
use tensorplay_audit::config::Config;
use tensorplay_audit::options::Options;
use tensorplay_engine::load::from_buffer_with;
use tensorplay_fuzz::{buffer, MAX_MEMORY};

fuzz_target!(|data: &[u8]| {
    let options = Options {
        max_memory: Some(MAX_MEMORY),
        // With a GPU budget the simulated load runs twice, the second time to its end.
        gpu_budget: Some(8 << 30),
        ..Options::default()
    };
    let config = Config::default();
    // The limits the CLI reads with: deflated records stay compressed and are streamed.
    let report = match from_buffer_with(buffer(data), options.read_limits(false)) {
        Ok(ckpt) => Some(audit(&ckpt, "fuzz-input", &config, &options, None)),
        Err(e) => read_failure("fuzz-input", &e),
    };
    std::hint::black_box(report.map(|r| r.findings.len()));
});
