//! End-to-end tests of tensorplay against the committed fixtures, one module per topic.
//! Fixtures and their truth files come from `fixtures/make.sh` (the real safetensors library);
//! nothing here needs Python.

mod common;

mod acceptance;
mod allowlist;
mod architecture;
mod audit;
mod bad_input;
mod budget;
mod bypass;
mod chat_templates;
mod color;
mod convert;
mod cyclonedx;
mod dcp;
mod dcp_bounds;
mod did_you_mean;
mod diff;
mod differential_dcp;
mod differential_pickle;
mod differential_script_pt2;
mod extensions;
// Symlinks, FIFOs and sockets: Unix only.
#[cfg(unix)]
mod discovery;
mod fuzz_regressions;
mod gguf;
mod hostile_memory;
mod html_report;
mod human_report;
mod inspect;
mod joblib;
mod keras;
mod legacy_streams;
mod models;
mod nested;
mod numpy;
mod partition;
mod partition_auto;
mod partition_retry;
mod partition_shards;
mod presets;
mod producers;
mod pt2;
mod pytorch;
mod read_only;
// Remote objects are read through sparse maps, which only Linux's mincore can watch.
#[cfg(target_os = "linux")]
mod remote;
#[cfg(target_os = "linux")]
mod remote_hostile;
mod renderers;
mod report_limits;
mod robustness;
mod rules_doc;
mod sb3;
mod scale;
mod signatures;
// Served by the loopback Hub, which needs Linux's remote reads as `remote` does.
#[cfg(target_os = "linux")]
mod signatures_remote;
mod sklearn_zoo;
mod storage_names;
mod tensor_kinds;
mod terminal;
mod ties;
mod views;
mod weights_only;
mod zip_layouts;
