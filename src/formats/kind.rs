//! What a file is, from its content (never its name): the one place that looks at a file's
//! first bytes (`of_head`: a trace, memtrack's own JSON, or a pickle) and at a decoded
//! pickle's top-level keys (`of_document`) to tell the kinds apart.

use crate::pickle::{Document, Value, View};

/// The kinds of file memtrack reads, as messages about a file it cannot read name them.
pub const READS: &str = "memtrack reads memtrack record files, MemoryTracker stats (save_stats), allocator snapshots (_dump_snapshot) and torch.profiler traces (.json, .json.gz)";

/// The kinds of file memtrack reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `MemoryTracker.save_stats()`: three series of ops and the markers.
    Stats,
    /// `memtrack record`'s file: MemoryTracker's keys and the `memtrack` extension.
    Record,
    /// `torch.cuda.memory._dump_snapshot()` (or the bare segment list of `memory_snapshot()`).
    Snapshot,
}

/// Which kind a decoded pickle's top-level value is, if any: a snapshot has `segments` or
/// `device_traces` (or is a list of segment dicts), stats have `memories_allocated`, and a
/// record file also has `memtrack`.
pub fn of_document(doc: &Document, root: Value) -> Option<Kind> {
    if is_snapshot(doc, root) {
        return Some(Kind::Snapshot);
    }
    let dict = doc.as_dict(root)?;
    match (dict.get("memories_allocated"), dict.get("memtrack")) {
        (Some(_), Some(_)) => Some(Kind::Record),
        (Some(_), None) => Some(Kind::Stats),
        (None, _) => None,
    }
}

/// Whether `root` looks like a snapshot: a dict with `segments` or `device_traces`, or a list
/// of segment dicts (an empty list too: `memory_snapshot()` of an allocator that holds nothing).
fn is_snapshot(doc: &Document, root: Value) -> bool {
    if let Some(d) = doc.as_dict(root) {
        return d.get("segments").is_some() || d.get("device_traces").is_some();
    }
    if let View::List(items) = doc.view(root) {
        return items.iter().all(|&v| {
            doc.as_dict(v)
                .is_some_and(|d| d.get("blocks").is_some() || d.get("total_size").is_some())
        });
    }
    false
}

/// What an input's first bytes say it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Looks {
    /// A folder: of torch.profiler traces, one per rank or worker.
    Folder,
    /// JSON, plain or gzip: `trace` when it may be a torch.profiler trace (an object or
    /// array, and not memtrack's own output, which starts with its `kind`); `object` when
    /// its value is an object (memtrack's summaries are).
    Json {
        gzip: bool,
        trace: bool,
        object: bool,
    },
    /// Anything else: read as a pickle, whose reader says what it is if it is none.
    Other,
}

impl Looks {
    /// Whether memtrack reads it as a torch.profiler trace (or a folder of them).
    pub fn is_trace(self) -> bool {
        matches!(self, Looks::Folder | Looks::Json { trace: true, .. })
    }
}

/// What a file that starts with `head` is; `inflated` gives the start of its text when
/// `head` is gzip's.
pub fn of_head(head: &[u8], inflated: impl FnOnce() -> Vec<u8>) -> Looks {
    if crate::formats::profiler_trace::source::is_gzip(head) {
        let text = inflated();
        // nothing but white space so far: only the trace's reader, which reads on, can say
        // what the whole is (JSON further on, or white space to the end)
        if text.iter().all(u8::is_ascii_whitespace) {
            return Looks::Json {
                gzip: true,
                trace: true,
                object: false,
            };
        }
        return match json_start(&text) {
            Some((trace, object)) => Looks::Json {
                gzip: true,
                trace,
                object,
            },
            None => Looks::Other,
        };
    }
    match json_start(head) {
        Some((trace, object)) => Looks::Json {
            gzip: false,
            trace,
            object,
        },
        None => Looks::Other,
    }
}

/// Whether text starts as JSON memtrack reads: (a trace, an object) when it does.
fn json_start(text: &[u8]) -> Option<(bool, bool)> {
    let text = text.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(text);
    let mut rest = text.iter().skip_while(|b| b.is_ascii_whitespace());
    match rest.next() {
        Some(b'[') => opens_json_array(&text.trim_ascii_start()[1..]).then_some((true, false)),
        Some(b'{') => {
            let first_key: Vec<u8> = rest
                .skip_while(|b| b.is_ascii_whitespace())
                .take(6)
                .copied()
                .collect();
            Some((first_key != b"\"kind\"", true))
        }
        _ => None,
    }
}

/// Whether the text after a `[` goes on as a JSON array does (a value or `]`), so that a TOML
/// or INI file (`[package]`) is not taken for one. A head that ends first counts as JSON.
pub fn opens_json_array(after_bracket: &[u8]) -> bool {
    let rest = after_bracket.trim_ascii_start();
    let literal = |word: &[u8]| {
        rest.strip_prefix(word).is_some_and(|after| {
            after
                .first()
                .is_none_or(|b| b.is_ascii_whitespace() || matches!(b, b',' | b']'))
        })
    };
    match rest.first() {
        None => true,
        Some(b'{' | b'[' | b']' | b'"' | b'-' | b'0'..=b'9') => true,
        Some(_) => literal(b"true") || literal(b"false") || literal(b"null"),
    }
}
