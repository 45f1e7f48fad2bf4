//! Our own pickle reader: every protocol, shared objects kept shared, nothing ever executed.
//!
//! serde-pickle cannot read what PyTorch writes (`collections.defaultdict` values, frame lists
//! shared through the memo), so reading is ours; the few pickles memtrack writes go through
//! serde-pickle (see `formats::tracker::write`).

mod reader;
mod value;

pub use reader::{parse, parse_with_progress, PickleError, Progress, MAX_DEPTH};
pub use value::{big_int_to_f64, Dict, Document, Object, ObjectKind, Value, View};

use std::fs::File;
use std::path::Path;

/// Why a file could not be decoded: the OS refused it, or its bytes are not a pickle we read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Pickle(#[from] PickleError),
}

/// Memory-map `path` and decode it. Pages already parsed are handed back to the kernel as the
/// parse moves on (every string is copied into the document), so a 1 GB file never sits whole
/// in our resident memory.
pub fn read_file(path: &Path, progress: &mut dyn Progress) -> Result<Document, ReadError> {
    let file = File::open(path)?;
    let len = file.metadata()?.len();
    if len == 0 {
        return Err(PickleError {
            offset: 0,
            message: "empty file: no pickle data".into(),
        }
        .into());
    }
    // SAFETY: the map is read-only and private; a file truncated under us while we read it
    // would fault, as it would for any mapped reader — documented in docs/architecture.md.
    let map = unsafe { memmap2::MmapOptions::new().map(&file)? };
    let _ = map.advise(memmap2::Advice::Sequential);
    let mut releaser = ReleaseBehind {
        map: &map,
        released: 0,
        inner: progress,
    };
    Ok(parse_with_progress(&map, &mut releaser)?)
}

/// Ask for transparent huge pages on a large buffer's whole allocation, reserved capacity
/// included (where the kernel offers them on request). A hint: errors are ignored.
pub(crate) fn advise_huge_pages<T>(buf: &Vec<T>) {
    advise_huge_range(buf.as_ptr() as usize, buf.capacity() * std::mem::size_of::<T>());
}

pub(crate) fn advise_huge_pages_str(buf: &String) {
    advise_huge_range(buf.as_ptr() as usize, buf.capacity());
}

fn advise_huge_range(start: usize, len: usize) {
    const HUGE: usize = 2 << 20;
    // only whole huge pages inside the allocation: never touch a neighbour's memory
    let first = start.div_ceil(HUGE) * HUGE;
    let end = (start + len) / HUGE * HUGE;
    if end > first {
        // SAFETY: madvise(MADV_HUGEPAGE) changes no contents and the range lies inside an
        // allocation we own.
        unsafe {
            libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE);
        }
    }
}

struct ReleaseBehind<'m> {
    map: &'m memmap2::Mmap,
    released: usize,
    inner: &'m mut dyn Progress,
}

impl Progress for ReleaseBehind<'_> {
    fn advanced(&mut self, consumed: usize) {
        const PAGE: usize = 4096;
        let upto = consumed / PAGE * PAGE;
        if upto > self.released {
            // SAFETY: nothing borrows from the mapping behind the parse position (strings and
            // bytes are copied out), and a private read-only file mapping re-reads the file if
            // touched again, so dropping those pages cannot change what the parser sees.
            unsafe {
                let _ = self.map.unchecked_advise_range(
                    memmap2::UncheckedAdvice::DontNeed,
                    self.released,
                    upto - self.released,
                );
            }
            self.released = upto;
        }
        self.inner.advanced(consumed);
    }
}
