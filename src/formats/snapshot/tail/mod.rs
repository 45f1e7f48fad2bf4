//! A part of a snapshot's trace read without the pickle machine: the back part of a round on a
//! second core while `TraceReader` reads the front part, and that front part too, on the main
//! thread (`TraceReader::read_own_share`), each then taken over by the main reading.
//!
//! Pickle opcodes do not say where a value starts, and a memo id counts everything memoized
//! before it, so a reader dropped in the middle of the file knows neither where it is nor
//! which ids its own memo entries get. This one starts where the bytes read as an event (`}`
//! MEMOIZE `(` and a reference to the key "action"), reads events to the end of their list,
//! and leaves what it cannot know yet to the main reading, which decides when it arrives:
//! - its memo entries are counted from 0 (`entries`): they take the ids after the main
//!   reading's;
//! - a reference that need only be stored (a frame) is checked as `max_ahead`, the largest
//!   `id - entries made before it`: every one was stored iff that is below the first id;
//! - frame lists and frames fetched by reference, and strings it was not told of, are kept
//!   with their ids (`checks`, `deferred`) to be checked and resolved then;
//! - an event's keys are expected to be those of the event before, as bytes (`key_plan`):
//!   one compare a key where they are, a lookup of the known strings where not;
//! - with stacks, each frame list is interned as the memo ids of its frames (`stacks`); the
//!   main reading interns them again as its own, in the order of the events. A frame written
//!   in place (a frame dict first seen in the back half) is a value this reader does not
//!   build: with stacks it gives up there.
//!
//! The main reading takes this reading over only if it arrives exactly at `start` between two
//! events of one list and every check holds (`TraceReader`); otherwise it reads on by itself.
//! Either way the snapshot is the one-thread reading's, event for event.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use rustc_hash::FxHashMap;

use crate::model::snapshot::{Action, DeviceTrace, EventAux, Parts, StackId, TraceEvent, NO_TIME};
use crate::pickle::ops::Cursor;
use crate::pickle::{int_from_le_prefix, int_from_short_le, Op, Pages};

mod entries;
mod known;

pub use entries::{Check, Deferred, Entry, Packed};
pub use known::Known;

use super::fields::{
    set_action, set_text_field, F_ACTION, F_ADDR, F_COMPILE_CONTEXT, F_DEVICE_FREE, F_FRAMES,
    F_SIZE, F_STREAM, F_TIME, F_USER_METADATA, UNKNOWN,
};
use known::{field_named, Val};

/// A key as the event before listed it: the bytes of its memo reference (little-endian,
/// `mask` keeps their `len`), the field its string names.
#[derive(Clone, Copy)]
struct PlannedKey {
    bytes: u64,
    mask: u64,
    len: u8,
    field: u8,
    /// `field_bit(field)`, found once for every event that lists the key here.
    bit: u32,
    /// The value the event before had after the key, where it is a number of a number's
    /// field or a reference of a string's: `bytes`/`mask`/`len` of the key followed by the
    /// value's opcode (and a LONG1's length), and how its payload reads.
    value: PlannedValue,
}

/// A key's value as the event before had it: each event of a capture gives each key a value
/// of one form (a LONG1 of 7 bytes for an address, a reference for an action), so that a key
/// and its value are one compare, and the value one load.
#[derive(Clone, Copy)]
struct PlannedValue {
    bytes: u64,
    mask: u64,
    /// Bytes of the key and the value's opcode: where the payload starts.
    len: u8,
    /// Bytes of the payload (1 to 8).
    payload: u8,
    /// A number whose payload is two's complement (`J`, LONG1), not unsigned (`K`, `M`).
    signed: bool,
}

impl PlannedValue {
    /// None planned: no bytes match.
    const NONE: PlannedValue = PlannedValue {
        bytes: u64::MAX,
        mask: 0,
        len: 0,
        payload: 0,
        signed: false,
    };

    /// The payload of the value, from the 8 bytes at its start.
    #[inline(always)]
    fn read(self, word: u64) -> i64 {
        let unused = 64 - 8 * self.payload as u32;
        if self.signed {
            ((word << unused) as i64) >> unused
        } else {
            ((word << unused) >> unused) as i64
        }
    }
}

/// The bit of `field` in an event's set of fields seen (none for a key that is no field).
fn field_bit(field: u8) -> u32 {
    if field == UNKNOWN {
        0
    } else {
        1 << field
    }
}

/// Keys of an event `predicted_key` expects at most (a real one has up to nine).
const KEY_PLAN_LEN: usize = 16;

/// Marks an event's `stack` as the frame list of a check (`FROM_CHECK | check index`).
pub const FROM_CHECK: u32 = 1 << 31;

/// Events a chunk: the tail's events are handed over chunk by chunk, each let go once
/// copied, so the trace is never held twice.
pub const CHUNK: usize = 1 << 18;

/// Chunks whose events were copied out, kept for the next rounds' readings: a fresh 8 MiB chunk
/// is faulted in page by page, every round again (on the 1M-event capture, the chunks took
/// a quarter of the process's page faults).
static SPARE_CHUNKS: Mutex<Vec<Vec<TraceEvent>>> = Mutex::new(Vec::new());

/// At most this many spare chunks kept (64 MiB): about what two rounds in flight fill.
const SPARE_CHUNKS_KEPT: usize = 8;

/// A chunk for events, a spare one where there is one.
fn new_chunk() -> Vec<TraceEvent> {
    let spare = SPARE_CHUNKS.lock().ok().and_then(|mut s| s.pop());
    // (written end to end: no huge pages, see `memory::advise_huge_pages`)
    spare.unwrap_or_else(|| Vec::with_capacity(CHUNK))
}

/// Hand a chunk whose events were copied out back for later rounds.
pub fn spare_chunk(mut chunk: Vec<TraceEvent>) {
    if chunk.capacity() != CHUNK {
        return;
    }
    chunk.clear();
    if let Ok(mut spare) = SPARE_CHUNKS.lock() {
        if spare.len() < SPARE_CHUNKS_KEPT {
            spare.push(chunk);
        }
    }
}

/// Let the spare chunks go: the reading is over.
pub fn release_spare_chunks() {
    if let Ok(mut spare) = SPARE_CHUNKS.lock() {
        *spare = Vec::new();
    }
}

/// The tail's reading.
#[derive(Default)]
pub struct Tail {
    pub start: usize,
    /// Where the main reading goes on (the byte after the last event read).
    pub end: usize,
    /// The events (none when only counted), in chunks; their `stream_index` is into
    /// `trace.streams`, their aux in `trace.aux`.
    pub events: Vec<Vec<TraceEvent>>,
    pub trace: DeviceTrace,
    pub count: usize,
    pub entries: Vec<Packed>,
    /// The strings the tail read.
    pub texts: Vec<Box<str>>,
    /// Readings with stacks: each distinct frame list the tail read, as the memo ids of its
    /// frames, in order of first appearance. An event's `stack` is an index here, or
    /// [`FROM_CHECK`] and the index of the check whose frame list it is.
    pub stacks: Vec<Box<[u32]>>,
    /// Largest `id - entries made before it` of the references that need only be stored.
    pub max_ahead: i64,
    pub checks: Vec<Check>,
    pub deferred: Vec<Deferred>,
}

/// The field of the key at `p`, its bit and length, if its bytes are those of the key at
/// `position` in the event before (`plan`): each event of a capture lists the same keys,
/// fetched by the same references, in the same order.
#[inline(always)]
fn predicted_key(
    plan: &[PlannedKey],
    b: &[u8],
    p: usize,
    position: usize,
) -> Option<(u8, u32, usize)> {
    let &PlannedKey {
        bytes,
        mask,
        len,
        field,
        bit,
        ..
    } = plan.get(position)?;
    let at: [u8; 8] = b.get(p..p + 8)?.try_into().ok()?;
    if u64::from_le_bytes(at) & mask != bytes {
        return None;
    }
    Some((field, bit, len as usize))
}

/// The scalar at `p` and its length, if in one of the forms an event's keys and numbers take
/// (memo references and short ints, decoded as the opcode decoder would, without its whole
/// table: each event has a dozen); None for any other form (`Reader::any_value`). Inlined,
/// over a position the caller keeps in a register: two calls an item cost a sixth of the
/// reading when the position went through memory.
#[inline(always)]
fn short_scalar(b: &[u8], p: usize, known: &Known) -> Option<(Val, usize)> {
    let b = b.get(p..)?;
    Some(match *b {
        [b'h', a, ..] => (known.val_of(a as u64), 2),
        [b'j', a0, a1, a2, a3, ..] => {
            (known.val_of(u32::from_le_bytes([a0, a1, a2, a3]) as u64), 5)
        }
        [b'K', a, ..] => (Val::Int(a as i64), 2),
        [b'M', a0, a1, ..] => (Val::Int(u16::from_le_bytes([a0, a1]) as i64), 3),
        [b'J', a0, a1, a2, a3, ..] => (Val::Int(i32::from_le_bytes([a0, a1, a2, a3]) as i64), 5),
        [0x8a, n, ref rest @ ..] if n <= 8 && rest.len() >= n as usize => (
            Val::Int(int_from_le_prefix(rest, n as usize)),
            2 + n as usize,
        ),
        _ => return None,
    })
}

/// What a second core reads: the events of `data` from `start` to the first event that starts
/// at or past `stop`, or to the end of their list; `parts` says what of them to keep
/// (`SegmentsOnly`: only count them; `All`: their stacks too), and `pages` gets back the pages
/// read.
pub struct Round<'d, 'm> {
    pub data: &'d [u8],
    pub start: usize,
    pub stop: usize,
    pub parts: Parts,
    pub pages: Pages<'m>,
}

/// Where a reading on another thread says how far it got and is told to stop.
#[derive(Clone, Copy)]
pub struct Progress<'s> {
    /// Set: stop early.
    pub cancel: &'s AtomicBool,
    /// Bytes read so far.
    pub done: &'s AtomicUsize,
}

/// Read `round`, the strings the main reading had stored being `known`; None if the bytes there
/// are not what this reader handles (the main reading then reads them itself).
pub fn read(round: Round<'_, '_>, known: &Known, progress: Progress<'_>) -> Option<Tail> {
    let Round {
        data,
        start,
        stop,
        parts,
        pages,
    } = round;
    let Progress { cancel, done } = progress;
    // a bug here must not take the reading down: the main reading reads on
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut r = Reader {
            b: data,
            p: start,
            known,
            events: parts != Parts::SegmentsOnly,
            stacks: parts == Parts::All,
            frame_ids: Vec::new(),
            stack_ids: FxHashMap::default(),
            list_pending: false,
            last_stream: None,
            key_plan: Vec::new(),
            out: Tail {
                start,
                max_ahead: i64::MIN,
                ..Tail::default()
            },
        };
        let mut released = start;
        loop {
            // between two events of a batch
            match r.peek() {
                Some(b'}') if r.p >= stop => break,
                Some(b'}') => r.event()?,
                Some(b'e') => {
                    let at = r.p;
                    r.p += 1;
                    if r.peek() != Some(b'(') {
                        r.p = at; // the list ends: the main reading reads the APPENDS
                        break;
                    }
                    r.p += 1;
                    if cancel.load(Ordering::Relaxed) {
                        return None;
                    }
                    done.store(r.p - start, Ordering::Relaxed);
                    if r.p - released >= 16 << 20 {
                        pages.release(released, r.p);
                        released = r.p;
                    }
                }
                _ => break,
            }
        }
        r.out.end = r.p;
        Some(r.out)
    }))
    .ok()
    .flatten()
}

struct Reader<'d, 'k> {
    b: &'d [u8],
    p: usize,
    known: &'k Known,
    events: bool,
    /// Read stacks: the memo ids of each frame list, interned (`Tail::stacks`).
    stacks: bool,
    frame_ids: Vec<u32>,
    stack_ids: FxHashMap<Box<[u32]>, u32>,
    /// A frame list's memo entry waits for its stack while its frames are read.
    list_pending: bool,
    /// The stream of the last event and its index (events come in runs on one stream, and
    /// the tail's trace holds no events to ask).
    last_stream: Option<(i64, u16)>,
    /// The keys of the last event read, as `predicted_key` expects them.
    key_plan: Vec<PlannedKey>,
    out: Tail,
}

impl Reader<'_, '_> {
    /// The next opcode's code, FRAME markers skipped; None at the end.
    #[inline(always)]
    fn peek(&mut self) -> Option<u8> {
        loop {
            match self.b.get(self.p) {
                Some(0x95) if self.p + 9 <= self.b.len() => self.p += 9,
                Some(0x95) => return None,
                c => return c.copied(),
            }
        }
    }

    #[inline(always)]
    fn eat(&mut self, code: u8) -> bool {
        if self.peek() == Some(code) {
            self.p += 1;
            true
        } else {
            false
        }
    }

    fn entry(&mut self, e: Entry) -> Option<()> {
        self.out.entries.push(Packed::new(e)?);
        Some(())
    }

    /// Memo entries made so far (a frame list's own counted while its frames are read).
    fn made(&self) -> u32 {
        self.out.entries.len() as u32 + self.list_pending as u32
    }

    /// A MEMOIZE after a value (at most one: the main reading handles anything else).
    #[inline]
    fn memo(&mut self, e: Entry) -> Option<()> {
        if self.b.get(self.p) == Some(&0x94) {
            self.p += 1;
            self.entry(e)?;
            if self.b.get(self.p) == Some(&0x94) {
                return None;
            }
        }
        Some(())
    }

    /// The id of a memo reference at `p`, consumed.
    #[inline(always)]
    fn reference(&mut self) -> Option<u64> {
        match self.b[self.p..] {
            [b'h', a, ..] => {
                self.p += 2;
                Some(a as u64)
            }
            [b'j', a, b, c, d, ..] => {
                self.p += 5;
                Some(u32::from_le_bytes([a, b, c, d]) as u64)
            }
            _ => None,
        }
    }

    /// A reference that need only be stored.
    #[inline(always)]
    fn stored(&mut self, id: u64) {
        self.out.max_ahead = self.out.max_ahead.max(id as i64 - self.made() as i64);
    }

    /// A scalar: a number, None, a bool, a string or a memo reference (decoded by the
    /// project's opcode decoder, as the main reading's `scalar` decodes them).
    #[inline(always)]
    fn value(&mut self) -> Option<Val> {
        match short_scalar(self.b, self.p, self.known) {
            Some((v, len)) => {
                self.p += len;
                Some(v)
            }
            None => self.any_value(),
        }
    }

    /// A scalar of any form (FRAME markers skipped first).
    #[inline(never)]
    fn any_value(&mut self) -> Option<Val> {
        self.peek()?;
        let mut ops = Cursor::new(self.b);
        ops.advance(self.p);
        let op = ops.next_op().ok()?;
        self.p = ops.position();
        Some(match op {
            Op::Int(i) => Val::Int(i),
            Op::Long(le) if le.len() <= 8 => Val::Int(int_from_short_le(le)),
            Op::Float(f) => Val::Float(f),
            Op::None => Val::None,
            Op::Bool(b) => Val::Bool(b),
            Op::Get(id) => self.known.val_of(id),
            Op::Unicode(raw) => return self.text(raw),
            _ => return None,
        })
    }

    /// A string just read (as the main reading makes text of it), with its memo entry.
    fn text(&mut self, raw: &[u8]) -> Option<Val> {
        let i = self.out.texts.len() as u32;
        self.out
            .texts
            .push(String::from_utf8_lossy(raw).into_owned().into_boxed_str());
        self.memo(Entry::Text(i))?;
        Some(Val::Own(i))
    }

    fn str_of(&self, v: Val) -> Option<&str> {
        match v {
            Val::Known(i, _) => Some(&self.known.texts[i as usize]),
            Val::Own(i) => Some(&self.out.texts[i as usize]),
            _ => None,
        }
    }

    /// One event dict: `}` MEMOIZE `(` key value … `u`. A function of its own: inlined into
    /// the round's loop, how well it ran went with unrelated changes elsewhere (by 8%).
    #[inline(never)]
    fn event(&mut self) -> Option<()> {
        self.p += 1;
        if self.b.get(self.p) != Some(&0x94) {
            return None;
        }
        self.memo(Entry::Event)?;
        if !self.eat(b'(') {
            return None;
        }
        let index = self.out.count as u32;
        let (mut e, mut aux, mut stream) = (TraceEvent::default(), EventAux::default(), 0i64);
        let mut seen = 0u32;
        let mut position = 0;
        // the position stays in a register while the keys and values are read (through
        // `self` it went to memory and back at every item): `self.p` is set around the calls
        // that read on from it
        let (b, known) = (self.b, self.known);
        let mut p = self.p;
        loop {
            // the key and its value as planned, with 16 bytes left (a key, an opcode and a
            // payload of any form): one compare and a load
            if let Some(&PlannedKey {
                field,
                bit,
                value: plan,
                ..
            }) = self.key_plan.get(position)
            {
                if let Some(w) = b.get(p..p + 16) {
                    let word = |at: usize| {
                        u64::from_le_bytes(w[at..at + 8].try_into().unwrap_or_default())
                    };
                    if word(0) & plan.mask == plan.bytes {
                        position += 1;
                        if seen & bit != 0 {
                            return None;
                        }
                        seen |= bit;
                        let payload = word(plan.len as usize & 7);
                        p += plan.len as usize + plan.payload as usize;
                        let n = plan.read(payload);
                        match field {
                            F_ADDR | F_SIZE if n < 0 => return None,
                            F_ADDR => e.addr = n as u64,
                            F_SIZE => e.size = n as u64,
                            F_STREAM => stream = n,
                            F_TIME => e.time_us = n,
                            // a string's field: a memo reference
                            _ => match known.index(n as u64) {
                                Some((i, _)) => {
                                    let i = i as usize;
                                    if field != F_ACTION {
                                        set_text_field(field, &known.texts[i], &mut aux);
                                    } else if known.actions[i] != Action::Other {
                                        e.action = known.actions[i];
                                        aux.action_name = None;
                                    } else {
                                        set_action(&known.texts[i], &mut e, &mut aux);
                                    }
                                }
                                None => {
                                    let entries = self.made();
                                    self.out.deferred.push(Deferred {
                                        event: index,
                                        field,
                                        id: n as u64,
                                        entries,
                                    });
                                }
                            },
                        }
                        continue;
                    }
                }
            }
            // (a planned key is a reference: never the end of the dict)
            let (field, bit) = match predicted_key(&self.key_plan, b, p, position) {
                Some((field, bit, len)) => {
                    p += len;
                    (field, bit)
                }
                None => {
                    self.p = p;
                    if self.eat(b'u') {
                        p = self.p;
                        break;
                    }
                    let field = self.key(position)?;
                    p = self.p;
                    (field, field_bit(field))
                }
            };
            position += 1;
            if seen & bit != 0 {
                return None; // a key twice: the main reading keeps the order of effects
            }
            seen |= bit;
            if field == F_FRAMES {
                self.p = p;
                e.stack = self.frames()?;
                p = self.p;
                continue;
            }
            let value_at = p;
            let v = match short_scalar(b, p, known) {
                Some((v, len)) => {
                    p += len;
                    v
                }
                None => {
                    self.p = p;
                    let v = self.any_value()?;
                    p = self.p;
                    v
                }
            };
            self.plan_value(position - 1, field, value_at);
            if let Val::Ref(id) = v {
                // a string fetched from the memo: resolved when the first id is known
                if !matches!(field, F_ACTION | F_USER_METADATA | F_COMPILE_CONTEXT) {
                    return None;
                }
                let entries = self.made();
                self.out.deferred.push(Deferred {
                    event: index,
                    field,
                    id,
                    entries,
                });
                continue;
            }
            match field {
                F_ACTION => match v {
                    Val::Known(i, _) if known.actions[i as usize] != Action::Other => {
                        e.action = known.actions[i as usize];
                        aux.action_name = None;
                    }
                    _ => set_action(self.str_of(v)?, &mut e, &mut aux),
                },
                F_ADDR | F_SIZE | F_DEVICE_FREE => {
                    let n = match v {
                        Val::Int(i) if i >= 0 => i as u64,
                        Val::Bool(b) => b as u64,
                        _ => return None,
                    };
                    match field {
                        F_ADDR => e.addr = n,
                        F_SIZE => e.size = n,
                        _ => aux.device_free = Some(n),
                    }
                }
                F_STREAM => {
                    stream = match v {
                        Val::Int(i) => i,
                        Val::Bool(b) => b as i64,
                        _ => 0,
                    }
                }
                F_TIME => {
                    e.time_us = match v {
                        Val::Int(i) => i,
                        Val::Bool(b) => b as i64,
                        Val::Float(f) => f as i64,
                        _ => NO_TIME,
                    }
                }
                F_USER_METADATA | F_COMPILE_CONTEXT => {
                    if let Some(s) = self.str_of(v) {
                        set_text_field(field, s, &mut aux);
                    }
                }
                _ => {}
            }
        }
        self.p = p;
        if seen >> F_ACTION & 1 == 0 {
            return None;
        }
        self.out.count += 1;
        if self.events {
            e.stream_index = match self.last_stream {
                Some((s, i)) if s == stream => i,
                _ => {
                    let i = self.out.trace.stream_index(stream).ok()?;
                    self.last_stream = Some((stream, i));
                    i
                }
            };
            if aux.says_something() {
                self.out.trace.aux.push((index, aux));
            }
            match self.out.events.last_mut() {
                Some(chunk) if chunk.len() < CHUNK => chunk.push(e),
                _ => {
                    let mut chunk = new_chunk();
                    chunk.push(e);
                    self.out.events.push(chunk);
                }
            }
        }
        Some(())
    }

    /// Plan the value at `at`, just read after the key at `position` of an event (of
    /// `field`), with that key, if the plan holds it there and the value is of a form the
    /// field takes: a number of an address, size, stream or time, a memo reference of an
    /// action or a metadata string. Else the key is planned alone.
    fn plan_value(&mut self, position: usize, field: u8, at: usize) {
        let b = self.b;
        let Some(k) = self.key_plan.get_mut(position) else {
            return;
        };
        k.value = PlannedValue::NONE;
        let key_at = at.wrapping_sub(k.len as usize);
        let Some(key) = b.get(key_at..key_at + 8) else {
            return;
        };
        let word = u64::from_le_bytes(key.try_into().unwrap_or_default());
        if k.field != field || word & k.mask != k.bytes {
            return;
        }
        let number = matches!(field, F_ADDR | F_SIZE | F_STREAM | F_TIME);
        let string = matches!(field, F_ACTION | F_USER_METADATA | F_COMPILE_CONTEXT);
        let (opcode, payload, signed) = match b[at..] {
            [b'K', ..] if number => (1, 1, false),
            [b'M', ..] if number => (1, 2, false),
            [b'J', ..] if number => (1, 4, true),
            [0x8a, n @ 1..=8, ..] if number => (2, n, true),
            [b'h', ..] if string => (1, 1, false),
            [b'j', ..] if string => (1, 4, false),
            _ => return,
        };
        let len = k.len as usize + opcode;
        let mask = u64::MAX >> (64 - 8 * len as u32);
        k.value = PlannedValue {
            bytes: word & mask,
            mask,
            len: len as u8,
            payload,
            signed,
        };
    }

    /// The field of the key at `position` of an event, read; a reference to a known string
    /// is noted as the key expected there next time (`predicted_key`).
    fn key(&mut self, position: usize) -> Option<u8> {
        let at = self.p;
        let field = match self.value()? {
            Val::Known(_, field) => field,
            Val::Own(i) => return Some(field_named(&self.out.texts[i as usize])),
            Val::Ref(_) => return None, // a key the main reading resolves
            _ => return Some(UNKNOWN),
        };
        let len = self.p - at;
        if matches!((self.b[at], len), (b'h', 2) | (b'j', 5)) && position < KEY_PLAN_LEN {
            let mut bytes = [0u8; 8];
            bytes[..len].copy_from_slice(&self.b[at..self.p]);
            let planned = PlannedKey {
                bytes: u64::from_le_bytes(bytes),
                mask: u64::MAX >> (64 - 8 * len as u32),
                len: len as u8,
                field,
                bit: field_bit(field),
                value: PlannedValue::NONE,
            };
            let plan = &mut self.key_plan;
            if position < plan.len() {
                plan[position] = planned;
            } else if position == plan.len() {
                plan.push(planned);
            }
        }
        Some(field)
    }

    /// An event's `frames`: a reference to a list, None, or a fresh list of frames; its stack
    /// (`MISSING` without stacks).
    fn frames(&mut self) -> Option<StackId> {
        self.frame_ids.clear();
        match self.peek()? {
            b'h' | b'j' => {
                let id = self.reference()?;
                let check = Check::new(id as u32, self.made(), true)?;
                self.out.checks.push(check);
                if !self.stacks {
                    return Some(StackId::MISSING);
                }
                let at = self.out.checks.len() as u32 - 1;
                return (at < FROM_CHECK - 1).then_some(StackId(FROM_CHECK | at));
            }
            b'N' => self.p += 1, // read as an empty stack
            b']' => {
                self.p += 1;
                // its memo entry waits for its stack
                let memoized = self.b.get(self.p) == Some(&0x94);
                if memoized {
                    self.p += 1;
                    if self.b.get(self.p) == Some(&0x94) {
                        return None;
                    }
                }
                let made = self.made() as usize;
                self.list_pending = memoized;
                loop {
                    match self.peek() {
                        Some(b'(') => {
                            self.p += 1;
                            loop {
                                self.frame_refs(self.made());
                                match self.peek()? {
                                    b'e' => break,
                                    b'}' if !self.stacks => self.frame_dict()?,
                                    _ => return None, // a frame written here: the main reading
                                }
                            }
                            self.p += 1;
                        }
                        Some(b'h' | b'j') => {
                            let id = self.reference()?;
                            let check = Check::new(id as u32, self.made(), false)?;
                            self.out.checks.push(check);
                            if self.stacks {
                                self.frame_ids.push(id as u32);
                            }
                            if !self.eat(b'a') {
                                return None;
                            }
                        }
                        Some(b'}') if !self.stacks => {
                            self.frame_dict()?;
                            if !self.eat(b'a') {
                                return None;
                            }
                        }
                        _ => break,
                    }
                }
                self.list_pending = false;
                let stack = self.intern();
                if memoized {
                    // the list's id comes before its frames': store it in its place
                    let list = Packed::new(Entry::FrameList(stack.map_or(0, |s| s.0)))?;
                    if made == self.out.entries.len() {
                        self.out.entries.push(list); // (its frames all fetched by reference)
                    } else {
                        self.out.entries.insert(made, list);
                    }
                }
                return Some(stack.unwrap_or(StackId::MISSING));
            }
            _ => return None,
        }
        Some(self.intern().unwrap_or(StackId::MISSING))
    }

    /// The tail's stack of `frame_ids` (None without stacks).
    fn intern(&mut self) -> Option<StackId> {
        if !self.stacks {
            return None;
        }
        if let Some(&k) = self.stack_ids.get(&self.frame_ids[..]) {
            return Some(StackId(k));
        }
        let k = self.out.stacks.len() as u32;
        let ids: Box<[u32]> = self.frame_ids.as_slice().into();
        self.out.stacks.push(ids.clone());
        self.stack_ids.insert(ids, k);
        Some(StackId(k))
    }

    /// A run of references to frames (the bulk of the file); `made`: the entries made
    /// before them.
    #[inline]
    fn frame_refs(&mut self, made: u32) {
        // the position and the largest id stay in registers (through `self` they went to
        // memory and back at every reference); four 4-byte references are taken at once
        let b = self.b;
        let mut p = self.p;
        let mut largest = 0u32;
        let mut any = false;
        loop {
            if let Some(
                &[b'j', a0, a1, a2, a3, b'j', b0, b1, b2, b3, b'j', c0, c1, c2, c3, b'j', d0, d1, d2, d3],
            ) = b.get(p..p + 20)
            {
                let ids = [
                    u32::from_le_bytes([a0, a1, a2, a3]),
                    u32::from_le_bytes([b0, b1, b2, b3]),
                    u32::from_le_bytes([c0, c1, c2, c3]),
                    u32::from_le_bytes([d0, d1, d2, d3]),
                ];
                largest = largest.max(ids[0].max(ids[1]).max(ids[2].max(ids[3])));
                any = true;
                if self.stacks {
                    self.frame_ids.extend_from_slice(&ids);
                }
                p += 20;
                continue;
            }
            let (id, len) = match b[p..] {
                [b'j', a, b, c, d, ..] => (u32::from_le_bytes([a, b, c, d]), 5),
                [b'h', a, ..] => (a as u32, 2),
                [0x95, ..] => {
                    self.p = p;
                    if self.peek().is_none() {
                        break;
                    }
                    p = self.p;
                    continue;
                }
                _ => break,
            };
            largest = largest.max(id);
            any = true;
            if self.stacks {
                self.frame_ids.push(id);
            }
            p += len;
        }
        self.p = p;
        if any {
            self.out.max_ahead = self.out.max_ahead.max(largest as i64 - made as i64);
        }
    }

    /// A frame written in place: a flat dict of strings, numbers and references.
    fn frame_dict(&mut self) -> Option<()> {
        self.p += 1;
        self.memo(Entry::Unread)?;
        if !self.eat(b'(') {
            return Some(()); // an empty dict
        }
        let mut items = 0;
        while !self.eat(b'u') {
            if let Val::Ref(id) = self.value()? {
                self.stored(id);
            }
            items += 1;
        }
        (items % 2 == 0).then_some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A planned number's payload reads as the opcode decoder reads the whole opcode (`K` and
    /// `M` unsigned, `J` and LONG1 two's complement), whatever bytes follow it.
    #[test]
    fn planned_numbers_read_as_the_opcode_decoder_reads_them() {
        let cases: [(&[u8], u8, bool); 6] = [
            (b"K\xff", 1, false),
            (b"M\xff\xff", 2, false),
            (b"J\xfe\xff\xff\xff", 4, true),
            (b"\x8a\x07\x00\x3a\xdc\x87\x1e\x82\x00", 7, true),
            (b"\x8a\x02\x00\x80", 2, true),
            (b"\x8a\x08\xff\xff\xff\xff\xff\xff\xff\x7f", 8, true),
        ];
        for (pickled, payload, signed) in cases {
            let opcode = if pickled[0] == 0x8a { 2 } else { 1 };
            let mut word = pickled[opcode..].to_vec();
            word.resize(8, 0xab);
            let plan = PlannedValue {
                payload,
                signed,
                ..PlannedValue::NONE
            };
            let want = match Cursor::new(pickled).next_op() {
                Ok(Op::Int(i)) => i,
                Ok(Op::Long(le)) => int_from_short_le(le),
                _ => panic!("{pickled:?} is no int"),
            };
            let got = plan.read(u64::from_le_bytes(word.try_into().unwrap()));
            assert_eq!(got, want, "{pickled:?}");
        }
    }
}
