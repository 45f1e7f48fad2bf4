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

use rustc_hash::FxHashMap;

use crate::model::snapshot::{
    Action, DeviceTrace, EventAux, Parts, Snapshot, StackId, TraceEvent, NO_TIME,
};
use crate::pickle::{Divert, Diverted, Document, IntOrRef, Op, PickleError, Progress, Value, View};

type Result<T> = std::result::Result<T, PickleError>;

use super::snapshot::{KeyCache, EVENT_FIELDS, UNKNOWN as F_UNKNOWN};

/// Memo handle of an event dict (a GET of one elsewhere sends the file to the generic path).
const EVENT_HANDLE: u64 = 1 << 40;
/// Memo handle of a frame list whose stack was not kept (reads without stacks).
const NO_STACK_HANDLE: u64 = EVENT_HANDLE + 1;

// positions in EVENT_FIELDS
const F_ACTION: u8 = 0;
const F_ADDR: u8 = 1;
const F_SIZE: u8 = 2;
const F_STREAM: u8 = 3;
const F_TIME: u8 = 4;
const F_FRAMES: u8 = 5;
const F_DEVICE_FREE: u8 = 6;
const F_USER_METADATA: u8 = 7;
const F_COMPILE_CONTEXT: u8 = 8;

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
}

/// The outcome of a reading with `TraceReader`.
pub enum Streamed {
    /// A snapshot whose traces were streamed, and the reading stands.
    Snapshot(Snapshot),
    /// A file the reader had nothing to do with (no top-level `device_traces`): its document.
    Other(Document),
    /// The reading cannot vouch for the file: read it the generic way.
    ReadAgain,
}

/// Decode `data` with its `device_traces` streamed (`parts` of it).
pub fn read(data: &[u8], progress: &mut dyn Progress, parts: Parts) -> Streamed {
    let mut traces = TraceReader::new(parts, data.len());
    let parsed = crate::pickle::parse_with_divert(data, progress, &mut traces);
    traces.finish(parsed)
}

/// The `pickle::Divert` for a snapshot's top-level `device_traces`.
pub struct TraceReader {
    parts: Parts,
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

impl TraceReader {
    /// A reader for `parts` of a file of `file_len` bytes.
    pub fn new(parts: Parts, file_len: usize) -> TraceReader {
        TraceReader {
            parts,
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

impl TraceReader {
    /// What the parse that used this reader amounts to.
    /// What the parse that used this reader amounts to. With `MEMTRACK_DEBUG_STREAM` set, why
    /// a reading is dropped goes to stderr (for developers: the file is read again anyway).
    pub fn finish(self, parsed: Result<Document>) -> Streamed {
        let dropped = |why: &dyn std::fmt::Display| {
            if std::env::var_os("MEMTRACK_DEBUG_STREAM").is_some() {
                eprintln!("memtrack: streamed reading dropped: {why}");
            }
            Streamed::ReadAgain
        };
        let doc = match parsed {
            Ok(doc) => doc,
            Err(e) => return dropped(&e),
        };
        if !self.read {
            return Streamed::Other(doc);
        }
        if self.keys_seen != 1 {
            return dropped(&"device_traces more than once");
        }
        if doc.taken_reused() {
            return dropped(&"an event or frame list referenced outside device_traces, or from further back than the memo keeps its handles");
        }
        if !super::snapshot::is_snapshot(&doc, doc.root()) {
            return dropped(&"not a snapshot");
        }
        match super::snapshot::from_document_streamed(&doc, self.parts, self.out) {
            Ok(s) => Streamed::Snapshot(s),
            Err(e) => dropped(&e),
        }
    }
}

impl Divert for TraceReader {
    fn wants(&mut self, key: &str, _prior: &[&str]) -> bool {
        if key != "device_traces" {
            return false;
        }
        self.keys_seen += 1;
        self.keys_seen == 1
    }

    fn read(&mut self, r: &mut Diverted<'_, '_, '_>) -> Result<Value> {
        self.read = true;
        let mut devices = 0usize;
        list(r, b']', &mut |r| {
            if r.peek() != Some(b']') {
                return Err(r.error("device_traces: expected a list per device"));
            }
            let mut t = DeviceTrace::default();
            if devices == 0 {
                let _ = t.events.try_reserve(self.room); // only an optimization
            }
            self.out.traces.push(t);
            self.out.lengths.push(0);
            list(r, b'}', &mut |r| self.event(r, devices))?;
            devices += 1;
            Ok(())
        })?;
        Ok(Value::NONE)
    }
}

/// A list: EMPTY_LIST, its memo entry, then its items in MARK … APPENDS batches or one by one
/// with APPEND; `item` reads one item, which starts with opcode `item_code`. The list itself
/// is memoized as an inert handle.
fn list(
    r: &mut Diverted<'_, '_, '_>,
    item_code: u8,
    item: &mut dyn FnMut(&mut Diverted<'_, '_, '_>) -> Result<()>,
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
                while r.peek() != Some(b'e') {
                    item(r)?;
                }
                r.eat(b'e');
            }
            Some(c) if c == item_code => {
                item(r)?;
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

impl TraceReader {
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
                    let a = match self.actions.iter().find(|(h, _)| *h == v) {
                        Some(&(_, a)) => a,
                        None => {
                            let Some(name) = doc.as_str(v) else {
                                return fail(r);
                            };
                            let a = Action::from_name(name);
                            if a == Action::Other {
                                aux.action_name = Some(name.to_string());
                            } else if self.actions.len() < 32 {
                                self.actions.push((v, a));
                            }
                            a
                        }
                    };
                    if a != Action::Other {
                        aux.action_name = None;
                    }
                    e.action = a;
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
                F_USER_METADATA => {
                    if let Some(s) = v
                        .value()
                        .and_then(|v| doc.as_str(v))
                        .filter(|s| !s.is_empty())
                    {
                        aux.user_metadata = Some(s.to_string());
                    }
                }
                F_COMPILE_CONTEXT => {
                    if let Some(s) = (v.value().and_then(|v| doc.as_str(v)))
                        .filter(|s| !s.is_empty() && *s != "N/A")
                    {
                        aux.compile_context = Some(s.to_string());
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
        self.out.traces[device]
            .push(e, stream, aux)
            .map_err(|m| r.error(m))?;
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
        if v.is_taken() {
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
