//! A `.pt2` program's JSON (`models/<name>.json`): every string torch would evaluate found
//! and judged (`pt2/expr.rs`), the signature's names read.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tensorplay_engine::load::check_pt2_program;

fuzz_target!(|data: &[u8]| {
    let read = check_pt2_program(data);
    std::hint::black_box(
        read.map(|(evaluated, names)| (evaluated.len(), names.len()))
            .ok(),
    );
});
