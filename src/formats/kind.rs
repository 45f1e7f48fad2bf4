//! What a file is, from its content (never its name): the one place that looks at a decoded
//! file's top-level keys to tell the kinds apart.

use crate::pickle::{Document, Value, View};

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
