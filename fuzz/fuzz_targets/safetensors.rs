//! The safetensors reader, whatever the input begins with.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tensorplay_engine::load::{read_buffer_as, Sniffed};
use tensorplay_engine::Format;
use tensorplay_fuzz::{buffer, consume, limits};

fuzz_target!(|data: &[u8]| {
    consume(read_buffer_as(
        Sniffed::Format(Format::Safetensors),
        &buffer(data),
        limits(),
    ));
});
