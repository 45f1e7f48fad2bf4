//! Our own pickle reader: every protocol, shared objects kept shared, nothing ever executed.
//!
//! serde-pickle cannot read what PyTorch writes (`collections.defaultdict` values, frame lists
//! shared through the memo), so reading is ours; so is writing (`writer`), to keep dict order
//! and to stream large files.

pub mod ops;
mod reader;
mod value;
pub mod writer;

pub use ops::Op;
pub use reader::{
    parse, parse_opcode_by_opcode, parse_with_divert, parse_with_progress, Divert, Diverted,
    IntOrRef, PickleError, Progress, MAX_DEPTH,
};
pub(crate) use value::int_from_short_le;
pub use value::{big_int_to_f64, Dict, DictIter, Document, Object, ObjectKind, Value, View};

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
            map: self.map.as_ref(),
            released: 0,
            inner,
        }
    }
}

pub fn map_file(path: &Path) -> std::io::Result<MappedFile> {
    let file = File::open(path)?;
    if file.metadata()?.len() == 0 {
        return Ok(MappedFile { map: None }); // mmap refuses empty files
    }
    // SAFETY: the map is read-only and private; a file truncated under us while we read it
    // would fault, as it would for any mapped reader (docs/architecture.md).
    let map = unsafe { memmap2::MmapOptions::new().map(&file)? };
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

/// Decode a mapped file, releasing pages behind the parse, letting `divert` read the values
/// of the top-level keys it wants.
pub fn parse_mapped_with_divert(
    file: &MappedFile,
    progress: &mut dyn Progress,
    divert: &mut dyn Divert,
) -> Result<Document, PickleError> {
    let mut releaser = file.release_behind(progress);
    parse_with_divert(file.bytes(), &mut releaser, divert)
}

/// Memory-map `path` and decode it.
pub fn read_file(path: &Path, progress: &mut dyn Progress) -> Result<Document, ReadError> {
    let file = map_file(path)?;
    Ok(parse_mapped(&file, progress)?)
}

pub struct ReleaseBehind<'m> {
    map: Option<&'m memmap2::Mmap>,
    released: usize,
    inner: &'m mut dyn Progress,
}

impl Progress for ReleaseBehind<'_> {
    fn advanced(&mut self, consumed: usize) {
        const PAGE: usize = 4096;
        let upto = consumed / PAGE * PAGE;
        if let (Some(map), true) = (self.map, upto > self.released) {
            // SAFETY: nothing borrows from the mapping behind the parse position (strings and
            // bytes are copied out), and a private read-only file mapping re-reads the file if
            // touched again, so dropping those pages cannot change what the parser sees.
            unsafe {
                let _ = map.unchecked_advise_range(
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
