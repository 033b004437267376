//! The zip reader, through the PyTorch zip checkpoint reader (archive validation, record
//! lookup, inflate, TorchScript archives), whatever the input begins with.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tensorplay_engine::load::{read_buffer_as, Sniffed};
use tensorplay_fuzz::{buffer, consume, limits};

fuzz_target!(|data: &[u8]| {
    consume(read_buffer_as(Sniffed::Zip, &buffer(data), limits()));
});
