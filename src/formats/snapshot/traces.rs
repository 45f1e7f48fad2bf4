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

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{Scope, ScopedJoinHandle};
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

use crate::model::snapshot::{
    Action, DeviceTrace, EventAux, Parts, StackId, TraceEvent, MAX_STREAMS, NO_TIME,
};
use crate::model::trace::TraceSink;
use crate::pickle::{
    Divert, Diverted, Document, IntOrRef, Op, Pages, PickleError, Progress, Value, View,
    RECENT_HANDLES,
};

use super::early::{self, Early};
use super::rounds::{self, known_between, RoundRead, LAST_ROUND_BYTES, SCAN_BYTES};
use super::tail::{self, Entry, Known, Tail, CHUNK as TAIL_CHUNK, FROM_CHECK};

type Result<T> = std::result::Result<T, PickleError>;

use super::fields::{
    set_action, set_text_field, KeyCache, EVENT_FIELDS, F_ACTION, F_ADDR, F_COMPILE_CONTEXT,
    F_DEVICE_FREE, F_FRAMES, F_SIZE, F_STREAM, F_TIME, F_USER_METADATA, UNKNOWN as F_UNKNOWN,
};

/// Memo handle of an event dict (a GET of one elsewhere sends the file to the generic path).
const EVENT_HANDLE: u64 = 1 << 40;
/// Memo handle of a frame list whose stack was not kept (reads without stacks).
const NO_STACK_HANDLE: u64 = EVENT_HANDLE + 1;

/// Memo handle of a value the second core's reader left unread (a frame dict, without stacks).
const UNREAD_HANDLE: u64 = EVENT_HANDLE + 2;

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
        self.read = true;
        let early = self.early.take();
        let (cancel, done) = match &early {
            Some(e) => (e.cancel.clone(), e.done.clone()),
            None => (Arc::default(), Arc::default()),
        };
        let here = r.position();
        let read = std::thread::scope(|scope| {
            let mut tail = TailState::new(&cancel, &done);
            if let Some(early) = early {
                tail.adopt_early(early, here);
            }
            let mut devices = 0usize;
            let read = list(r, b']', &mut |r, at| {
                if let Walk::BatchRead { .. } = at {
                    return Ok(());
                }
                if r.peek() != Some(b']') {
                    return Err(r.error("device_traces: expected a list per device"));
                }
                let mut t = DeviceTrace::default();
                if devices == 0 {
                    let _ = t.events.try_reserve(self.room); // only an optimization
                }
                self.out.traces.push(t);
                self.out.lengths.push(0);
                self.events(r, devices, &mut tail, scope)?;
                devices += 1;
                Ok(())
            });
            cancel.store(true, Ordering::Relaxed); // a tail still reading stops
            read
        });
        tail::release_spare_chunks();
        read?;
        Ok(Value::NONE)
    }
}

/// A memo entry as it stood when the second core's reading fetched it.
enum Held {
    /// One of that reading's own.
    Tail(Entry),
    /// The main reading's.
    Main(Value),
}

/// The second core's reading, from the main reading's side.
struct TailState<'s> {
    cancel: &'s AtomicBool,
    done: &'s AtomicUsize,
    /// Where it started (`usize::MAX`: none is reading).
    at: usize,
    /// One was started and is not over: the next round starts as a round is taken over, or
    /// at the end of the batch after a reading it gave up or that did not hold (none after
    /// one that was not where an event starts, whose thread may still be reading).
    started: bool,
    /// Where the main reading went on after the last round it took over (0: none yet).
    resumed_at: usize,
    /// What the second core was told, for the main reading's own share of the round (taken
    /// at its first event).
    own_known: Option<Known>,
    /// `own_known` came from the skim of an early round: it names strings the trace's first
    /// events memoize, so the share is taken after the main reading has read an event, told
    /// only the strings its memo then holds.
    own_early: bool,
    /// It gives back what it was told, with its reading and how long that took.
    handle: Option<Pending<'s>>,
    /// How fast the main reading read its own share and the second core its part in the
    /// last round (bytes a second), which split the next round so that neither waits long.
    speeds: Option<(f64, f64)>,
    /// When and where the main reading's share of this round began.
    round_began: (Instant, usize),
    /// The time the main reading spent in this round adopting the last round's reading (not
    /// reading), and that time an event the last time it was measured.
    adopting: Duration,
    adopt_per_event: f64,
}

impl<'s> TailState<'s> {
    fn new(cancel: &'s AtomicBool, done: &'s AtomicUsize) -> Self {
        TailState {
            cancel,
            done,
            at: usize::MAX,
            started: false,
            resumed_at: 0,
            own_known: None,
            own_early: false,
            handle: None,
            speeds: None,
            round_began: (Instant::now(), 0),
            adopting: Duration::ZERO,
            // (measured at each take-over; 50–150 ns on gen_data's captures)
            adopt_per_event: 70e-9,
        }
    }

    /// The share of a `round` of bytes the main reading takes, when it first adopts the
    /// `to_adopt` events of the round before.
    fn main_share(&self, round: usize, to_adopt: usize) -> f64 {
        let adopting = to_adopt as f64 * self.adopt_per_event;
        rounds::main_share(round, self.speeds, adopting)
    }

    /// Take the early round over as this round (if the skim started one): the main reading
    /// reads its share from `here`, where the trace starts.
    fn adopt_early(&mut self, early: Early, here: usize) {
        if let Ok(Some(start)) = early.start.recv() {
            self.at = start.at;
            self.started = true;
            self.own_known = Some(start.known);
            self.own_early = true;
            self.handle = Some(Pending::Early(early.result));
            self.round_began = (Instant::now(), here);
        }
    }
}

/// A second core's reading under way: on a thread of the trace's reading, or the early round.
enum Pending<'s> {
    Thread(ScopedJoinHandle<'s, RoundRead>),
    Early(std::sync::mpsc::Receiver<RoundRead>),
}

impl Pending<'_> {
    /// Its outcome, once it is over (None if its thread panicked).
    fn wait(self) -> Option<RoundRead> {
        match self {
            Pending::Thread(h) => h.join().ok(),
            Pending::Early(r) => r.recv().ok(),
        }
    }
}

/// What is left of a taken-over reading once its memo entries are stored: its events, their
/// streams and aux, and the strings they fetched from the memo.
struct Unadopted {
    events: Vec<Vec<TraceEvent>>,
    trace: DeviceTrace,
    deferred: Vec<tail::Deferred>,
}

/// A second core's reading being taken over: its memo entries, which take the ids from
/// `first` in the main reading's memo, and its stacks, mapped to the main reading's as events
/// are met.
struct TakenOver {
    first: u64,
    entries: Vec<tail::Packed>,
    /// Of each of its strings, the document string it became.
    text_values: Vec<Value>,
    stacks: Vec<Box<[u32]>>,
    checks: Vec<tail::Check>,
    /// Of each of its stacks, the main reading's id (`u32::MAX`: not met yet).
    stack_of: Vec<u32>,
}

impl TakenOver {
    /// Its strings stored as document strings.
    fn new(
        r: &mut Diverted<'_, '_, '_>,
        first: u64,
        entries: Vec<tail::Packed>,
        texts: &[Box<str>],
        stacks: Vec<Box<[u32]>>,
        checks: Vec<tail::Check>,
    ) -> TakenOver {
        let mut text_values = vec![Value::NONE; texts.len()];
        for e in &entries {
            if let Entry::Text(i) = e.get() {
                text_values[i as usize] = r.push_text(&texts[i as usize]);
            }
        }
        TakenOver {
            first,
            entries,
            text_values,
            stack_of: vec![u32::MAX; stacks.len()],
            stacks,
            checks,
        }
    }

    /// Store its memo entries after the main reading's: strings as document strings, events
    /// and frame lists as handles (frame lists as their stack's when stacks are `kept`).
    fn memoize(self, r: &mut Diverted<'_, '_, '_>, kept: bool) {
        r.memoize_run(self.entries.iter().map(|e| match e.get() {
            Entry::Event => Value::taken(EVENT_HANDLE),
            Entry::FrameList(k) if kept => Value::taken(self.stack_of[k as usize] as u64),
            Entry::FrameList(_) => Value::taken(NO_STACK_HANDLE),
            Entry::Text(i) => self.text_values[i as usize],
            Entry::Unread => Value::taken(UNREAD_HANDLE),
        }));
    }
}

impl<'f> TraceReader<'f> {
    /// A device's list of events. A second core's reading is started after a batch and taken
    /// over where it started (between two events), the main reading's own share of the round
    /// read before that (`read_own_share`); the next round starts as one is taken over.
    fn events<'s, 'a: 's>(
        &mut self,
        r: &mut Diverted<'_, 'a, '_>,
        device: usize,
        tail: &mut TailState<'s>,
        scope: &'s Scope<'s, '_>,
    ) -> Result<()>
    where
        'f: 's,
    {
        list(r, b'}', &mut |r, at| match at {
            Walk::Item => {
                if r.position() >= tail.at && self.take_over(r, device, tail, scope) {
                    return Ok(());
                }
                if tail.own_known.is_some()
                    && r.position() < tail.at
                    && (!tail.own_early || self.out.lengths[device] > 0)
                    && self.read_own_share(r, device, tail)
                {
                    return Ok(());
                }
                self.event(r, device)
            }
            Walk::BatchRead { start } => {
                if !tail.started {
                    // (of a batch a round was taken over in, only what the main reading read
                    // after it)
                    self.start_tail(r, start.max(tail.resumed_at), tail, scope);
                }
                if tail.handle.is_some() {
                    r.read_elsewhere(tail.done.load(Ordering::Relaxed));
                }
                Ok(())
            }
        })
    }

    /// Start the second core's reading at an event past the main reading's share of this round
    /// (the next `round_bytes`, or what is left), to stop at the round's end, telling it the
    /// strings the bytes from `scan_from` (where an opcode starts) to here fetched from the memo.
    fn start_tail<'s, 'a: 's>(
        &mut self,
        r: &mut Diverted<'_, 'a, '_>,
        scan_from: usize,
        tail: &mut TailState<'s>,
        scope: &'s Scope<'s, '_>,
    ) where
        'f: 's,
    {
        if self.second_core.is_none() || r.memo_dense_len().is_none() {
            return;
        }
        let here = r.position();
        let text_of = |id: u64| r.memo_peek(id).and_then(|v| r.doc().as_str(v));
        let known = known_between(r.data(), scan_from, here, text_of);
        self.spawn_tail(r.data(), here, known, 0, tail, scope);
    }

    /// `start_tail` from `here`, the strings of the memo ids the round's reader may meet being
    /// `known`, the main reading first adopting `to_adopt` events of the last round.
    fn spawn_tail<'s, 'a: 's>(
        &mut self,
        data: &'a [u8],
        here: usize,
        known: Known,
        to_adopt: usize,
        tail: &mut TailState<'s>,
        scope: &'s Scope<'s, '_>,
    ) where
        'f: 's,
    {
        let Some(second) = self.second_core else {
            return;
        };
        // the least the file must still hold: a second thread is not worth starting for a small
        // file, but once rounds have run the last one is kept small (what the main reading
        // takes over after it is read alone)
        let left = data.len() - here;
        let floor = match tail.resumed_at {
            0 => second.min_bytes,
            _ => second.min_bytes.min(LAST_ROUND_BYTES),
        };
        if left < floor.max(1) {
            return;
        }
        tail.started = true;
        let share = |round| tail.main_share(round, to_adopt);
        let Some((at, stop)) = rounds::cut(data, here, &known, second.round_bytes, share) else {
            return;
        };
        let round = tail::Round {
            data,
            start: at,
            stop,
            parts: self.parts,
            pages: second.pages,
        };
        let progress = tail::Progress {
            cancel: tail.cancel,
            done: tail.done,
        };
        tail.at = at;
        tail.round_began = (Instant::now(), here);
        tail.adopting = Duration::ZERO;
        // (the last round's count, until this one reports)
        progress.done.store(0, Ordering::Relaxed);
        tail.own_known = Some(known.clone());
        tail.own_early = false;
        tail.handle = Some(Pending::Thread(scope.spawn(move || {
            let began = Instant::now();
            let read = tail::read(round, &known, progress);
            (known, read, began.elapsed())
        })));
    }

    /// The main reading is at or past where the second core's started: take its reading over
    /// if it is exactly there and every check holds (true), else read on alone.
    fn take_over<'s, 'a: 's>(
        &mut self,
        r: &mut Diverted<'_, 'a, '_>,
        device: usize,
        tail: &mut TailState<'s>,
        scope: &'s Scope<'s, '_>,
    ) -> bool
    where
        'f: 's,
    {
        let Some((t, first, texts, known)) = self.join_tail(r, tail) else {
            return false;
        };
        // The next round starts now, before this one's memo entries are stored and its events
        // go to the sink: the second core would idle meanwhile (a tenth of a round's time, and
        // all of it after the last round). It is told the strings of about the last thousand
        // events, as a round started after a batch is: those of the main reading's memo, and
        // those this round's reading stored itself, at the ids from `first` on.
        let data = r.data();
        let scan_from = known.event_start(data, t.end.saturating_sub(SCAN_BYTES), SCAN_BYTES);
        let text_of = |id: u64| match id.checked_sub(first) {
            Some(at) => match t.entries.get(at as usize)?.get() {
                Entry::Text(i) => Some(&*t.texts[i as usize]),
                _ => None,
            },
            None => r.memo_peek(id).and_then(|v| r.doc().as_str(v)),
        };
        if let Some(from) = scan_from {
            let next = known_between(data, from, t.end, text_of);
            self.spawn_tail(data, t.end, next, t.count, tail, scope);
        }
        let (began, count) = (Instant::now(), t.count);
        let (_, rest) = self.adopt_entries(r, device, t, first);
        self.adopt_events(device, rest, &texts);
        tail.adopting = began.elapsed();
        if count > 0 {
            // (averaged with the rounds before: a sink's cost comes in spikes, as when it
            // starts to write what it keeps to disk)
            let now = tail.adopting.as_secs_f64() / count as f64;
            tail.adopt_per_event = (tail.adopt_per_event + now) / 2.0;
        }
        true
    }

    /// The main reading's own share of a round, read by the second core's reader on this
    /// thread (it decodes a third faster than the machine: no document values, no memo
    /// lookups) up to where the second core started, and taken over as the second core's
    /// reading is (true, if that moved the reading on); nothing changes if it gives up or does
    /// not hold (the main reading then reads its share itself, as before).
    fn read_own_share(
        &mut self,
        r: &mut Diverted<'_, '_, '_>,
        device: usize,
        tail: &mut TailState<'_>,
    ) -> bool {
        let (Some(mut known), Some(second)) = (tail.own_known.take(), self.second_core) else {
            return false;
        };
        if tail.own_early {
            known = known.below(r.memo_dense_len().unwrap_or(0));
        }
        let (cancel, done) = (AtomicBool::new(false), AtomicUsize::new(0));
        let round = tail::Round {
            data: r.data(),
            start: r.position(),
            stop: tail.at,
            parts: self.parts,
            pages: second.pages,
        };
        let progress = tail::Progress {
            cancel: &cancel,
            done: &done,
        };
        let Some(t) = tail::read(round, &known, progress) else {
            debug(&"own share: gave up (a layout it leaves to the machine)");
            return false;
        };
        let Some(first) = r.memo_dense_len() else {
            return false;
        };
        let Some(texts) = self.check_tail(r, first, &known, &t) else {
            debug(&"own share: its reading did not hold");
            return false;
        };
        debug(&format_args!(
            "own share: read {} events, bytes {}..{}",
            t.count, t.start, t.end
        ));
        self.read_by.own_share_events += t.count;
        let start = t.start;
        let (end, rest) = self.adopt_entries(r, device, t, first);
        self.adopt_events(device, rest, &texts);
        end != start
    }

    /// A checked reading of the second core's reader taken over, first its memo entries: its
    /// stacks mapped to the main reading's, its entries stored after `first`, its events
    /// counted and the reading moved to its end (returned, with what is left to adopt).
    fn adopt_entries(
        &mut self,
        r: &mut Diverted<'_, '_, '_>,
        device: usize,
        t: Tail,
        first: u64,
    ) -> (usize, Unadopted) {
        let Tail {
            end,
            mut events,
            trace,
            count,
            entries,
            texts: tail_texts,
            stacks,
            checks,
            deferred,
            ..
        } = t;
        // its strings as document strings, its stacks as the main reading's (interned in the
        // order of its events, as one thread would have), then its memo entries
        let mut taken = TakenOver::new(r, first, entries, &tail_texts, stacks, checks);
        let keep = self.parts == Parts::All;
        if keep {
            for e in events.iter_mut().flatten() {
                if e.stack != StackId::MISSING {
                    e.stack = self.tail_stack(r, &mut taken, e.stack);
                }
            }
        }
        taken.memoize(r, keep);
        self.out.lengths[device] += count;
        r.skip_to(end);
        (
            end,
            Unadopted {
                events,
                trace,
                deferred,
            },
        )
    }

    /// Then its events: the strings they fetched from the memo (`texts`, now known) filled
    /// in, and appended to the trace or given to the sink.
    fn adopt_events(&mut self, device: usize, rest: Unadopted, texts: &[String]) {
        let Unadopted {
            mut events,
            trace: mut tail_trace,
            deferred,
        } = rest;
        if self.parts == Parts::SegmentsOnly {
            return;
        }
        for (d, text) in deferred.iter().zip(texts) {
            let (chunk, at) = (d.event as usize / TAIL_CHUNK, d.event as usize % TAIL_CHUNK);
            let e = &mut events[chunk][at];
            let mut set = |aux: &mut EventAux| match d.field {
                F_ACTION => set_action(text, e, aux),
                field => set_text_field(field, text, aux),
            };
            match tail_trace.aux.binary_search_by_key(&d.event, |&(i, _)| i) {
                Ok(i) => set(&mut tail_trace.aux[i].1),
                Err(i) => {
                    // most deferred strings say nothing (a known action, an empty
                    // `user_metadata`): an entry only for those that do
                    let mut aux = EventAux::default();
                    set(&mut aux);
                    if aux.says_something() {
                        tail_trace.aux.insert(i, (d.event, aux));
                    }
                }
            }
        }
        tail_trace.aux.retain(|(_, a)| a.says_something());
        self.append_tail_events(device, events, tail_trace);
    }

    /// Wait for the second core's reading of this round and check it (`check_tail`): the
    /// reading, the first memo id of its entries and the strings of its deferred values; None
    /// (and the main reading reads on alone) if it was not where an event starts, gave up or
    /// does not hold. Either way its thread is over and the next round may start.
    fn join_tail(
        &mut self,
        r: &mut Diverted<'_, '_, '_>,
        tail: &mut TailState<'_>,
    ) -> Option<(Tail, u64, Vec<String>, Known)> {
        let at = std::mem::replace(&mut tail.at, usize::MAX);
        r.read_elsewhere(0); // from here on the main reading's position says it all
        if r.position() != at {
            tail.cancel.store(true, Ordering::Relaxed);
            debug(&format_args!(
                "second core: byte {at} was not an event start"
            ));
            return None;
        }
        let main_took = tail.round_began.0.elapsed().saturating_sub(tail.adopting);
        let main_bytes = at - tail.round_began.1;
        let pending = tail.handle.take();
        let early = matches!(pending, Some(Pending::Early(_)));
        let joined = pending.and_then(Pending::wait);
        // its thread has ended: whatever came of this round, the next may be tried
        tail.started = false;
        let Some((known, Some(t), tail_took)) = joined else {
            debug(&"second core: gave up (a layout it leaves to the main reading)");
            return None;
        };
        let first = r.memo_dense_len()?;
        let Some(texts) = self.check_tail(r, first, &known, &t) else {
            debug(&"second core: its reading did not hold");
            return None;
        };
        debug(&format_args!(
            "second core: read {} events, bytes {}..{}, in {tail_took:?} (the main reading's {} bytes before: {main_took:?}, after adopting the last round's reading for {:?})",
            t.count, t.start, t.end, main_bytes, tail.adopting
        ));
        self.read_by.second_core_events += t.count;
        self.read_by.second_core_rounds += 1;
        if early {
            self.read_by.early_round_events += t.count;
        }
        let speed = |bytes: usize, took: Duration| bytes as f64 / took.as_secs_f64().max(1e-6);
        let (main_speed, tail_speed) = (speed(main_bytes, main_took), speed(t.end - at, tail_took));
        tail.speeds = Some((main_speed, tail_speed));
        tail.resumed_at = t.end;
        Some((t, first, texts, known))
    }

    /// A taken-over reading's events, after the main reading's: to the sink, or appended to
    /// the device's trace a chunk at a time, each let go once copied; their streams as the
    /// main reading's (`check_tail` counted them).
    fn append_tail_events(
        &mut self,
        device: usize,
        events: Vec<Vec<TraceEvent>>,
        tail_trace: DeviceTrace,
    ) {
        let trace = &mut self.out.traces[device];
        let streams: Vec<u16> = (tail_trace.streams.iter())
            .map(|&s| trace.stream_index(s).unwrap_or(0))
            .collect();
        self.out.any_time |= events.iter().flatten().any(|e| e.time_us != NO_TIME);
        if let Some(sink) = self.sink.as_deref_mut() {
            let mut aux = tail_trace.aux.iter().peekable();
            for (i, e) in events.iter().flatten().enumerate() {
                let a = aux.next_if(|(at, _)| *at as usize == i).map(|(_, a)| a);
                let stream = tail_trace.stream(e);
                let e = TraceEvent {
                    stream_index: streams[e.stream_index as usize],
                    ..*e
                };
                sink.event(device as u32, &e, stream, a);
            }
            events.into_iter().for_each(tail::spare_chunk);
            return;
        }
        let same = streams.iter().enumerate().all(|(i, &s)| s as usize == i);
        let first_index = trace.events.len() as u32;
        for mut chunk in events {
            if !same {
                for e in &mut chunk {
                    e.stream_index = streams[e.stream_index as usize];
                }
            }
            trace.events.extend_from_slice(&chunk);
            tail::spare_chunk(chunk);
        }
        (trace.aux).extend(
            tail_trace
                .aux
                .into_iter()
                .map(|(i, a)| (first_index + i, a)),
        );
    }

    /// The main reading's stack for a stack of the second core's reading (`check_tail` has
    /// checked every id it holds).
    fn tail_stack(
        &mut self,
        r: &Diverted<'_, '_, '_>,
        taken: &mut TakenOver,
        stack: StackId,
    ) -> StackId {
        let first = taken.first;
        let k = if stack.0 & FROM_CHECK != 0 {
            // an event's frames fetched by reference: a list of the tail's, or the main's
            let id = taken.checks[(stack.0 & !FROM_CHECK) as usize].id();
            if id >= first {
                match taken.entries[(id - first) as usize].get() {
                    Entry::FrameList(k) => k,
                    _ => return StackId::MISSING, // check_tail let none through
                }
            } else {
                let v = r.memo_peek(id).unwrap_or(Value::NONE);
                if let Some(h) = r.doc().as_taken(v) {
                    return StackId(h as u32);
                }
                self.scratch.clear();
                self.scratch
                    .extend_from_slice(r.doc().as_seq(v).unwrap_or(&[]));
                return self.intern();
            }
        } else {
            stack.0
        };
        if taken.stack_of[k as usize] == u32::MAX {
            self.scratch.clear();
            for &id in taken.stacks[k as usize].iter() {
                let id = id as u64;
                self.scratch.push(if id >= first {
                    match taken.entries[(id - first) as usize].get() {
                        Entry::Text(i) => taken.text_values[i as usize],
                        _ => Value::NONE, // check_tail let none through
                    }
                } else {
                    r.memo_peek(id).unwrap_or(Value::NONE)
                });
            }
            taken.stack_of[k as usize] = self.intern().0;
        }
        StackId(taken.stack_of[k as usize])
    }

    /// Whether the second core's reading holds now that the first id of its memo entries is
    /// known; the strings of its deferred values, in order.
    fn check_tail(
        &self,
        r: &Diverted<'_, '_, '_>,
        first: u64,
        known: &Known,
        t: &Tail,
    ) -> Option<Vec<String>> {
        let keep = self.parts == Parts::All;
        let streams = self.out.traces.last().map_or(0, |t| t.streams.len());
        if streams + t.trace.streams.len() > MAX_STREAMS {
            return None; // the main reading reads on, and says so
        }
        // what it was told is still so (no PUT changed it since)
        for (id, text) in known.iter() {
            if r.memo_peek(id).and_then(|v| r.doc().as_str(v)) != Some(text) {
                return None;
            }
        }
        if t.max_ahead >= first as i64 {
            return None; // a reference to an id not stored yet
        }
        let memo_then = |entries: u32| first + entries as u64;
        // an entry of the tail, or of the main reading's memo as it stood then
        let lookup = |id: u64, entries: u32| -> Option<Held> {
            if id >= memo_then(entries) {
                return None;
            }
            if id >= first {
                let at = (id - first) as usize;
                return Some(Held::Tail(t.entries[at].get()));
            }
            r.memo_peek(id).map(Held::Main)
        };
        for c in &t.checks {
            let frame_list = c.frame_list();
            // handles: the main reading's window holds the recent ones only
            let recent = memo_then(c.entries()) - c.id() <= RECENT_HANDLES as u64;
            let ok = match lookup(c.id(), c.entries())? {
                Held::Tail(Entry::FrameList(_)) => frame_list && recent,
                Held::Tail(Entry::Text(_)) => !frame_list,
                Held::Tail(Entry::Unread) => !frame_list && !keep,
                Held::Tail(Entry::Event) => false,
                Held::Main(v) => match r.doc().as_taken(v) {
                    Some(h) if h < EVENT_HANDLE || h == NO_STACK_HANDLE => frame_list && recent,
                    Some(UNREAD_HANDLE) => !frame_list && !keep,
                    Some(_) => false,
                    None => !frame_list || r.doc().as_seq(v).is_some(),
                },
            };
            if !ok {
                return None;
            }
        }
        // the frames of its stacks: strings of its own, or values of the main reading's
        // memo that are no handles (the main reading would refuse those as frames)
        for &id in t.stacks.iter().flat_map(|s| s.iter()) {
            let id = id as u64;
            let ok = if id >= first {
                matches!(t.entries.get((id - first) as usize)?.get(), Entry::Text(_))
            } else {
                r.memo_peek(id).is_some_and(|v| !v.is_taken())
            };
            if !ok {
                return None;
            }
        }
        t.deferred
            .iter()
            .map(|d| match lookup(d.id, d.entries)? {
                Held::Tail(Entry::Text(i)) => Some(t.texts[i as usize].to_string()),
                Held::Tail(_) => None,
                Held::Main(v) => r.doc().as_str(v).map(str::to_string),
            })
            .collect()
    }
}

/// With `MEMTRACK_DEBUG_STREAM` set, how the reading went, on stderr (for developers).
fn debug(what: &dyn std::fmt::Display) {
    if std::env::var_os("MEMTRACK_DEBUG_STREAM").is_some() {
        eprintln!("memtrack: {what}");
    }
}

/// Where [`list`] is when it calls back.
#[derive(Clone, Copy)]
enum Walk {
    /// At an item: read it.
    Item,
    /// A MARK … APPENDS batch of items, begun at byte `start`, was read.
    BatchRead { start: usize },
}

/// A list: EMPTY_LIST, its memo entry, then its items in MARK … APPENDS batches or one by one
/// with APPEND; `visit` reads one item (which starts with opcode `item_code`) at each
/// `Walk::Item`, and is told of each batch read. The list itself is memoized as an inert
/// handle.
fn list<'a>(
    r: &mut Diverted<'_, 'a, '_>,
    item_code: u8,
    visit: &mut dyn FnMut(&mut Diverted<'_, 'a, '_>, Walk) -> Result<()>,
) -> Result<()> {
    match r.next_op()? {
        Op::EmptyList => {}
        _ => return Err(r.error("expected a list")),
    }
    memo_entries(r, Value::taken(EVENT_HANDLE))?;
    loop {
        match r.peek() {
            Some(b'(') => {
                r.eat(b'(');
                let start = r.position();
                while r.peek() != Some(b'e') {
                    visit(r, Walk::Item)?;
                }
                r.eat(b'e');
                visit(r, Walk::BatchRead { start })?;
            }
            Some(c) if c == item_code => {
                visit(r, Walk::Item)?;
                if !r.eat(b'a') {
                    return Err(r.error("expected APPEND after a single item"));
                }
            }
            _ => return Ok(()),
        }
        r.tick();
    }
}

/// The memo entries (MEMOIZE, PUT) that follow a value; the id of the last.
#[inline]
fn memo_entries(r: &mut Diverted<'_, '_, '_>, v: Value) -> Result<Option<u64>> {
    let mut id = None;
    loop {
        match r.peek() {
            Some(0x94) => {
                r.eat(0x94);
                id = Some(r.memoize(v));
            }
            Some(b'q' | b'r' | b'p') => {
                let Op::Put(i) = r.next_op()? else {
                    return Err(r.error("expected PUT"));
                };
                r.put(i, v);
                id = Some(i);
            }
            _ => return Ok(id),
        }
    }
}

/// A value of an event: a number as decoded, or a document value (strings, memo references,
/// and whatever the machine read).
#[derive(Clone, Copy)]
enum Scalar {
    Int(i64),
    Float(f64),
    Value(Value),
}

impl Scalar {
    fn int(self, doc: &Document) -> Option<i64> {
        match self {
            Scalar::Int(i) => Some(i),
            Scalar::Float(_) => None,
            Scalar::Value(v) => doc.as_int(v),
        }
    }

    fn float(self, doc: &Document) -> Option<f64> {
        match self {
            Scalar::Float(f) => Some(f),
            Scalar::Int(_) => None,
            Scalar::Value(v) => doc.as_f64(v),
        }
    }

    fn value(self) -> Option<Value> {
        match self {
            Scalar::Value(v) => Some(v),
            _ => None,
        }
    }
}

/// A value the reader reads itself (numbers, strings, None/bools, memo references), or the
/// machine's reading of anything else.
#[inline]
fn scalar(r: &mut Diverted<'_, '_, '_>) -> Result<Scalar> {
    match r.int_or_ref()? {
        Some(IntOrRef::Int(i)) => return Ok(Scalar::Int(i)),
        Some(IntOrRef::Ref(v)) => return Ok(Scalar::Value(v)),
        None => {}
    }
    match r.peek() {
        Some(b'K' | b'M' | b'J' | 0x8a | b'G' | b'N' | 0x88 | 0x89 | b'h' | b'j' | 0x8c | b'X') => {
        }
        _ => return Ok(Scalar::Value(r.generic_value()?)),
    }
    let v = match r.next_op()? {
        Op::Int(i) => return Ok(Scalar::Int(i)),
        Op::Long(le) if le.len() <= 8 => {
            return Ok(Scalar::Int(crate::pickle::int_from_short_le(le)))
        }
        Op::Long(le) => {
            let v = r.int_from_le(le);
            memo_entries(r, v)?;
            return Ok(Scalar::Value(v));
        }
        Op::Float(f) => return Ok(Scalar::Float(f)),
        Op::None => return Ok(Scalar::Value(Value::NONE)),
        Op::Bool(b) => return Ok(Scalar::Value(if b { Value::TRUE } else { Value::FALSE })),
        Op::Get(id) => return Ok(Scalar::Value(r.get(id)?)),
        Op::Unicode(raw) => r.push_str(raw),
        _ => return Err(r.error("unexpected opcode in a trace event")),
    };
    memo_entries(r, v)?;
    Ok(Scalar::Value(v))
}

impl TraceReader<'_> {
    /// One event dict: `}` memo `(` key value … `u`.
    fn event(&mut self, r: &mut Diverted<'_, '_, '_>, device: usize) -> Result<()> {
        if !matches!(r.next_op()?, Op::EmptyDict) {
            return Err(r.error("device_traces: expected an event dict"));
        }
        memo_entries(r, Value::taken(EVENT_HANDLE))?;
        if !r.eat(b'(') {
            return Err(r.error("an event dict not written in one batch"));
        }
        let mut e = TraceEvent::default();
        let mut aux = EventAux::default();
        let mut stream = 0;
        let mut have_action = false;
        let mut pos = 0;
        while !r.eat(b'u') {
            let k = scalar(r)?;
            if k.value().is_some_and(|k| k.is_taken()) {
                return Err(r.error("a frame list or event as a key"));
            }
            let field = match k.value() {
                Some(k) => self.keys.field(r.doc(), pos, k),
                None => F_UNKNOWN,
            };
            pos += 1;
            if field == F_FRAMES {
                e.stack = self.frames(r)?;
                continue;
            }
            let v = scalar(r)?;
            let doc = r.doc();
            let fail = |r: &Diverted<'_, '_, '_>| Err(r.error("an event value read differently"));
            if v.value().is_some_and(|v| v.is_taken()) {
                return fail(r); // a frame list or event where a plain value belongs
            }
            match field {
                F_ACTION => {
                    let Some(v) = v.value() else {
                        return fail(r);
                    };
                    match self.actions.iter().find(|(h, _)| *h == v) {
                        Some(&(_, a)) => {
                            aux.action_name = None;
                            e.action = a;
                        }
                        None => {
                            let Some(name) = doc.as_str(v) else {
                                return fail(r);
                            };
                            set_action(name, &mut e, &mut aux);
                            if e.action != Action::Other && self.actions.len() < 32 {
                                self.actions.push((v, e.action));
                            }
                        }
                    }
                    have_action = true;
                }
                F_ADDR | F_SIZE | F_DEVICE_FREE => {
                    let n = match v {
                        Scalar::Int(i) if i >= 0 => i as u64,
                        _ => match v.value().map(|v| doc.view(v)) {
                            Some(View::Int(i)) if i >= 0 => i as u64,
                            Some(View::Bool(b)) => b as u64,
                            _ => return fail(r),
                        },
                    };
                    match field {
                        F_ADDR => e.addr = n,
                        F_SIZE => e.size = n,
                        _ => aux.device_free = Some(n),
                    }
                }
                F_STREAM => stream = v.int(doc).unwrap_or(0),
                F_TIME => {
                    e.time_us = v
                        .int(doc)
                        .or_else(|| v.float(doc).map(|f| f as i64))
                        .unwrap_or(NO_TIME)
                }
                F_USER_METADATA | F_COMPILE_CONTEXT => {
                    if let Some(s) = v.value().and_then(|v| doc.as_str(v)) {
                        set_text_field(field, s, &mut aux);
                    }
                }
                _ => {}
            }
        }
        if !have_action {
            return Err(r.error("a trace event without 'action'"));
        }
        self.out.lengths[device] += 1;
        if self.parts == Parts::SegmentsOnly {
            return Ok(());
        }
        self.out.any_time |= e.time_us != NO_TIME;
        let trace = &mut self.out.traces[device];
        if let Some(sink) = self.sink.as_deref_mut() {
            // the streams are still counted: past MAX_STREAMS the reading fails, as without
            e.stream_index = trace
                .stream_index(stream)
                .map_err(|m| r.error(m.to_string()))?;
            let aux = aux.says_something().then_some(&aux);
            sink.event(device as u32, &e, stream, aux);
            return Ok(());
        }
        trace
            .push(e, stream, aux)
            .map_err(|m| r.error(m.to_string()))?;
        Ok(())
    }

    /// An event's `frames`: a fresh list of frames (memo references to frame dicts, or new
    /// frame dicts), or a memo reference to a list seen before.
    fn frames(&mut self, r: &mut Diverted<'_, '_, '_>) -> Result<StackId> {
        let keep = self.parts == Parts::All;
        match r.peek() {
            Some(b'h' | b'j') => {
                let Op::Get(id) = r.next_op()? else {
                    return Err(r.error("expected GET"));
                };
                let v = r.get(id)?;
                if let Some(h) = r.doc().as_taken(v) {
                    return match h {
                        NO_STACK_HANDLE => Ok(StackId::MISSING),
                        EVENT_HANDLE.. => Err(r.error("an event where frames belong")),
                        local => Ok(StackId(local as u32)),
                    };
                }
                // a list the document holds (a block's frames, shared with its event)
                let Some(items) = r.doc().as_seq(v) else {
                    return Err(r.error("frames: not a list"));
                };
                if !keep {
                    return Ok(StackId::MISSING);
                }
                self.scratch.clear();
                self.scratch.extend_from_slice(items);
                Ok(self.intern())
            }
            Some(b'N') => {
                // None reads as an empty stack
                r.next_op()?;
                self.scratch.clear();
                Ok(if keep {
                    self.intern()
                } else {
                    StackId::MISSING
                })
            }
            Some(b']') => {
                r.next_op()?;
                let memo = memo_entries(r, Value::taken(NO_STACK_HANDLE))?;
                self.scratch.clear();
                loop {
                    match r.peek() {
                        Some(b'(') => {
                            r.eat(b'(');
                            loop {
                                // the common case, a run of references to shared frames
                                r.memo_refs(keep.then_some(&mut self.scratch))?;
                                match r.peek() {
                                    Some(b'e') => break,
                                    _ => self.frame(r, keep)?,
                                }
                            }
                            r.eat(b'e');
                        }
                        Some(b'h' | b'j' | b'}') => {
                            self.frame(r, keep)?;
                            if !r.eat(b'a') {
                                return Err(r.error("expected APPEND after a single frame"));
                            }
                        }
                        _ => break,
                    }
                }
                if !keep {
                    return Ok(StackId::MISSING);
                }
                let id = self.intern();
                if let Some(m) = memo {
                    r.put(m, Value::taken(id.0 as u64));
                }
                Ok(id)
            }
            _ => Err(r.error("frames: not a list")),
        }
    }

    /// One frame of a list: a memo reference or a frame dict (read by the machine: it is
    /// memoized and shared, and there are only as many as distinct frames).
    #[inline]
    fn frame(&mut self, r: &mut Diverted<'_, '_, '_>, keep: bool) -> Result<()> {
        let v = match r.peek() {
            Some(b'h' | b'j') => {
                let Op::Get(id) = r.next_op()? else {
                    return Err(r.error("expected GET"));
                };
                r.get(id)?
            }
            Some(b'}') => r.generic_value()?,
            _ => return Err(r.error("a frame that is not a dict")),
        };
        // (a frame the second core's reading left unread is a frame all the same)
        if v.is_taken() && (keep || r.doc().as_taken(v) != Some(UNREAD_HANDLE)) {
            return Err(r.error("a frame list where a frame belongs"));
        }
        if keep {
            self.scratch.push(v);
        }
        Ok(())
    }

    /// The local id of the stack in `scratch`, by content.
    fn intern(&mut self) -> StackId {
        if let Some(&id) = self.stack_ids.get(&self.scratch[..]) {
            return StackId(id);
        }
        let id = self.out.stacks.len() as u32;
        let frames: Box<[Value]> = self.scratch.as_slice().into();
        self.out.stacks.push(frames.clone());
        self.stack_ids.insert(frames, id);
        StackId(id)
    }
}
