//! Allocator snapshots (`torch.cuda.memory._dump_snapshot()`, `memory_snapshot()`) to
//! `model::Snapshot`. The files import one way:
//!
//! - [`document`]: a decoded pickle of any schema era to the model (segments, blocks, frames,
//!   and the traces, whether the document holds them or the streamed reading read them);
//! - [`traces`]: `device_traces` read straight from the opcodes as the file streams by, each
//!   event handed on as it is decoded (`TraceReader`, a `pickle::Divert`);
//! - [`tail`]: the back part of a round of the trace, read on a second core;
//! - [`rounds`]: how the trace is cut into rounds between the two cores (a leaf);
//! - [`early`]: the second core's first round, started with the file's reading;
//! - [`fields`]: the keys all three read, numbered (a leaf).
//!
//! This file joins them: a streamed reading that stands is converted with the document.

mod document;
mod early;
mod fields;
mod rounds;
mod tail;
mod traces;

pub use document::{from_document, from_document_parts};
pub use traces::{ReadBy, Reading, SecondCore, StreamedTraces, TraceReader};

use crate::formats::kind::{of_document, Kind};
use crate::model::snapshot::{Parts, Snapshot};
use crate::model::trace::TraceSink;
use crate::pickle::{Document, Pages, PickleError, Progress};

/// The call that makes a snapshot with the history every trace command reads (every event,
/// with Python and C++ stacks), as the messages that ask for one name it.
pub const RECORD_HISTORY_CALL: &str = "torch.cuda.memory._record_memory_history(stacks=\"all\") at the start and torch.cuda.memory._dump_snapshot(\"snapshot.pickle\") where you want the snapshot";

/// The call that records the stack of every allocation and free, with C++ frames, as the
/// messages about a capture without stacks name it.
pub const RECORD_STACKS_CALL: &str =
    "torch.cuda.memory._record_memory_history(context=\"all\", stacks=\"all\")";

/// The outcome of a reading with a [`TraceReader`].
pub enum Streamed {
    /// A snapshot whose traces were streamed, and the reading stands.
    Snapshot(Snapshot),
    /// A file the reader had nothing to do with (no top-level `device_traces`): its document.
    Other(Document),
    /// The reading cannot vouch for the file: read it the generic way.
    ReadAgain,
}

/// What the parse that used `reader` amounts to: the snapshot, converted from the document and
/// the streamed traces (with stacks, the sink is told the snapshot's stack ids last), or why
/// not. With `MEMTRACK_DEBUG_STREAM` set, why a reading is dropped goes to stderr.
pub fn finish(reader: TraceReader<'_>, parsed: Result<Document, PickleError>) -> Streamed {
    let (doc, streamed, parts, sink) = match reader.finish(parsed) {
        Reading::Traces {
            doc,
            traces,
            parts,
            sink,
        } => (doc, traces, parts, sink),
        Reading::Other(doc) => return Streamed::Other(doc),
        Reading::ReadAgain => return Streamed::ReadAgain,
    };
    if of_document(&doc, doc.root()) != Some(Kind::Snapshot) {
        traces::say_dropped(&"not a snapshot");
        return Streamed::ReadAgain;
    }
    match document::from_document_streamed(&doc, parts, streamed) {
        Ok((s, stack_ids)) => {
            if let (Some(sink), Parts::All) = (sink, parts) {
                sink.renumber_stacks(&stack_ids);
            }
            Streamed::Snapshot(s)
        }
        Err(e) => {
            traces::say_dropped(&e);
            Streamed::ReadAgain
        }
    }
}

/// Decode `data` with its `device_traces` streamed (`parts` of it).
pub fn read(data: &[u8], progress: &mut dyn Progress, parts: Parts) -> Streamed {
    let mut reader = TraceReader::new(parts, data.len());
    let parsed = crate::pickle::parse_with_divert(data, progress, &mut reader);
    finish(reader, parsed)
}

/// `read`, with parts of a trace handed to a second core whatever the file's size
/// (`formats::load` does so for large files only), `round_bytes` at a time, the events to
/// `sink` if one is given; also what the second core's reader read, on which core.
pub fn read_on_two_cores(
    data: &[u8],
    parts: Parts,
    round_bytes: usize,
    sink: Option<&mut dyn TraceSink>,
) -> (Streamed, ReadBy) {
    let mut reader = TraceReader::new(parts, data.len()).with_second_core(SecondCore {
        min_bytes: 0,
        round_bytes,
        pages: Pages::default(),
    });
    if let Some(sink) = sink {
        reader = reader.with_sink(sink);
    }
    let parsed = reader.parse(data, &mut ());
    let read_by = reader.read_by();
    (finish(reader, parsed), read_by)
}
