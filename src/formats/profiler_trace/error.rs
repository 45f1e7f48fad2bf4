//! What can go wrong reading a trace's text: the reader's error, which `text`, `fast` and
//! `scan` all make and `mod.rs` turns into the user's message.

/// What went wrong, with the byte offset (of the text, inflated) where it did.
#[derive(Debug)]
pub enum ScanError {
    /// The text ends before the JSON does.
    CutShort {
        offset: u64,
        events: u64,
    },
    /// Not JSON at `offset`.
    Syntax {
        offset: u64,
        expected: &'static str,
        found: String,
    },
    /// JSON, but its top-level value has no `traceEvents` (`keys`: the first few it has).
    NoTraceEvents {
        keys: Vec<String>,
    },
    /// JSON whose top-level value is not an object or array.
    NotObject {
        found: String,
    },
    /// A trace event that is not an object.
    EventNotObject {
        index: u64,
        found: String,
    },
    /// One event whose fields memtrack keeps run past `limit` bytes.
    ItemTooLarge {
        offset: u64,
        index: u64,
        limit: u64,
    },
    /// A gzip trace that inflates past its budget: `text` bytes or events (`what`) from
    /// `compressed` bytes of the file.
    Expansion {
        text: u64,
        compressed: u64,
        what: &'static str,
    },
    /// An event memtrack keeps whose figure it cannot read: a byte count no allocator
    /// reports, a time no clock gives (`message` goes on from "trace event N is").
    BadEvent {
        offset: u64,
        index: u64,
        message: String,
    },
    Io(std::io::Error),
}

impl ScanError {
    /// Where in the text it went wrong, where it says.
    pub fn offset(&self) -> Option<u64> {
        match self {
            ScanError::CutShort { offset, .. }
            | ScanError::Syntax { offset, .. }
            | ScanError::ItemTooLarge { offset, .. }
            | ScanError::BadEvent { offset, .. } => Some(*offset),
            _ => None,
        }
    }
}
