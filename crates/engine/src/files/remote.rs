//! A mounted remote object's bytes, in a buffer that lends a byte range only once it holds it:
//! [`RemoteBytes::range`] fetches the blocks of a range not yet fetched (within its run's
//! budget), then returns the slice. No reader ever sees a byte the store did not send; a reader
//! that asks for the whole object ([`HostBuffer::bytes`]) gets all of it.
//!
//! The engine names no transport: whoever mounts an object (the CLI, for `https://`, `hf://`…)
//! supplies a [`RemoteObject`] that reads byte ranges.

use super::object::{ListedObject, RemoteError, RemoteObject, RemoteStats};
use super::ranges::Ranges;
use super::run::Budget;
use crate::error::{Error, Result};
use crate::HostBuffer;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// The first bytes fetched of every object before any reading: a safetensors header, a
/// pickle's start, a `.npy` or GGUF header lie there. Anything else (a zip's end records) is
/// fetched when a reading asks for it.
pub(crate) const HEAD: u64 = 128 << 10;
/// A range not yet fetched is fetched with the aligned blocks around it: readers read near
/// where they last read.
const BLOCK: u64 = 64 << 10;
/// The most a read going on where the fetched bytes end (a scan) is read ahead.
const MAX_AHEAD: u64 = 16 << 20;
/// A prefetch asks for the pages around what it is given, not blocks: a zip's local header
/// is a few dozen bytes, a block around each would be 64 KiB a record.
const PAGE: u64 = 4 << 10;
/// Prefetched pages closer than this are asked for in one request: a few KiB more, a request
/// fewer.
const JOIN: u64 = 16 << 10;
/// The most one prefetch request asks for: dense pages (a thousand small records' headers)
/// are still fetched several requests at once.
const MAX_PREFETCH_REQUEST: u64 = 1 << 20;
/// Requests one prefetch keeps in flight (within what its run allows).
const IN_FLIGHT: usize = 8;

/// One mounted object's bytes: an anonymous map of its length, written only where nothing
/// is lent yet (a block being fetched), lent only where written.
#[derive(Debug)]
pub(crate) struct RemoteBytes {
    path: PathBuf,
    object: Arc<dyn RemoteObject>,
    /// Its run's: every fetch is charged there.
    budget: Arc<Budget>,
    /// Made at the first read: a mount costs nothing until its object is read.
    map: OnceLock<Map>,
    state: Mutex<State>,
}

#[derive(Debug)]
struct Map {
    /// Held for the buffer's life; written only through `base`.
    _map: memmap2::MmapMut,
    base: *mut u8,
}

// SAFETY: the map is written only under `RemoteBytes::state`'s lock, and only in ranges not
// yet in `filled`; slices are lent only of ranges in `filled`, which are never written again.
// So no byte is written while any thread can read it.
unsafe impl Send for Map {}
unsafe impl Sync for Map {}

#[derive(Debug, Default)]
struct State {
    /// The byte ranges fetched and in place in the map.
    filled: Ranges,
    /// Whether the whole object was fetched and checked against its listed SHA-256.
    verified: bool,
    bytes_read: u64,
    requests: u64,
    /// The first fetch that failed, for a reading that could only say "no bytes" (the whole
    /// object asked for by [`HostBuffer::bytes`], a storage's bytes under `--deep`).
    failure: Option<Error>,
    /// Why no byte is lent any more: the bytes fetched are not the object listed.
    refused: Option<Error>,
}

impl RemoteBytes {
    pub(super) fn new(path: PathBuf, object: Arc<dyn RemoteObject>, budget: Arc<Budget>) -> Self {
        RemoteBytes {
            path,
            object,
            budget,
            map: OnceLock::new(),
            state: Mutex::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The object's length, as its store listed it.
    pub(crate) fn len(&self) -> u64 {
        self.object.size()
    }

    /// Where the object's bytes lie in this process (0 before any is read).
    pub(crate) fn address(&self) -> u64 {
        self.map.get().map_or(0, |map| map.base as u64)
    }

    pub(super) fn listed(&self) -> ListedObject {
        ListedObject {
            path: self.path.clone(),
            size: self.object.size(),
            sha256: self.object.listed_sha256(),
        }
    }

    /// The fetch that failed where its reading could not say so, once.
    pub(super) fn take_failure(&self) -> Option<Error> {
        self.lock().failure.take()
    }

    pub(super) fn stats(&self) -> RemoteStats {
        let state = self.lock();
        RemoteStats {
            len: self.len(),
            bytes_read: state.bytes_read,
            requests: state.requests.saturating_add(self.object.retries()),
        }
    }

    /// A buffer of the object, its head fetched (one request for a small object's whole).
    pub(super) fn open(self: &Arc<Self>) -> Result<Arc<HostBuffer>> {
        if self.len() == 0 {
            return Err(Error::Empty {
                path: self.path.clone(),
            });
        }
        self.range(0..HEAD)?;
        Ok(HostBuffer::remote(self.path.clone(), Arc::clone(self)))
    }

    /// The bytes of `range` clipped to the object, fetched first where they are not yet.
    pub(crate) fn range(&self, range: Range<u64>) -> Result<&[u8]> {
        let end = range.end.min(self.len());
        let start = range.start.min(end);
        if start == end {
            return Ok(&[]);
        }
        let map = self.map()?;
        // Most asks (a header read field by field) are of bytes already here.
        let held = {
            let state = self.lock();
            if let Some(refused) = &state.refused {
                return Err(copy_of(refused, &self.path));
            }
            state.filled.contains(start..end)
        };
        let fetched = if held {
            Ok(())
        } else {
            self.fetch(start..end, map)
        };
        if let Err(e) = fetched {
            let mut state = self.lock();
            if state.failure.is_none() {
                state.failure = Some(copy_of(&e, &self.path));
            }
            return Err(e);
        }
        // Both fit: the map is `len` bytes long and was made.
        let (at, n) = (start as usize, (end - start) as usize);
        // SAFETY: `fetch` put every byte of `start..end` in place (in `filled`), and bytes in
        // `filled` are never written again while the map lives, which it does as long as `self`.
        Ok(unsafe { std::slice::from_raw_parts(map.base.add(at), n) })
    }

    /// The whole object, or nothing when it cannot be fetched (the failure kept for
    /// `files::checked`).
    pub(crate) fn whole_or_nothing(&self) -> &[u8] {
        self.range(0..self.len()).unwrap_or_default()
    }

    fn map(&self) -> Result<&Map> {
        if let Some(map) = self.map.get() {
            return Ok(map);
        }
        let io = |source| Error::Io {
            path: self.path.clone(),
            source,
        };
        let len =
            usize::try_from(self.len()).map_err(|_| io(std::io::ErrorKind::OutOfMemory.into()))?;
        // Address space, not memory: pages exist only once a fetched block is written.
        let mut map = memmap2::MmapOptions::new()
            .len(len)
            .no_reserve_swap()
            .map_anon()
            .map_err(io)?;
        // A transparent huge page would make one 64 KiB block cost 2 MiB.
        #[cfg(target_os = "linux")]
        let _ = map.advise(memmap2::Advice::NoHugePage);
        let base = map.as_mut_ptr();
        // Another thread may have made one meanwhile: the first kept is the one used.
        Ok(self.map.get_or_init(|| Map { _map: map, base }))
    }

    /// Fetches the blocks of `range` not fetched yet, one request a run of them, and puts
    /// them in place; the lock is held throughout, so two readers never fetch one block twice.
    fn fetch(&self, range: Range<u64>, map: &Map) -> Result<()> {
        let len = self.len();
        let Range { start, end } = aligned(range, BLOCK, len);
        let mut state = self.lock();
        // A reading that goes on where the fetched bytes end (a deep scan storage after
        // storage) is read ahead as far as it has come, so its requests grow geometrically
        // rather than one a storage; never past what the budget leaves.
        let ahead = state
            .filled
            .run_ending_at(start)
            .min(MAX_AHEAD)
            .min(self.budget.left().saturating_sub(end - start));
        let mut wanted = Ranges::default();
        wanted.insert(start..end.saturating_add(ahead).min(len));
        let wanted = wanted.subtract(&state.filled);
        for range in wanted.iter() {
            self.budget.charge(&self.path, 1, range.end - range.start)?;
            let bytes = self.object.read_range(range.clone()).map_err(|e| match e {
                RemoteError::Unreachable(detail) => Error::Remote {
                    path: self.path.clone(),
                    detail,
                },
                RemoteError::Inconsistent(detail) => Error::RemoteInconsistent {
                    path: self.path.clone(),
                    detail,
                },
                RemoteError::Budget {
                    bound,
                    needed,
                    limit,
                } => Error::RemoteBudget {
                    path: self.path.clone(),
                    bound,
                    needed,
                    limit,
                },
            })?;
            if bytes.len() as u64 != range.end - range.start {
                return Err(Error::RemoteInconsistent {
                    path: self.path.clone(),
                    detail: format!(
                        "asked for bytes {}..{}, received {}",
                        range.start,
                        range.end,
                        bytes.len()
                    ),
                });
            }
            put(&mut state, map, range, &bytes);
        }
        self.verify(&mut state, map)
    }

    /// Fetches the pages around `ranges` not fetched yet, [`IN_FLIGHT`] requests at once, for
    /// a reading about to ask for each in turn (a zip's local headers, a request each, one
    /// after another, otherwise). Only what the run's budget takes whole: where the pages
    /// would pass a limit nothing is prefetched, and the reading meets the limit itself, as
    /// it would have. A request that fails is left to the reading to send again and report.
    pub(crate) fn prefetch(&self, ranges: &[Range<u64>]) {
        let Ok(map) = self.map() else {
            return;
        };
        let mut pages = Ranges::default();
        for range in ranges {
            pages.insert(aligned(range.clone(), PAGE, self.len()));
        }
        let requests = {
            let state = self.lock();
            if state.refused.is_some() {
                return;
            }
            requests_for(&pages.subtract(&state.filled))
        };
        let bytes = requests.iter().map(|r| r.end - r.start).sum::<u64>();
        if requests.is_empty()
            || requests.len() as u64 > self.budget.requests_left()
            || bytes > self.budget.left()
        {
            return;
        }
        let next = std::sync::atomic::AtomicUsize::new(0);
        let stop = std::sync::atomic::AtomicBool::new(false);
        let fetch_one = || {
            use std::sync::atomic::Ordering::Relaxed;
            while let Some(range) = requests.get(next.fetch_add(1, Relaxed)) {
                let n = range.end - range.start;
                if stop.load(Relaxed) || self.budget.charge(&self.path, 1, n).is_err() {
                    stop.store(true, Relaxed);
                    return;
                }
                match self.object.read_range(range.clone()) {
                    Ok(bytes) if bytes.len() as u64 == n => {
                        let mut state = self.lock();
                        put(&mut state, map, range.clone(), &bytes);
                    }
                    _ => {}
                }
            }
        };
        // This thread sends requests too; the others are what the run can have in flight.
        let helpers = self
            .budget
            .begin_prefetch(IN_FLIGHT.min(requests.len()).saturating_sub(1));
        std::thread::scope(|scope| {
            for _ in 0..helpers {
                // Where no thread can be started, fewer requests are in flight.
                if std::thread::Builder::new()
                    .spawn_scoped(scope, fetch_one)
                    .is_err()
                {
                    break;
                }
            }
            fetch_one();
        });
        self.budget.end_prefetch(helpers);
        // A mismatch is kept as the refusal of every later ask.
        let _ = self.verify(&mut self.lock(), map);
    }

    /// Once every byte of an object with a listed SHA-256 is fetched, checks that they hash to
    /// it: a store serving other bytes under the listed address is not the object listed, and
    /// none of them is lent from then on.
    fn verify(&self, state: &mut State, map: &Map) -> Result<()> {
        let Some(listed) = self.object.listed_sha256() else {
            return Ok(());
        };
        let mut whole = Ranges::default();
        whole.insert(0..self.len());
        if state.verified || !whole.subtract(&state.filled).is_empty() {
            return Ok(());
        }
        use sha2::{Digest, Sha256};
        // SAFETY: every byte is in `filled` (checked above): written, and never written again.
        let all = unsafe { std::slice::from_raw_parts(map.base, self.len() as usize) };
        let got: [u8; 32] = Sha256::digest(all).into();
        if got != listed {
            let hex = |d: &[u8; 32]| d.iter().map(|b| format!("{b:02x}")).collect::<String>();
            let refusal = Error::RemoteInconsistent {
                path: self.path.clone(),
                detail: format!(
                    "its bytes hash to SHA-256 {}, not the {} its listing gives (the Hub's \
                     lfs.oid): the store served other content under that address",
                    hex(&got),
                    hex(&listed)
                ),
            };
            state.refused = Some(copy_of(&refusal, &self.path));
            return Err(refusal);
        }
        state.verified = true;
        Ok(())
    }
}

/// `range` clipped to an object of `len` bytes and widened to whole `unit`s (the last one
/// short at the object's end); empty where nothing of it lies inside.
fn aligned(range: Range<u64>, unit: u64, len: u64) -> Range<u64> {
    let end = range.end.min(len);
    let start = range.start.min(end);
    if start == end {
        return start..start;
    }
    start - start % unit..end.div_ceil(unit).saturating_mul(unit).min(len)
}

/// Puts the fetched `bytes` of `range` in place where they are not yet, and counts the
/// request that fetched them.
fn put(state: &mut State, map: &Map, range: Range<u64>, bytes: &[u8]) {
    let mut fetched = Ranges::default();
    fetched.insert(range.clone());
    for new in fetched.subtract(&state.filled).iter() {
        let Some(part) =
            bytes.get((new.start - range.start) as usize..(new.end - range.start) as usize)
        else {
            continue;
        };
        // SAFETY: `new` lies inside the map (fetched ranges are clipped to its length) and
        // outside `filled`, so no slice of it has been lent; the caller holds the lock, so no
        // other fetch writes it.
        unsafe {
            std::ptr::copy_nonoverlapping(
                part.as_ptr(),
                map.base.add(new.start as usize),
                part.len(),
            );
        }
        state.filled.insert(new);
    }
    state.bytes_read += bytes.len() as u64;
    state.requests += 1;
}

/// The requests that fetch `pages`: pages closer than [`JOIN`] in one, none longer than
/// [`MAX_PREFETCH_REQUEST`].
fn requests_for(pages: &Ranges) -> Vec<Range<u64>> {
    let mut joined: Vec<Range<u64>> = Vec::new();
    for page in pages.iter() {
        match joined.last_mut() {
            Some(last) if page.start - last.end < JOIN => last.end = page.end,
            _ => joined.push(page),
        }
    }
    joined
        .into_iter()
        .flat_map(|run| {
            (run.start..run.end)
                .step_by(MAX_PREFETCH_REQUEST as usize)
                .map(move |at| at..(at + MAX_PREFETCH_REQUEST).min(run.end))
        })
        .collect()
}

/// A failed fetch's error again, to keep while the first copy goes to the reader that asked.
fn copy_of(e: &Error, path: &Path) -> Error {
    match e {
        Error::Remote { path, detail } => Error::Remote {
            path: path.clone(),
            detail: detail.clone(),
        },
        Error::RemoteInconsistent { path, detail } => Error::RemoteInconsistent {
            path: path.clone(),
            detail: detail.clone(),
        },
        Error::RemoteBudget {
            path,
            bound,
            needed,
            limit,
        } => Error::RemoteBudget {
            path: path.clone(),
            bound: *bound,
            needed: *needed,
            limit: *limit,
        },
        other => Error::Remote {
            path: path.to_owned(),
            detail: other.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::RemoteLimits;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// An object in memory that counts the ranges asked of it, and the most asked at once,
    /// and can be made to fail or to take a while.
    #[derive(Debug, Default)]
    struct Fake {
        bytes: Vec<u8>,
        asked: Mutex<Vec<Range<u64>>>,
        fail: bool,
        sha256: Option<[u8; 32]>,
        delay: Duration,
        in_flight: AtomicUsize,
        most_in_flight: AtomicUsize,
    }

    impl RemoteObject for Fake {
        fn size(&self) -> u64 {
            self.bytes.len() as u64
        }
        fn read_range(&self, range: Range<u64>) -> std::result::Result<Vec<u8>, RemoteError> {
            self.asked.lock().unwrap().push(range.clone());
            let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.most_in_flight.fetch_max(now, Ordering::SeqCst);
            std::thread::sleep(self.delay);
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            if self.fail {
                return Err(RemoteError::Unreachable("HTTP 503".to_owned()));
            }
            Ok(self.bytes[range.start as usize..range.end as usize].to_vec())
        }
        fn listed_sha256(&self) -> Option<[u8; 32]> {
            self.sha256
        }
    }

    fn fake(
        len: usize,
        fail: bool,
        sha256: Option<[u8; 32]>,
        max_bytes: u64,
    ) -> (Arc<RemoteBytes>, Arc<Fake>) {
        let limits = RemoteLimits {
            max_bytes,
            max_requests: u64::MAX,
        };
        mount(
            Fake {
                bytes: remote_bytes(len),
                fail,
                sha256,
                ..Fake::default()
            },
            limits,
        )
    }

    fn mount(object: Fake, limits: RemoteLimits) -> (Arc<RemoteBytes>, Arc<Fake>) {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let object = Arc::new(object);
        let budget = Arc::new(Budget::new(limits, Duration::from_secs(60)));
        let path = PathBuf::from(format!("fake://{n}"));
        let remote = Arc::new(RemoteBytes::new(path, object.clone(), budget));
        (remote, object)
    }

    fn asked(object: &Fake) -> Vec<Range<u64>> {
        object.asked.lock().unwrap().clone()
    }

    #[test]
    fn ranges_are_lent_only_once_fetched_and_every_fetch_is_counted() {
        // A range is fetched with the blocks around it, once, and lent as the object's bytes.
        let (remote, object) = fake(300_000, false, None, u64::MAX);
        let slice = remote.range(70_000..70_010).unwrap();
        assert_eq!(slice, &remote_bytes(300_000)[70_000..70_010]);
        assert_eq!(asked(&object), vec![BLOCK..2 * BLOCK]);
        remote.range(BLOCK + 5..2 * BLOCK).unwrap();
        assert_eq!(
            asked(&object).len(),
            1,
            "fetched bytes are not fetched again"
        );
        // A range spanning fetched and unfetched blocks fetches only the missing ones.
        let span = remote.range(BLOCK - 1..2 * BLOCK + 1).unwrap();
        assert_eq!(
            span,
            &remote_bytes(300_000)[BLOCK as usize - 1..2 * BLOCK as usize + 1]
        );
        assert_eq!(asked(&object)[1..], [0..BLOCK, 2 * BLOCK..3 * BLOCK]);
        // Going on where the fetched bytes end, a read is read ahead as far as it has come.
        remote.range(3 * BLOCK..3 * BLOCK + 10).unwrap();
        assert_eq!(asked(&object)[3..], vec![3 * BLOCK..300_000]);
        // Past the end: clipped, the last block short.
        assert_eq!(remote.range(299_990..400_000).unwrap().len(), 10);
        assert!(remote.range(400_000..400_001).unwrap().is_empty());
        assert_eq!(remote.whole_or_nothing(), &remote_bytes(300_000)[..]);
        let stats = remote.stats();
        assert_eq!((stats.bytes_read, stats.len), (300_000, 300_000));

        // A failed fetch lends nothing, and is kept for the reading that could not say so.
        let (broken, _) = fake(1000, true, None, u64::MAX);
        assert!(matches!(broken.range(0..10), Err(Error::Remote { .. })));
        assert!(broken.whole_or_nothing().is_empty());
        assert!(broken.lock().failure.is_some());

        // A listed SHA-256 the bytes do not hash to fails the fetch that completes them.
        let (wrong, _) = fake(1000, false, Some([0; 32]), u64::MAX);
        assert!(matches!(
            wrong.range(0..1000),
            Err(Error::RemoteInconsistent { .. })
        ));
        // And no byte of it is lent after.
        assert!(matches!(
            wrong.range(0..10),
            Err(Error::RemoteInconsistent { .. })
        ));

        // Its run's budget refuses a fetch past it, naming the bound.
        assert!(matches!(
            fake(100, false, None, 10).0.range(0..1),
            Err(Error::RemoteBudget {
                bound: crate::error::RemoteBound::Bytes,
                ..
            })
        ));
    }

    #[test]
    fn a_prefetch_fetches_the_pages_around_its_ranges_several_requests_at_once() {
        const KIB: u64 = 1 << 10;
        let len = 4 << 20;
        let slow = |fail, sha256, max_requests| {
            let object = Fake {
                bytes: remote_bytes(len),
                fail,
                sha256,
                delay: Duration::from_millis(20),
                ..Fake::default()
            };
            let limits = RemoteLimits {
                max_bytes: u64::MAX,
                max_requests,
            };
            mount(object, limits)
        };
        let sorted = |object: &Fake| {
            let mut asked = asked(object);
            asked.sort_by_key(|r| r.start);
            asked
        };
        // Six headers 256 KiB apart, the last across a page's end: the pages around each.
        let (remote, object) = slow(false, None, u64::MAX);
        let mut headers: Vec<Range<u64>> = (0..5)
            .map(|i| i * 256 * KIB + 100..i * 256 * KIB + 200)
            .collect();
        headers.push(5 * 256 * KIB + 4000..5 * 256 * KIB + 4200);
        remote.prefetch(&headers);
        let mut pages: Vec<Range<u64>> = (0..5)
            .map(|i| i * 256 * KIB..i * 256 * KIB + 4 * KIB)
            .collect();
        pages.push(5 * 256 * KIB..5 * 256 * KIB + 8 * KIB);
        assert_eq!(sorted(&object), pages);
        assert!(
            object.most_in_flight.load(Ordering::SeqCst) > 1,
            "one request at a time"
        );
        // A reading of them then asks for nothing.
        for header in &headers {
            let expected = &remote_bytes(len)[header.start as usize..header.end as usize];
            assert_eq!(remote.range(header.clone()).unwrap(), expected);
        }
        assert_eq!(asked(&object).len(), 6);
        assert_eq!(remote.stats().requests, 6);
        // Pages closer than 16 KiB are one request, what is held is not asked again, and a
        // long run (clipped to the object) is asked in pieces of at most 1 MiB.
        let mib = 1 << 20;
        remote.prefetch(&[
            100..200,
            20 * KIB..20 * KIB + 1,
            30 * KIB..30 * KIB + 1,
            2 * mib..5 * mib,
        ]);
        let mut more = asked(&object).split_off(6);
        more.sort_by_key(|r| r.start);
        assert_eq!(
            more,
            vec![20 * KIB..32 * KIB, 2 * mib..3 * mib, 3 * mib..4 * mib]
        );

        // Only within the run's budget: three requests past a limit of two ask for nothing,
        // and the reading meets the limit itself.
        let (remote, object) = slow(false, None, 2);
        remote.prefetch(&headers[..3]);
        assert!(asked(&object).is_empty());
        remote.range(0..10).unwrap();
        remote.range(256 * KIB..256 * KIB + 10).unwrap();
        assert!(matches!(
            remote.range(512 * KIB..512 * KIB + 10),
            Err(Error::RemoteBudget { .. })
        ));

        // A request that fails leaves the bytes to the reading, which asks again and fails.
        let (remote, object) = slow(true, None, u64::MAX);
        remote.prefetch(&headers[..1]);
        assert_eq!(asked(&object).len(), 1);
        assert!(matches!(remote.range(100..200), Err(Error::Remote { .. })));
        assert_eq!(asked(&object).len(), 2);

        // Bytes a prefetch completes that do not hash to the listed SHA-256 are never lent.
        let (remote, _) = slow(false, Some([0; 32]), u64::MAX);
        remote.prefetch(&[0..len as u64 / 2, len as u64 / 2..len as u64]);
        assert!(matches!(
            remote.range(0..10),
            Err(Error::RemoteInconsistent { .. })
        ));
    }

    fn remote_bytes(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i % 251) as u8).collect()
    }
}
