//! A snapshot's `device_traces`, read straight from the opcodes while the file streams by
//! (`pickle::Divert`): each event becomes a `TraceEvent` as soon as it is decoded, and neither
//! the event dicts nor their frame lists ever become document values. Real captures write a
//! fresh frame list into every event (millions of lists of 14–67 memo references); here each
//! list is interned on the spot (by content, as `Conv` interns) and the memo keeps only a
//! handle to it, so memory grows with the distinct stacks, not with the trace.
//!
//! The reader knows the layout `_dump_snapshot` writes: lists of event dicts whose values are
//! numbers, strings, memo references and frame lists. Any other value of an event goes to the
//! generic machine (`Diverted::generic_value`); anything else in the lists (an event shared
//! through the memo, a list where an event should be) is an error, after which the caller reads
//! the file the generic way, which then says exactly what the file holds.

mod event;
mod second_core;
mod walk;

use std::sync::atomic::Ordering;

use rustc_hash::FxHashMap;

use crate::model::snapshot::{Action, DeviceTrace, Parts};
use crate::model::trace::TraceSink;
use crate::pickle::{Divert, Diverted, Document, Pages, PickleError, Progress, Value};

use super::early::{self, Early};
use super::tail::{self};

pub(super) type Result<T> = std::result::Result<T, PickleError>;

use super::fields::{KeyCache, EVENT_FIELDS};

/// Memo handle of an event dict (a GET of one elsewhere sends the file to the generic path).
pub(super) const EVENT_HANDLE: u64 = 1 << 40;
/// Memo handle of a frame list whose stack was not kept (reads without stacks).
pub(super) const NO_STACK_HANDLE: u64 = EVENT_HANDLE + 1;

/// Memo handle of a value the second core's reader left unread (a frame dict, without stacks).
pub(super) const UNREAD_HANDLE: u64 = EVENT_HANDLE + 2;

/// What the reader made of `device_traces`.
#[derive(Default)]
pub struct StreamedTraces {
    /// One per `device_traces` entry; an event's `stack` is a local stack id (see `stacks`)
    /// until `Conv` maps it.
    pub traces: Vec<DeviceTrace>,
    /// Entries of each list (the events themselves are left out for `Parts::SegmentsOnly`).
    pub lengths: Vec<usize>,
    /// Each distinct stack, as its frames (document values: frame dicts), in the order of
    /// first appearance.
    pub stacks: Vec<Box<[Value]>>,
    /// An event (kept, or given to the sink) had a `time_us`.
    pub any_time: bool,
}

/// What the second core's reader read in a reading on two cores.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReadBy {
    /// Events the second core read (and the main reading took over).
    pub second_core_events: usize,
    /// Rounds whose second core's part was taken over.
    pub second_core_rounds: usize,
    /// Of `second_core_events`, those of the round started with the file (see `early`).
    pub early_round_events: usize,
    /// Events of the main reading's own shares that the reader read on the main thread
    /// (`read_own_share`).
    pub own_share_events: usize,
}

/// What a parse that used a [`TraceReader`] left, before the document is converted.
pub enum Reading<'f> {
    /// The reader read the file's `device_traces`, and nothing it saw stops the reading from
    /// standing: the document of the rest, the traces, and where their events went.
    Traces {
        doc: Document,
        traces: StreamedTraces,
        parts: Parts,
        sink: Option<&'f mut dyn TraceSink>,
    },
    /// A file the reader had nothing to do with (no top-level `device_traces`): its document.
    Other(Document),
    /// The reading cannot vouch for the file: read it the generic way.
    ReadAgain,
}

/// The `pickle::Divert` for a snapshot's top-level `device_traces`.
pub struct TraceReader<'f> {
    parts: Parts,
    /// Where the events go instead of `out.traces` (see `with_sink`).
    sink: Option<&'f mut dyn TraceSink>,
    /// Hand parts of the trace to a second core (see `tail`).
    second_core: Option<SecondCore<'f>>,
    /// The second core's first round, started with the reading (see `early`).
    early: Option<Early>,
    read_by: ReadBy,
    /// Events the first device's vector is made room for up front: address space only until
    /// written, and the vector then never moves (a growing 60 MB vector is copied, page
    /// faults and all, at each doubling).
    room: usize,
    /// `device_traces` was read (by this reader), and how many times the key came.
    read: bool,
    keys_seen: u32,
    out: StreamedTraces,
    stack_ids: FxHashMap<Box<[Value]>, u32>,
    /// Event keys to field numbers (events repeat one key order with memo-shared keys).
    keys: KeyCache,
    actions: Vec<(Value, Action)>,
    scratch: Vec<Value>,
}

/// When and how parts of a trace are read on a second core: in rounds, each over the next
/// `round_bytes` of the file (or what is left), the main reading taking the front part and the
/// second core the back part (split by their speeds in the last round), so the events the
/// second core holds until the main reading takes them over stay bounded however large the
/// file.
#[derive(Clone, Copy)]
pub struct SecondCore<'f> {
    /// Only when at least this many bytes are left to read.
    pub min_bytes: usize,
    /// The bytes of a round.
    pub round_bytes: usize,
    /// Where the pages it has read go back.
    pub pages: Pages<'f>,
}

impl SecondCore<'_> {
    /// Below this, a second thread is not worth starting.
    pub const MIN_BYTES: usize = 32 << 20;
    /// About 850,000 events of a real-shaped capture held by the second core at most (~50 MB
    /// with their memo entries); a round's start and take-over cost well under 1% of it.
    pub const ROUND_BYTES: usize = 256 << 20;
}

impl<'f> TraceReader<'f> {
    /// A reader for `parts` of a file of `file_len` bytes.
    pub fn new(parts: Parts, file_len: usize) -> TraceReader<'f> {
        TraceReader {
            parts,
            sink: None,
            second_core: None,
            early: None,
            read_by: ReadBy::default(),
            // an event takes at least ~48 bytes of pickle
            room: if parts == Parts::SegmentsOnly {
                0
            } else {
                file_len / 48
            },
            read: false,
            keys_seen: 0,
            out: StreamedTraces::default(),
            stack_ids: FxHashMap::default(),
            keys: KeyCache::new(EVENT_FIELDS),
            actions: Vec::new(),
            scratch: Vec::new(),
        }
    }
}

impl<'f> TraceReader<'f> {
    /// Hand the events to `sink` as they are read, instead of keeping them (`finish`'s
    /// snapshot then has the traces' lengths and streams, and no events). With stacks, their
    /// ids are the reading's own until `finish` tells the sink the snapshot's
    /// (`TraceSink::renumber_stacks`).
    pub fn with_sink(mut self, sink: &'f mut dyn TraceSink) -> TraceReader<'f> {
        self.room = 0;
        self.sink = Some(sink);
        self
    }

    /// Read parts of a large trace on a second core where one is free.
    pub fn with_second_core(mut self, second: SecondCore<'f>) -> TraceReader<'f> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        if cores >= 2 {
            self.second_core = Some(second);
        }
        self
    }

    /// What the second core's reader read, on which core.
    pub fn read_by(&self) -> ReadBy {
        self.read_by
    }

    /// Decode `data` with this reader; with a second core, its first round starts at once
    /// (see `early`), and is stopped if the main reading never comes to the trace.
    pub fn parse(&mut self, data: &'f [u8], progress: &mut dyn Progress) -> Result<Document> {
        let Some(second) = self.second_core.filter(|s| data.len() >= s.min_bytes) else {
            return crate::pickle::parse_with_divert(data, progress, self);
        };
        let plan = early::Plan {
            parts: self.parts,
            pages: second.pages,
            min_bytes: second.min_bytes,
            round_bytes: second.round_bytes,
        };
        std::thread::scope(|scope| {
            let early = early::start(scope, data, plan);
            let cancel = early.cancel.clone();
            self.early = Some(early);
            let parsed = crate::pickle::parse_with_divert(data, progress, self);
            cancel.store(true, Ordering::Relaxed);
            self.early = None; // (its channels closed: a round not yet sent ends there)
            parsed
        })
    }

    /// What the parse that used this reader left ([`Reading`]); a reading it cannot vouch
    /// for is `ReadAgain`.
    pub fn finish(self, parsed: Result<Document>) -> Reading<'f> {
        let doc = match parsed {
            Ok(doc) => doc,
            Err(e) => return dropped(&e),
        };
        if !self.read {
            return Reading::Other(doc);
        }
        if self.keys_seen != 1 {
            return dropped(&"device_traces more than once");
        }
        if doc.taken_reused() {
            return dropped(&"an event or frame list referenced outside device_traces, or from further back than the memo keeps its handles");
        }
        Reading::Traces {
            doc,
            traces: self.out,
            parts: self.parts,
            sink: self.sink,
        }
    }
}

/// Say why a reading is dropped, to stderr with `MEMTRACK_DEBUG_STREAM` set (for developers:
/// the file is read again anyway).
pub(super) fn say_dropped(why: &dyn std::fmt::Display) {
    debug(&format_args!("streamed reading dropped: {why}"));
}

/// A reading dropped, and why said.
fn dropped<'f>(why: &dyn std::fmt::Display) -> Reading<'f> {
    say_dropped(why);
    Reading::ReadAgain
}

impl Divert for TraceReader<'_> {
    fn wants(&mut self, key: &str, _prior: &[&str]) -> bool {
        if key != "device_traces" {
            return false;
        }
        self.keys_seen += 1;
        self.keys_seen == 1
    }

    fn read(&mut self, r: &mut Diverted<'_, '_, '_>) -> Result<Value> {
        let read = self.read_device_traces(r);
        tail::release_spare_chunks();
        read.map(|()| Value::NONE)
    }
}

/// With `MEMTRACK_DEBUG_STREAM` set, how the reading went, on stderr (for developers).
pub(super) fn debug(what: &dyn std::fmt::Display) {
    if std::env::var_os("MEMTRACK_DEBUG_STREAM").is_some() {
        eprintln!("memtrack: {what}");
    }
}
