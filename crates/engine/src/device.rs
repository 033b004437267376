//! Devices, parsed from the location strings checkpoints record.

use std::fmt;

/// Where a storage's bytes live, or were saved from.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Device {
    /// Host memory.
    Cpu,
    /// A CUDA device by ordinal (`cuda` alone means ordinal 0 at load time, but is kept apart).
    Cuda(Option<u32>),
    /// No memory at all: PyTorch's meta device.
    Meta,
    /// Any other backend (`mps`, `xpu:1`, a private-use name…), kept verbatim. Boxed: the
    /// rare case stays one pointer wide, so every tensor's three device fields stay small.
    #[allow(clippy::box_collection)] // a `Box<str>` would be two pointers wide
    Other(Box<String>),
}

impl Device {
    /// Parses a location string such as `cpu`, `cuda:1` or `meta`. Never fails:
    /// unknown locations are kept as they were written.
    pub fn parse(location: &str) -> Device {
        match location {
            "cpu" => Device::Cpu,
            "meta" => Device::Meta,
            "cuda" => Device::Cuda(None),
            _ => match location.strip_prefix("cuda:").map(str::parse::<u32>) {
                Some(Ok(ordinal)) => Device::Cuda(Some(ordinal)),
                _ => Device::Other(Box::new(location.to_owned())),
            },
        }
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Meta => f.write_str("meta"),
            Device::Cuda(None) => f.write_str("cuda"),
            Device::Cuda(Some(n)) => write!(f, "cuda:{n}"),
            Device::Other(s) => f.write_str(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_round_trip_verbatim() {
        for loc in [
            "cpu", "meta", "cuda", "cuda:0", "cuda:7", "mps", "xpu:1", "cuda:x", "cuda:-1",
        ] {
            assert_eq!(Device::parse(loc).to_string(), loc);
        }
        assert_eq!(Device::parse("cuda:1"), Device::Cuda(Some(1)));
        assert_eq!(
            Device::parse("cuda:x"),
            Device::Other(Box::new("cuda:x".into()))
        );
    }
}
