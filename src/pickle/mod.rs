//! Our own pickle reader: every protocol, shared objects kept shared, nothing ever executed.
//!
//! serde-pickle cannot read what PyTorch writes (`collections.defaultdict` values, frame lists
//! shared through the memo), so reading is ours; so is writing (`writer`), to keep dict order
//! and to stream large files.

mod error;
mod flat_dict;
mod literals;
mod memo;
pub mod ops;
mod reader;
mod value;
pub mod writer;

pub use error::{PickleError, MAX_DEPTH};
pub use ops::Op;
pub use reader::{
    parse, parse_opcode_by_opcode, parse_with_divert, parse_with_progress, Divert, Diverted,
    IntOrRef, Progress, RECENT_HANDLES,
};
pub use value::{
    big_int_to_f64, big_int_to_u64, Dict, DictIter, Document, Object, ObjectKind, Value, View,
};
pub(crate) use value::{int_from_le_prefix, int_from_short_le};

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

/// A file mapped into memory for reading.
pub struct MappedFile {
    map: Option<memmap2::Mmap>,
}

impl MappedFile {
    pub fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }

    /// A progress sink that hands pages already read back to the kernel: every reader copies
    /// what it keeps, so a 1 GB file never sits whole in our resident memory.
    pub fn release_behind<'m>(&'m self, inner: &'m mut dyn Progress) -> ReleaseBehind<'m> {
        ReleaseBehind {
            pages: self.pages(),
            released: 0,
            inner,
        }
    }

    /// Hands pages of the mapping back, from any thread.
    pub fn pages(&self) -> Pages<'_> {
        Pages {
            map: self.map.as_ref(),
        }
    }
}

/// Gives read pages of a mapped file back to the kernel (see [`MappedFile::release_behind`]);
/// a reader on another thread uses it for the part it reads.
#[derive(Clone, Copy, Default)]
pub struct Pages<'m> {
    map: Option<&'m memmap2::Mmap>,
}

impl Pages<'_> {
    /// Drop the whole pages inside `from..to` from this process's memory.
    pub fn release(&self, from: usize, to: usize) {
        // (nothing borrows from the mapping behind a parse position: strings and bytes are
        // copied out)
        if let Some(map) = self.map {
            crate::memory::release_mapped(map, from, to);
        }
    }
}

pub fn map_file(path: &Path) -> std::io::Result<MappedFile> {
    map_open(&File::open(path)?)
}

/// Map a file already open (mapped whole, from its start).
pub fn map_open(file: &File) -> std::io::Result<MappedFile> {
    if file.metadata()?.len() == 0 {
        return Ok(MappedFile { map: None }); // mmap refuses empty files
    }
    // SAFETY: the map is read-only and private; a file truncated under us while we read it
    // would fault, as it would for any mapped reader (docs/architecture.md).
    let map = unsafe { memmap2::MmapOptions::new().map(file)? };
    let _ = map.advise(memmap2::Advice::Sequential);
    Ok(MappedFile { map: Some(map) })
}

/// Decode a mapped file, releasing pages behind the parse.
pub fn parse_mapped(
    file: &MappedFile,
    progress: &mut dyn Progress,
) -> Result<Document, PickleError> {
    let mut releaser = file.release_behind(progress);
    parse_with_progress(file.bytes(), &mut releaser)
}

/// Memory-map `path` and decode it.
pub fn read_file(path: &Path, progress: &mut dyn Progress) -> Result<Document, ReadError> {
    let file = map_file(path)?;
    Ok(parse_mapped(&file, progress)?)
}

pub struct ReleaseBehind<'m> {
    pages: Pages<'m>,
    released: usize,
    inner: &'m mut dyn Progress,
}

impl Progress for ReleaseBehind<'_> {
    fn advanced(&mut self, consumed: usize) {
        if consumed > self.released {
            self.pages.release(self.released, consumed);
            self.released = consumed / 4096 * 4096;
        }
        self.inner.advanced(consumed);
    }

    fn read_elsewhere(&mut self, bytes: usize) {
        self.inner.read_elsewhere(bytes);
    }
}
