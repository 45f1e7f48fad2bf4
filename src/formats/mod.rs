//! Pickle values to model types and back. Only this module knows the files' layouts.
//!
//! `load` detects what a file is from its content, never from its name.

pub mod error;
pub mod estimate_ext;
pub mod event_spool;
pub mod json;
pub mod kind;
pub mod profiler_trace;
pub mod record_ext;
pub mod snapshot;
pub mod summary_json;
pub mod tracker;
pub mod tracker_stream;

use std::path::Path;

use crate::error::{Error, Result};
pub use crate::model::snapshot::Parts as SnapshotParts;
use crate::model::trace::TraceSink;
use crate::model::{Snapshot, TrackerStats};
use crate::pickle::{self, Document, MappedFile, View};
use kind::Kind;
use snapshot::Streamed;

/// A file memtrack reads, by kind.
pub enum Input {
    Tracker(Box<TrackerStats>),
    Snapshot(Box<Snapshot>),
}

impl Input {
    /// The name messages give its kind ("this file is an allocator snapshot").
    pub fn kind(&self) -> &'static str {
        match self {
            Input::Tracker(_) => "a `record` or MemoryTracker stats file",
            Input::Snapshot(_) => "an allocator snapshot",
        }
    }
}

pub use kind::READS;

fn map(path: &Path) -> Result<MappedFile> {
    let input = crate::inputs::open(path).map_err(|m| Error::input(path, m))?;
    // mapping a directory fails with "No such device", which says nothing useful
    if input.looks == kind::Looks::Folder {
        return Err(Error::input(
            path,
            format!("is a directory, not a file; {READS}"),
        ));
    }
    input.mapped().map_err(|m| Error::input(path, m))
}

fn parse(path: &Path, file: &MappedFile) -> Result<Document> {
    let mut bar = bar(path, file);
    pickle::parse_mapped(file, &mut bar)
        .map_err(|e| Error::input(path, describe_pickle_error(file.bytes(), &e)))
}

/// Progress for reading `path` (on a terminal, after a second).
fn bar(path: &Path, file: &MappedFile) -> crate::progress::Bar {
    let name = crate::quote::quote(path.file_name().unwrap_or(path.as_os_str())).into_owned();
    crate::progress::Bar::bytes(file.bytes().len() as u64, format!("reading {name}"))
}

fn describe_pickle_error(data: &[u8], e: &pickle::PickleError) -> String {
    let head = &data[..data.len().min(8)];
    // Protocol 2+ files start with PROTO (0x80); a file that starts otherwise and fails is
    // most likely not a pickle at all: say what it looks like, not which opcode failed.
    let Some(&first) = head.first() else {
        return format!("empty file: no pickle data; {READS}");
    };
    if first == 0x80 {
        if e.cut_short {
            return format!(
                "the file ends before its pickle does: it was cut short (a dump or copy that did not finish?); write it again ({e})"
            );
        }
        return format!("not a readable pickle: {e}");
    }
    let kind = if head.starts_with(b"\x89PNG") {
        Some("a PNG image")
    } else if head.starts_with(&[0x1f, 0x8b]) {
        Some("gzip-compressed (decompress it first)")
    } else if head.starts_with(b"PK") {
        Some("a zip archive (torch.save output?), not a stats file or snapshot")
    } else if head.starts_with(b"<svg") || head.starts_with(b"<?xml") || head.starts_with(b"<!DOC")
    {
        Some("an SVG or HTML document (memtrack's own drawings are not inputs)")
    } else if first == b'{'
        || (first == b'[' && kind::opens_json_array(&data[1..data.len().min(512)]))
    {
        Some("JSON (a torch.profiler trace? summary, plot, top, diff and export read those; memtrack export output is not an input)")
    } else if head
        .iter()
        .all(|b| b.is_ascii_graphic() || b.is_ascii_whitespace())
    {
        Some("text")
    } else {
        None
    };
    match kind {
        Some(kind) => format!("not a pickle: it looks like {kind}; {READS}"),
        None => format!("not a pickle (first byte 0x{first:02x}): {e}; {READS}"),
    }
}

/// Load any input memtrack understands.
pub fn load(path: &Path) -> Result<Input> {
    load_with(path, SnapshotParts::All)
}

/// Load any input; of a snapshot, only `parts`.
pub fn load_with(path: &Path, parts: SnapshotParts) -> Result<Input> {
    load_into(path, parts, None)
}

/// Load any input; a snapshot's trace events go to `sink` in order as they are read, and the
/// snapshot keeps none of them (its traces have their lengths and streams), so memory does not
/// grow with the trace. `parts`: `All` (with stacks) or `EventsWithoutStacks`.
pub fn load_streaming(
    path: &Path,
    parts: SnapshotParts,
    sink: &mut dyn TraceSink,
) -> Result<Input> {
    debug_assert!(parts != SnapshotParts::SegmentsOnly, "a sink takes events");
    load_into(path, parts, Some(sink))
}

fn load_into(
    path: &Path,
    parts: SnapshotParts,
    mut sink: Option<&mut dyn TraceSink>,
) -> Result<Input> {
    let file = map(path)?;
    let mut progress = bar(path, &file);
    if let Some(stats) = tracker_stream::read(file.bytes(), &mut file.release_behind(&mut progress))
    {
        return Ok(Input::Tracker(Box::new(stats)));
    }
    drop(progress);
    // A snapshot's trace events are read as they stream by, straight into the model; anything
    // that reading cannot vouch for (an odd layout, a value it kept to itself referenced
    // elsewhere, any error) is read again the generic way, which then says exactly what the
    // file holds.
    let mut traces = snapshot::TraceReader::new(parts, file.bytes().len()).with_second_core(
        snapshot::SecondCore {
            min_bytes: snapshot::SecondCore::MIN_BYTES,
            round_bytes: snapshot::SecondCore::ROUND_BYTES,
            pages: file.pages(),
        },
    );
    if let Some(sink) = sink.as_deref_mut() {
        traces = traces.with_sink(sink);
    }
    let mut bar = bar(path, &file);
    let parsed = traces.parse(file.bytes(), &mut file.release_behind(&mut bar));
    drop(bar);
    let input = match snapshot::finish(traces, parsed) {
        Streamed::Snapshot(s) => return Ok(Input::Snapshot(Box::new(s))),
        Streamed::Other(doc) => from_document_with(path, doc, parts)?,
        Streamed::ReadAgain => from_document_with(path, parse(path, &file)?, parts)?,
    };
    // read the generic way: the sink gets the events from the start, as a streamed reading
    // would have given them
    match (input, sink) {
        (Input::Snapshot(mut snap), Some(sink)) => {
            sink.restart();
            crate::model::trace::feed(&snap, sink);
            for trace in &mut snap.traces {
                trace.events = Vec::new();
                trace.aux = Vec::new();
            }
            Ok(Input::Snapshot(snap))
        }
        (input, _) => Ok(input),
    }
}

/// What a decoded pickle is, from its content.
pub fn from_document(path: &Path, doc: Document) -> Result<Input> {
    from_document_with(path, doc, SnapshotParts::All)
}

fn from_document_with(path: &Path, doc: Document, parts: SnapshotParts) -> Result<Input> {
    let root = doc.root();
    match kind::of_document(&doc, root) {
        Some(Kind::Snapshot) => {
            return snapshot::from_document_parts(&doc, parts)
                .map(|s| Input::Snapshot(Box::new(s)))
                .map_err(|m| Error::input(path, m));
        }
        Some(Kind::Stats | Kind::Record) => {
            return tracker::from_document(doc)
                .map(|t| Input::Tracker(Box::new(t)))
                .map_err(|m| Error::input(path, m));
        }
        None => {}
    }
    if let Some(d) = doc.as_dict(root) {
        let keys: Vec<String> = d
            .iter()
            .take(8)
            .map(|(k, _)| {
                doc.as_str(k)
                    .map_or_else(|| "?".into(), |s| format!("'{s}'"))
            })
            .collect();
        return Err(Error::input(
            path,
            format!(
                "a pickle, but not one memtrack knows: a dict with keys [{}]; {READS}",
                keys.join(", ")
            ),
        ));
    }
    if let View::Object(o) = doc.view(root) {
        let callable = match doc.view(o.callable) {
            View::Global { module, name } => format!("{module}.{name}"),
            _ => "an object".to_string(),
        };
        return Err(Error::input(
            path,
            format!(
                "the pickle's top-level value is built by calling {callable}; memtrack never runs code from a file. {READS}"
            ),
        ));
    }
    Err(Error::input(
        path,
        format!(
            "a pickle whose top-level value is a {}, not a dict; {READS}",
            doc.type_name(root)
        ),
    ))
}

/// Load a file that must be tracker stats.
pub fn load_tracker(path: &Path) -> Result<TrackerStats> {
    match load(path)? {
        Input::Tracker(t) => Ok(*t),
        other => Err(Error::input(
            path,
            format!(
                "this command reads a `record` or MemoryTracker stats file, and this file is {}",
                other.kind()
            ),
        )),
    }
}

/// Load a file that must be an allocator snapshot.
pub fn load_snapshot(path: &Path) -> Result<Snapshot> {
    load_snapshot_parts(path, SnapshotParts::All)
}

/// Load only `parts` of a file that must be an allocator snapshot.
pub fn load_snapshot_parts(path: &Path, parts: SnapshotParts) -> Result<Snapshot> {
    snapshot_only(path, load_with(path, parts)?)
}

/// Load a file that must be an allocator snapshot, its trace events to `sink` as they are
/// read (see `load_streaming`).
pub fn load_snapshot_streaming(
    path: &Path,
    parts: SnapshotParts,
    sink: &mut dyn TraceSink,
) -> Result<Snapshot> {
    snapshot_only(path, load_streaming(path, parts, sink)?)
}

fn snapshot_only(path: &Path, input: Input) -> Result<Snapshot> {
    match input {
        Input::Snapshot(s) => Ok(*s),
        other => Err(Error::input(
            path,
            format!(
                "this command reads allocator snapshots (torch.cuda.memory._dump_snapshot()), and this file is {}",
                other.kind()
            ),
        )),
    }
}

/// The snapshot `fixtures/snapshots/NAME`, for unit tests of the stages after this one.
#[cfg(test)]
pub fn snapshot_fixture(name: &str) -> crate::model::snapshot::Snapshot {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/snapshots")
        .join(name);
    match load(&path).unwrap() {
        Input::Snapshot(s) => *s,
        _ => panic!("{name} is a snapshot"),
    }
}
