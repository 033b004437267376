//! The legacy readers: an old tar checkpoint when the first block is a header `tarfile`
//! opens (as the sniffer decides), otherwise the legacy stacked-pickle stream.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tensorplay_engine::load::{read_buffer_as, sniff, Sniffed};
use tensorplay_engine::Format;
use tensorplay_fuzz::{buffer, consume, limits};

fuzz_target!(|data: &[u8]| {
    let kind = match sniff(data) {
        Sniffed::Tar => Sniffed::Tar,
        _ => Sniffed::Format(Format::PytorchLegacy),
    };
    consume(read_buffer_as(kind, &buffer(data), limits()));
});
