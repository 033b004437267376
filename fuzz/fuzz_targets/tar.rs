//! The old tar checkpoint reader (`torch.save` before 0.4): members, name normalisation,
//! the pickles audited in each and the legacy stream the same bytes may be.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tensorplay_engine::load::{read_buffer_as, Sniffed};
use tensorplay_fuzz::{buffer, consume, limits};

fuzz_target!(|data: &[u8]| {
    consume(read_buffer_as(Sniffed::Tar, &buffer(data), limits()));
});
