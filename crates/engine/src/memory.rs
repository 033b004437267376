//! Host memory backends: where the bytes of host-resident storages are kept.

use crate::error::{Error, Result};
use memmap2::Mmap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The default memory budget of a read: far above any metadata a real checkpoint needs, well
/// below a CI runner.
pub const DEFAULT_MAX_MEMORY: u64 = 1 << 30;

/// How the process hands memory it freed back to the system at once, where the binary that
/// picked the allocator says (the CLI's mimalloc hands it back only after a delay).
static HAND_BACK: std::sync::OnceLock<fn()> = std::sync::OnceLock::new();

/// Sets what [`hand_back`] calls, once for the process.
pub fn set_hand_back(call: fn()) {
    let _ = HAND_BACK.set(call);
}

/// Hands the memory freed so far back to the system, where the binary said how: a reading
/// after one that let go of much (a pickle's lists, refused at the budget) would otherwise
/// find it still resident beside its own, past the budget.
pub(crate) fn hand_back() {
    if let Some(call) = HAND_BACK.get() {
        call();
    }
}

/// A read-only block of host bytes that storages point into.
pub struct HostBuffer {
    source: PathBuf,
    backing: Backing,
}

enum Backing {
    Mapped(Mmap),
    Heap(Box<[u8]>),
    /// A remote object's bytes, fetched as they are asked for (see `files`).
    Remote(Arc<crate::files::RemoteBytes>),
    /// A byte range of another buffer (one item of a file that holds several), sharing its
    /// bytes; the range was checked against the buffer when the window was made.
    Window {
        parent: Arc<HostBuffer>,
        start: usize,
        end: usize,
    },
    /// Memory another owner keeps alive (a live tensor's storage in this process), read in
    /// place; `owner` is held as long as the buffer is. An address, not a pointer, so the
    /// buffer stays `Send` and `Sync` as the others are.
    Borrowed {
        address: usize,
        len: usize,
        _owner: Box<dyn std::any::Any + Send + Sync>,
    },
}

/// Which host backend holds a buffer's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostBackend {
    /// A read-only memory map of a file range: zero copy.
    Mmap,
    /// Bytes owned on the heap (decompressed or byte-swapped data, tests).
    Heap,
    /// Byte ranges of a remote object, fetched as they are read.
    Remote,
    /// Memory of a live tensor in this process, read in place.
    Live,
}

impl HostBackend {
    /// Short name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            HostBackend::Mmap => "mmap",
            HostBackend::Heap => "heap",
            HostBackend::Remote => "remote",
            HostBackend::Live => "live",
        }
    }
}

impl HostBuffer {
    /// Maps a whole file read-only. An empty file is an error (there is nothing to map).
    pub fn map_file(path: &Path) -> Result<Arc<Self>> {
        let io = |source| Error::Io {
            path: path.to_owned(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        if file.metadata().map_err(io)?.len() == 0 {
            return Err(Error::Empty {
                path: path.to_owned(),
            });
        }
        // SAFETY: the map is read-only and tensorplay never writes the file. Another process
        // truncating it while it is mapped is outside what any mmap reader can defend against;
        // CI inputs are files at rest.
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        Ok(Arc::new(HostBuffer {
            source: path.to_owned(),
            backing: Backing::Mapped(map),
        }))
    }

    /// Takes ownership of bytes on the heap; `source` names where they came from.
    pub fn from_vec(source: impl Into<PathBuf>, bytes: Vec<u8>) -> Arc<Self> {
        Arc::new(HostBuffer {
            source: source.into(),
            backing: Backing::Heap(bytes.into_boxed_slice()),
        })
    }

    /// A remote object's bytes, fetched as they are asked for.
    pub(crate) fn remote(source: PathBuf, bytes: Arc<crate::files::RemoteBytes>) -> Arc<Self> {
        Arc::new(HostBuffer {
            source,
            backing: Backing::Remote(bytes),
        })
    }

    /// The `len` bytes at `address` in this process, read where they are, with `owner` held
    /// for as long as the buffer is: a live tensor's storage, whose owner keeps it allocated.
    ///
    /// # Safety
    /// `address..address + len` must be readable memory of this process that stays allocated
    /// while `owner` is alive, and nothing may write it while the buffer's bytes are borrowed.
    pub unsafe fn borrowed(
        source: impl Into<PathBuf>,
        address: *const u8,
        len: usize,
        owner: Box<dyn std::any::Any + Send + Sync>,
    ) -> Arc<Self> {
        Arc::new(HostBuffer {
            source: source.into(),
            backing: Backing::Borrowed {
                address: address as usize,
                len,
                _owner: owner,
            },
        })
    }

    /// The bytes `range` of `parent` as a buffer of their own, without copying: offsets in
    /// it count from `range.start`, and [`file_offset`](Self::file_offset) says where that
    /// lies. `None` when the range is not inside `parent`.
    pub fn window(parent: &Arc<HostBuffer>, range: std::ops::Range<u64>) -> Option<Arc<Self>> {
        let start = usize::try_from(range.start).ok()?;
        let end = usize::try_from(range.end).ok()?;
        if start > end || range.end > parent.len() {
            return None;
        }
        Some(Arc::new(HostBuffer {
            source: parent.source.clone(),
            backing: Backing::Window {
                parent: Arc::clone(parent),
                start,
                end,
            },
        }))
    }

    /// All the bytes. A remote object's are fetched whole first; when they cannot be, there
    /// are none, and `files::checked` reports why. Readers that need only part of a large
    /// object ask for it with [`range`](Self::range).
    pub fn bytes(&self) -> &[u8] {
        match &self.backing {
            Backing::Mapped(map) => map,
            Backing::Heap(bytes) => bytes,
            Backing::Remote(remote) => remote.whole_or_nothing(),
            // Of a remote parent, the window's bytes alone are fetched.
            Backing::Window { parent, start, end } => {
                parent.range(*start as u64..*end as u64).unwrap_or_default()
            }
            Backing::Borrowed { len: 0, .. } => &[],
            // SAFETY: `borrowed`'s caller promised these bytes readable, allocated while the
            // owner this buffer holds is alive, and unwritten while borrowed.
            Backing::Borrowed { address, len, .. } => unsafe {
                std::slice::from_raw_parts(*address as *const u8, *len)
            },
        }
    }

    /// The bytes of `range`, clipped to the buffer (shorter, or empty, past its end): a remote
    /// object's fetched first where they are not yet, or the reason they cannot be.
    pub fn range(&self, range: std::ops::Range<u64>) -> Result<&[u8]> {
        match &self.backing {
            Backing::Remote(remote) => remote.range(range),
            Backing::Window { parent, start, end } => parent.range(in_parent(*start, *end, range)),
            _ => {
                let bytes = self.bytes();
                let end = range.end.min(bytes.len() as u64);
                let start = range.start.min(end);
                // Both fit: they are at most the slice's length.
                Ok(bytes.get(start as usize..end as usize).unwrap_or_default())
            }
        }
    }

    /// Asks for the bytes of `ranges` ahead of a reading that will ask for each in turn: a
    /// remote object fetches those it does not hold, several requests at once; a buffer in
    /// memory has them already. Nothing is lent or refused here: the reading still asks.
    pub fn prefetch(&self, ranges: &[std::ops::Range<u64>]) {
        match &self.backing {
            Backing::Remote(remote) => remote.prefetch(ranges),
            Backing::Window { parent, start, end } => {
                let within: Vec<_> = ranges
                    .iter()
                    .map(|r| in_parent(*start, *end, r.clone()))
                    .collect();
                parent.prefetch(&within);
            }
            _ => {}
        }
    }

    /// The address of the first byte in this process, without reading any.
    pub fn address(&self) -> u64 {
        match &self.backing {
            Backing::Remote(remote) => remote.address(),
            Backing::Window { parent, start, .. } => parent.address().saturating_add(*start as u64),
            _ => self.bytes().as_ptr() as u64,
        }
    }

    /// Where offset 0 of these bytes lies in [`source`](Self::source): 0 but for a window.
    pub fn file_offset(&self) -> u64 {
        match &self.backing {
            Backing::Window { parent, start, .. } => {
                parent.file_offset().saturating_add(*start as u64)
            }
            Backing::Mapped(_)
            | Backing::Heap(_)
            | Backing::Borrowed { .. }
            | Backing::Remote(_) => 0,
        }
    }

    /// Length in bytes (a remote object's, as its store listed it: nothing is fetched).
    pub fn len(&self) -> u64 {
        match &self.backing {
            Backing::Remote(remote) => remote.len(),
            Backing::Window { start, end, .. } => (*end - *start) as u64,
            _ => self.bytes().len() as u64,
        }
    }

    /// Whether the buffer holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Tells the kernel the pages of `range` will not be read again soon, so a scan over a
    /// file larger than memory keeps resident memory bounded. Only mapped files are affected;
    /// it is a hint, and a failed hint changes nothing.
    pub fn release(&self, range: std::ops::Range<u64>) {
        if let Backing::Window { parent, start, end } = &self.backing {
            return parent.release(in_parent(*start, *end, range));
        }
        if let Some((map, start, len)) = self.mapped(range) {
            #[cfg(unix)]
            // SAFETY: the map is a read-only, private mapping of a file that tensorplay never
            // writes. MADV_DONTNEED drops its pages; the next read of them faults the same
            // bytes back in from the file, so no reference ever observes different data.
            let _ = unsafe {
                map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, len)
            };
            #[cfg(not(unix))]
            let _ = (map, start, len);
        }
    }

    /// A mapped file's map, and `range` of it clipped to it as a start and a length; `None`
    /// for other bytes, or where nothing of `range` is mapped.
    fn mapped(&self, range: std::ops::Range<u64>) -> Option<(&Mmap, usize, usize)> {
        let Backing::Mapped(map) = &self.backing else {
            return None;
        };
        let start = usize::try_from(range.start).ok()?;
        let end = usize::try_from(range.end).ok()?.min(map.len());
        (start < end).then_some((map, start, end - start))
    }

    /// Maps in the pages of `range` of a mapped file at once, before a scan reads them: one
    /// call rather than a page fault every 64 KiB. Advice only: where the kernel declines it
    /// (before Linux 5.14), the scan faults the pages in as it reads.
    pub fn read_ahead(&self, range: std::ops::Range<u64>) {
        if let Backing::Window { parent, start, end } = &self.backing {
            return parent.read_ahead(in_parent(*start, *end, range));
        }
        if let Some((map, start, len)) = self.mapped(range) {
            #[cfg(target_os = "linux")]
            let _ = map.advise_range(memmap2::Advice::PopulateRead, start, len);
            #[cfg(not(target_os = "linux"))]
            let _ = (map, start, len);
        }
    }

    /// The file the bytes came from.
    pub fn source(&self) -> &Path {
        &self.source
    }

    /// Which backend holds the bytes.
    pub fn backend(&self) -> HostBackend {
        match &self.backing {
            Backing::Mapped(_) => HostBackend::Mmap,
            Backing::Heap(_) => HostBackend::Heap,
            Backing::Remote(_) => HostBackend::Remote,
            Backing::Window { parent, .. } => parent.backend(),
            Backing::Borrowed { .. } => HostBackend::Live,
        }
    }
}

impl std::fmt::Debug for HostBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The bytes are not shown: a mapped file's are gigabytes.
        f.debug_struct("HostBuffer")
            .field("source", &self.source)
            .field("backend", &self.backend())
            .field("len", &self.len())
            .finish()
    }
}

/// `range` of the window `start..end` of its parent, clipped to the window, as the parent's
/// offsets.
fn in_parent(start: usize, end: usize, range: std::ops::Range<u64>) -> std::ops::Range<u64> {
    let (base, len) = (start as u64, (end - start) as u64);
    let to = range.end.min(len);
    base + range.start.min(to)..base + to
}

#[cfg(test)]
mod tests {
    use super::HostBuffer;

    #[test]
    fn a_window_shares_its_parent_bytes_and_knows_its_offset() {
        let parent = HostBuffer::from_vec("f", (0u8..10).collect());
        let window = HostBuffer::window(&parent, 3..7).expect("inside");
        assert_eq!(window.bytes(), &[3, 4, 5, 6]);
        assert_eq!(window.file_offset(), 3);
        assert_eq!(window.source(), parent.source());
        let inner = HostBuffer::window(&window, 1..3).expect("inside");
        assert_eq!((inner.bytes(), inner.file_offset()), (&[4u8, 5][..], 4));
        assert!(HostBuffer::window(&parent, 8..11).is_none());
        #[allow(clippy::reversed_empty_ranges)] // a file's numbers can say this
        let reversed = 5..4;
        assert!(HostBuffer::window(&parent, reversed).is_none());
        assert!(HostBuffer::window(&parent, u64::MAX - 1..u64::MAX).is_none());
    }
}
