//! The one error of reading a pickle: what was expected, at which byte. A leaf: the opcode
//! cursor and the pickle machine both make it.

/// A pickle that cannot be read: what was wrong, and the byte offset of the opcode at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} (at byte {offset})")]
pub struct PickleError {
    pub offset: usize,
    pub message: String,
}
