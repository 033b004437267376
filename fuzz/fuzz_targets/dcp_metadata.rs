//! A torch.distributed.checkpoint `.metadata` alone: the pickle read as DCP's dataclasses,
//! every tensor's chunks checked to tile it (pairs bounded per checkpoint), every item
//! located — what the directory reader does before it reads any item.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tensorplay_engine::load::check_dcp_metadata;
use tensorplay_fuzz::limits;

fuzz_target!(|data: &[u8]| {
    let located = check_dcp_metadata(data, limits());
    std::hint::black_box(located.map_err(|e| e.to_string()).ok());
});
