//! joblib files: the same bytes as an uncompressed joblib pickle (wrappers, padding, arrays
//! written into the stream, object arrays' nested pickles, the plain pickle.load reading
//! beside joblib's) and as a compressed one (the zlib and gzip inflated within the budget,
//! the other compressors refused).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tensorplay_engine::load::{read_buffer_as, Sniffed};
use tensorplay_engine::Format;
use tensorplay_fuzz::{buffer, consume, limits};

fuzz_target!(|data: &[u8]| {
    let buffer = buffer(data);
    consume(read_buffer_as(
        Sniffed::Format(Format::Pickle),
        &buffer,
        limits(),
    ));
    consume(read_buffer_as(
        Sniffed::Format(Format::Joblib),
        &buffer,
        limits(),
    ));
});
