//! DataPtr: the address a storage's bytes really live at, on which device, owned by what.

use crate::device::Device;
use crate::error::{Error, Result};
use crate::memory::HostBuffer;
use std::ops::Range;
use std::sync::Arc;

/// The final layer: where the bytes are.
#[derive(Debug, Clone)]
pub struct DataPtr {
    // No address field: a host address is the buffer's plus the range start, any other is 0;
    // and no device beside the owner: bytes in host memory or the file are on the CPU, and
    // only an owner of nothing says where. A million storages hold 24 bytes less each.
    held: Held,
}

/// Where the bytes of a host or deferred owner are.
static CPU: Device = Device::Cpu;

/// [`Owner`] as it is kept: the two rare owners nested in one variant, so the host buffer's
/// pointer alone tells it apart from them and a storage holds 24 bytes rather than 32 (with
/// its device and location in 16, a storage fits a 96-byte allocation, not a 112-byte one).
#[derive(Debug, Clone)]
enum Held {
    Host {
        buffer: Arc<HostBuffer>,
        range: Range<u64>,
    },
    Elsewhere(Elsewhere),
}

/// The owners of bytes in no host buffer.
#[derive(Debug, Clone)]
enum Elsewhere {
    None(Device),
    Deferred(Box<Deferred>),
}

/// What keeps a DataPtr's bytes alive.
#[derive(Debug, Clone)]
pub enum Owner<'a> {
    /// A range of a host buffer (a mapped file or heap bytes).
    Host {
        /// The buffer.
        buffer: &'a Arc<HostBuffer>,
        /// The range inside it.
        range: Range<u64>,
    },
    /// Nothing: the storage has no bytes (meta tensors), on this device.
    None(&'a Device),
    /// Bytes left compressed in the file (a deflated zip record). Never held whole: a scan
    /// inflates them piece by piece, and `--metadata-only` not at all.
    Deferred(&'a Deferred),
}

/// A record left compressed in the file: its `compressed` range of a buffer, which inflates to
/// `len` bytes.
#[derive(Debug, Clone)]
pub struct Deferred {
    /// The buffer holding the compressed record.
    pub buffer: Arc<HostBuffer>,
    /// The compressed bytes inside it.
    pub compressed: Range<u64>,
    /// The size the record declares once inflated.
    pub len: u64,
}

impl DataPtr {
    /// Points at `range` of a host buffer; the range must lie inside the buffer.
    pub fn host(buffer: Arc<HostBuffer>, range: Range<u64>) -> Result<Self> {
        if range.start > range.end || range.end > buffer.len() {
            return Err(Error::OutsideBuffer {
                path: buffer.source().to_owned(),
                start: range.start,
                end: range.end,
                len: buffer.len(),
            });
        }
        Ok(DataPtr {
            held: Held::Host { buffer, range },
        })
    }

    /// Owns `bytes` on the heap (decompressed or byte-swapped records, hand-built storages);
    /// `source` names where they came from.
    pub fn heap(source: impl Into<std::path::PathBuf>, bytes: Vec<u8>) -> Self {
        let len = bytes.len() as u64;
        let buffer = HostBuffer::from_vec(source, bytes);
        DataPtr {
            held: Held::Host {
                buffer,
                range: 0..len,
            },
        }
    }

    /// A storage whose bytes are compressed at `compressed` of `buffer`, not held in memory:
    /// [`bytes`](Self::bytes) has none, [`len`](Self::len) is the declared `len`.
    pub fn deferred(buffer: Arc<HostBuffer>, compressed: Range<u64>, len: u64) -> Self {
        DataPtr {
            held: Held::Elsewhere(Elsewhere::Deferred(Box::new(Deferred {
                buffer,
                compressed,
                len,
            }))),
        }
    }

    /// A DataPtr that owns nothing, for storages without bytes, on `device`.
    pub fn none(device: Device) -> Self {
        DataPtr {
            held: Held::Elsewhere(Elsewhere::None(device)),
        }
    }

    /// The address in the owning process (host virtual address, or device pointer).
    pub fn address(&self) -> u64 {
        match self.owner() {
            // Host addresses fit u64 on every supported target; the sum stays inside the buffer.
            Owner::Host { buffer, range } => buffer.address() + range.start,
            Owner::None(_) | Owner::Deferred(_) => 0,
        }
    }

    /// The file the bytes are read from; `None` for storages without bytes.
    pub fn source(&self) -> Option<&std::path::Path> {
        match self.owner() {
            Owner::Host { buffer, .. } => Some(buffer.source()),
            Owner::Deferred(d) => Some(d.buffer.source()),
            Owner::None(_) => None,
        }
    }

    /// The device the bytes really are on.
    pub fn device(&self) -> &Device {
        match self.owner() {
            Owner::None(device) => device,
            Owner::Host { .. } | Owner::Deferred(_) => &CPU,
        }
    }

    /// What owns the bytes.
    pub fn owner(&self) -> Owner<'_> {
        match &self.held {
            Held::Host { buffer, range } => Owner::Host {
                buffer,
                range: range.clone(),
            },
            Held::Elsewhere(Elsewhere::None(device)) => Owner::None(device),
            Held::Elsewhere(Elsewhere::Deferred(d)) => Owner::Deferred(d),
        }
    }

    /// The bytes, when they are in host memory: of a remote object, fetched first (these
    /// alone); when they cannot be, none, and `files::checked` reports why.
    pub fn bytes(&self) -> Option<&[u8]> {
        match self.owner() {
            Owner::Host { buffer, range } => {
                let bytes = buffer.range(range.clone()).ok()?;
                (bytes.len() as u64 == range.end - range.start).then_some(bytes)
            }
            Owner::None(_) | Owner::Deferred(_) => None,
        }
    }

    /// Number of bytes owned (0 for none).
    pub fn len(&self) -> u64 {
        match self.owner() {
            Owner::Host { range, .. } => range.end - range.start,
            Owner::Deferred(d) => d.len,
            Owner::None(_) => 0,
        }
    }

    /// Whether no bytes are owned.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Maps in `range` (relative to the DataPtr's own range) before a scan reads it
    /// ([`HostBuffer::read_ahead`]); nothing for bytes not in a mapped file.
    pub fn read_ahead(&self, range: Range<u64>) {
        if let Some((buffer, within)) = self.in_buffer(range) {
            buffer.read_ahead(within);
        }
    }

    /// Hints that `range` of these bytes (0 is the first byte of this DataPtr) has been read
    /// and will not be needed again soon, so a scan of a file larger than memory keeps
    /// resident memory bounded (see [`HostBuffer::release`]). Heap bytes, storages without
    /// bytes and ranges that do not lie inside this DataPtr are left alone.
    pub fn release_scanned(&self, range: Range<u64>) {
        if let Some((buffer, within)) = self.in_buffer(range) {
            buffer.release(within);
        }
    }

    /// `range` of these bytes as a range of the host buffer holding them; `None` for bytes
    /// in no host buffer, or a range that does not lie inside this DataPtr.
    fn in_buffer(&self, range: Range<u64>) -> Option<(&HostBuffer, Range<u64>)> {
        let Held::Host { buffer, range: own } = &self.held else {
            return None;
        };
        let start = own.start.checked_add(range.start)?;
        let end = own.start.checked_add(range.end)?;
        (start <= end && end <= own.end).then_some((&**buffer, start..end))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file removed when dropped.
    struct TempFile(std::path::PathBuf);

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    #[test]
    fn release_scanned_and_read_ahead_keep_the_bytes_readable() {
        let file = TempFile(
            std::env::temp_dir().join(format!("tensorplay-release-scanned-{}", std::process::id())),
        );
        std::fs::write(&file.0, vec![7u8; 3 << 16]).unwrap();
        let buffer = HostBuffer::map_file(&file.0).unwrap();
        let ptr = DataPtr::host(buffer, 4096..(2 << 16)).unwrap();
        ptr.release_scanned(0..(1 << 16));
        // Past the DataPtr, reversed, or overflowing: ignored.
        ptr.release_scanned(0..(3 << 16));
        ptr.release_scanned(Range { start: 10, end: 5 });
        ptr.release_scanned(u64::MAX - 1..u64::MAX);
        assert!(ptr.bytes().unwrap().iter().all(|&b| b == 7));
        // Mapping pages in ahead of a scan is advice too: inside, past the end or reversed.
        ptr.read_ahead(0..(1 << 16));
        ptr.read_ahead(0..(3 << 16));
        ptr.read_ahead(Range { start: 10, end: 5 });
        assert!(ptr.bytes().unwrap().iter().all(|&b| b == 7));
        assert_eq!(ptr.len(), (2 << 16) - 4096);

        let heap = DataPtr::heap("mem", vec![1, 2, 3]);
        heap.release_scanned(0..3);
        assert_eq!(heap.bytes(), Some(&[1u8, 2, 3][..]));
        DataPtr::none(Device::Meta).release_scanned(0..3);
    }
}
