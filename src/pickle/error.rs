//! The one error of reading a pickle: what was expected, at which byte. A leaf: the opcode
//! cursor and the pickle machine both make it.

/// A pickle that cannot be read: what was wrong, and the byte offset of the opcode at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} (at byte {offset})")]
pub struct PickleError {
    pub offset: usize,
    pub message: String,
    /// The file ends before the pickle does (no STOP): cut short, not malformed.
    pub cut_short: bool,
}

/// Containers nested deeper than this are refused: Python's own pickler cannot write them
/// (it recurses), and every consumer may then walk a document without exhausting its stack.
pub const MAX_DEPTH: u16 = 1000;

/// A document grown past one of the reader's limits; the reader places it at the opcode's byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    /// Containers nested deeper than Python's pickler can write (`MAX_DEPTH`).
    #[error("containers nested more than {MAX_DEPTH} deep")]
    TooDeep,
    /// More values than the document's 32-bit indices hold.
    #[error("more than 4 billion values: the file is too large to read")]
    TooManyValues,
}
