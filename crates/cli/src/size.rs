//! Byte sizes on the command line: the same syntax as `tensorplay.toml`'s `max_memory`.

pub use tensorplay_audit::config::parse_size;
