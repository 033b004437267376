//! The non-executing pickle machine: every stream of a plain pickle file (machine, allowlist,
//! tensor rebuilds, flattening), then the same bytes as one TorchScript-loader stream.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;
use tensorplay_engine::load::{read_buffer_as, Sniffed};
use tensorplay_engine::pickle::{unpickle, Budget, Loader};
use tensorplay_engine::Format;
use tensorplay_fuzz::{buffer, consume, limits, MAX_MEMORY};

fuzz_target!(|data: &[u8]| {
    consume(read_buffer_as(
        Sniffed::Format(Format::Pickle),
        &buffer(data),
        limits(),
    ));
    let budget = Budget {
        max_memory: MAX_MEMORY,
        ..Budget::default()
    };
    let unpickled = unpickle(
        data,
        Path::new("fuzz-input"),
        "data.pkl",
        0,
        Loader::TorchScript,
        &budget,
    );
    std::hint::black_box(unpickled.map(|u| u.len).map_err(|e| e.to_string())).ok();
});
