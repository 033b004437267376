//! The NumPy `.npy` reader, whatever the input begins with: the header as numpy's
//! `literal_eval` reads it, every dtype in either byte order, Fortran order, object arrays
//! through the pickle machine.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tensorplay_engine::load::{read_buffer_as, Sniffed};
use tensorplay_engine::Format;
use tensorplay_fuzz::{buffer, consume, limits};

fuzz_target!(|data: &[u8]| {
    consume(read_buffer_as(
        Sniffed::Format(Format::Numpy),
        &buffer(data),
        limits(),
    ));
});
