//! The GGUF reader, whatever the input begins with: header, key/values and nested arrays,
//! tensor infos, alignment, the tensors' bytes and the storages of overlapping ones.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tensorplay_engine::load::{read_buffer_as, Sniffed};
use tensorplay_engine::Format;
use tensorplay_fuzz::{buffer, consume, limits};

fuzz_target!(|data: &[u8]| {
    consume(read_buffer_as(
        Sniffed::Format(Format::Gguf),
        &buffer(data),
        limits(),
    ));
});
