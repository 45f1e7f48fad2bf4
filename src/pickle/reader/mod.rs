//! The pickle virtual machine, protocols 0–5, without ever calling anything.
//!
//! Globals become inert `Global` values; `REDUCE`/`NEWOBJ`/`INST`/`OBJ` become inert `Object`s
//! that keep their callable and arguments. The only constructions it understands are the ones
//! whose meaning is plain data: `collections.defaultdict` and `OrderedDict` (read as dicts),
//! `builtins.set`/`frozenset`, `bytearray` and `_codecs.encode` (how protocol 2 writes bytes).

use std::collections::HashMap;

mod build;

use super::error::PickleError;
use super::flat_dict::{FlatBatch, FlatValue, MAX_PAIRS};
use super::literals::{decode_python_string_literal, decode_raw_unicode_escape};
pub use super::memo::RECENT_HANDLES;
use super::memo::{HandleWindow, Lookup, EVICTED_HANDLE};
use super::ops::{Cursor, Op};
use super::value::{int_from_le_prefix, ContainerKind, Document, ObjectKind, Value};

/// The memo is indexed by the ids a file declares; ids far beyond what was stored go to a map
/// so that one `LONG_BINPUT 0xFFFFFFFF` cannot allocate gigabytes.
const MEMO_DENSE_SLACK: u64 = 1 << 16;
/// Python refuses to parse longer decimal ints (sys.int_info.str_digits_check_threshold).
pub(super) const MAX_DECIMAL_DIGITS: usize = 4300;

pub(super) type Result<T> = std::result::Result<T, PickleError>;

/// Called as parsing moves forward with the number of bytes consumed, so a memory-mapped
/// caller can drop pages it will not read again (and draw progress).
pub trait Progress {
    fn advanced(&mut self, consumed: usize);
    /// Bytes a second reader has read further on in the file (for display only: the pages
    /// behind `advanced` are the ones the caller may drop).
    fn read_elsewhere(&mut self, _bytes: usize) {}
}

impl Progress for () {
    fn advanced(&mut self, _consumed: usize) {}
}

/// Reads one value of the stream in place of the machine: a format's own reader for the long
/// part of a file whose layout it knows (a snapshot's `device_traces`), which keeps only what
/// it needs instead of building it as a document. It reads opcodes through [`Diverted`], which
/// shares the machine's memo and document, and can hand any value it does not handle itself
/// back to the machine ([`Diverted::generic_value`]). What it stores in the memo for the
/// values it kept to itself are [`View::Taken`] handles: a later GET of one outside its own
/// reading marks the document (`Document::taken_reused`), so its caller can fall back to a
/// plain reading.
pub trait Divert {
    /// Asked when the top-level dict gets a string key: read its value? `prior` are the keys
    /// before it, in order.
    fn wants(&mut self, key: &str, prior: &[&str]) -> bool;
    /// Read the value (from the first opcode after the key and its memo entry); its
    /// placeholder in the document.
    fn read(&mut self, r: &mut Diverted<'_, '_, '_>) -> Result<Value>;
}

/// What [`Diverted::int_or_ref`] decoded.
#[derive(Clone, Copy, Debug)]
pub enum IntOrRef {
    Int(i64),
    Ref(Value),
}

/// The machine as a [`Divert`] reader sees it.
pub struct Diverted<'m, 'a, 's> {
    m: &'m mut Machine<'a, 's>,
    progress: &'m mut dyn Progress,
    next_report: usize,
}

impl<'a> Diverted<'_, 'a, '_> {
    /// The next opcode, FRAME markers skipped (they may fall anywhere).
    #[inline]
    pub fn next_op(&mut self) -> Result<Op<'a>> {
        loop {
            match self.m.cursor.next_op()? {
                Op::Frame => continue,
                op => return Ok(op),
            }
        }
    }

    /// The whole input (a reader may hand part of it to another thread).
    pub fn data(&self) -> &'a [u8] {
        self.m.cursor.whole()
    }

    /// Bytes consumed so far.
    #[inline(always)]
    pub fn position(&self) -> usize {
        self.m.cursor.position()
    }

    /// Go on reading at `pos`, ahead of the current position: what lies between was read by
    /// someone else, who stored its memo entries.
    pub fn skip_to(&mut self, pos: usize) {
        let here = self.m.cursor.position();
        debug_assert!(pos >= here);
        self.m.cursor.advance(pos.saturating_sub(here));
        self.progress.advanced(self.m.cursor.position());
        self.next_report = self.m.cursor.position() + PROGRESS_STEP;
    }

    /// The id the next MEMOIZE stores, when every id below it is stored and none above
    /// (the memo Python's own pickler writes); None for a memo with holes.
    pub fn memo_dense_len(&self) -> Option<u64> {
        if self.m.memo_holes || !self.m.memo_sparse.is_empty() {
            return None;
        }
        Some(match &self.m.window {
            Some(w) => w.next,
            None => self.m.memo.len() as u64,
        })
    }

    /// Memo entry `id` if stored and still held, without marking anything (a look, not a GET).
    pub fn memo_peek(&self, id: u64) -> Option<Value> {
        if let Some(&v) = self.m.memo.get(id as usize) {
            if v != UNSET {
                return Some(v);
            }
        }
        match &self.m.window {
            Some(w) if id >= w.base => w.peek(id),
            _ => self.m.memo_sparse.get(&id).copied(),
        }
    }

    /// Report the bytes a second reader has read (see [`Progress::read_elsewhere`]).
    pub fn read_elsewhere(&mut self, bytes: usize) {
        self.progress.read_elsewhere(bytes);
    }

    /// The code of the next opcode without consuming it (FRAME markers consumed first).
    #[inline(always)]
    pub fn peek(&mut self) -> Option<u8> {
        match self.m.cursor.rest().first() {
            Some(&0x95) => self.peek_after_frames(),
            b => b.copied(),
        }
    }

    #[cold]
    fn peek_after_frames(&mut self) -> Option<u8> {
        while self.m.cursor.rest().first() == Some(&0x95) {
            if self.m.cursor.next_op().is_err() {
                return Some(0x95);
            }
        }
        self.m.cursor.rest().first().copied()
    }

    /// The next opcode when it is a small int or a memo reference, decoded straight from the
    /// bytes (the bulk of a trace event); None, consuming nothing, for any other.
    #[inline(always)]
    pub fn int_or_ref(&mut self) -> Result<Option<IntOrRef>> {
        let b = self.m.cursor.rest();
        let (x, len) = match b {
            [b'K', a, ..] => (IntOrRef::Int(*a as i64), 2),
            [b'M', a, b, ..] => (IntOrRef::Int(u16::from_le_bytes([*a, *b]) as i64), 3),
            [b'J', a, b, c, d, ..] => (
                IntOrRef::Int(i32::from_le_bytes([*a, *b, *c, *d]) as i64),
                5,
            ),
            [0x8a, k, rest @ ..] if *k <= 8 && rest.len() >= *k as usize => (
                IntOrRef::Int(int_from_le_prefix(rest, *k as usize)),
                2 + *k as usize,
            ),
            [b'h', a, ..] => match self.m.memo.get(*a as usize) {
                Some(&v) if v != UNSET => (IntOrRef::Ref(v), 2),
                _ => return Ok(None),
            },
            [b'j', a, b, c, d, ..] => {
                let id = u32::from_le_bytes([*a, *b, *c, *d]) as u64;
                match self.m.memo_lookup(id) {
                    Some(v) => (IntOrRef::Ref(v), 5),
                    None => return Ok(None),
                }
            }
            _ => return Ok(None),
        };
        self.m.cursor.advance(len);
        Ok(Some(x))
    }

    /// A run of memo references (BINGET, LONG_BINGET) read in one go, each checked against
    /// the memo; their values go to `out` when given. Stops at the first other opcode.
    #[inline]
    pub fn memo_refs(&mut self, mut out: Option<&mut Vec<Value>>) -> Result<()> {
        loop {
            let b = self.m.cursor.rest();
            let (id, len) = match b {
                [b'j', a, b, c, d, ..] => (u32::from_le_bytes([*a, *b, *c, *d]) as usize, 5),
                [b'h', a, ..] => (*a as usize, 2),
                [0x95, ..] => {
                    if self.peek_after_frames().is_none() {
                        return Ok(());
                    }
                    continue;
                }
                _ => return Ok(()),
            };
            if out.is_none() && !self.m.memo_holes && self.m.memo_holds(id as u64) {
                self.m.cursor.advance(len); // stored: only its presence matters here
                continue;
            }
            let v = match self.m.memo_lookup(id as u64) {
                Some(v) => v,
                None => {
                    // the sparse memo, or an error naming the opcode
                    let Op::Get(id) = self.m.cursor.next_op()? else {
                        unreachable!("a GET opcode was matched")
                    };
                    let v = self.get(id)?;
                    if let Some(o) = out.as_deref_mut() {
                        o.push(v);
                    }
                    continue;
                }
            };
            self.m.cursor.advance(len);
            if let Some(o) = out.as_deref_mut() {
                o.push(v);
            }
        }
    }

    /// Consume the next opcode if it is `code` (no argument).
    #[inline]
    pub fn eat(&mut self, code: u8) -> bool {
        self.peek() == Some(code) && self.m.cursor.eat(code)
    }

    /// A memo entry.
    #[inline]
    pub fn get(&mut self, id: u64) -> Result<Value> {
        match self.m.memo_lookup(id) {
            Some(v) => Ok(v),
            None => self.m.err(format!(
                "memo key {id} was never stored (a GET before its PUT)"
            )),
        }
    }

    /// MEMOIZE `v`; its id.
    #[inline]
    pub fn memoize(&mut self, v: Value) -> u64 {
        self.m.memoize(v)
    }

    /// MEMOIZE each of `values` in turn.
    pub fn memoize_run(&mut self, values: impl Iterator<Item = Value>) {
        match &mut self.m.window {
            Some(w) => w.put_run(values),
            None => values.for_each(|v| {
                self.m.memoize(v);
            }),
        }
    }

    /// PUT `v` at `id`.
    pub fn put(&mut self, id: u64, v: Value) {
        self.m.memo_put(id, v);
    }

    /// A handle the caller defines ([`Document::as_taken`] gives it back).
    pub fn taken(&self, handle: u64) -> Value {
        Value::taken(handle)
    }

    /// Run the machine for exactly one value (and the memo entries that follow it) and return
    /// it: for what the caller does not read itself.
    pub fn generic_value(&mut self) -> Result<Value> {
        let (stack, marks) = (self.m.stack.len(), self.m.marks.len());
        self.m.marks.push(stack); // nothing below may be consumed
        loop {
            let op = self.m.cursor.next_op()?;
            if let Op::Stop = op {
                return self.m.err("STOP inside a value");
            }
            self.m.exec(op)?;
            if self.m.marks.len() < marks + 1 || self.m.stack.len() < stack {
                return self.m.err("a value consumed what lay below it");
            }
            if self.m.marks.len() == marks + 1 && self.m.stack.len() == stack + 1 {
                // the memo entries of the value, and the marked batches of items of a
                // container (SETITEMS, APPENDS), then done
                let top = *self.m.stack.last().expect("one value above the mark");
                match self.peek() {
                    Some(0x94 | b'q' | b'r' | b'p') => {}
                    Some(b'(') if top.is_dict() || top.is_list() || top.is_set() => {}
                    _ => {
                        self.m.marks.pop();
                        return Ok(self.m.stack.pop().expect("one value above the mark"));
                    }
                }
            }
        }
    }

    pub fn doc(&self) -> &Document {
        &self.m.doc
    }

    /// A string in the document, already text.
    pub fn push_text(&mut self, s: &str) -> Value {
        self.m.doc.push_str(s)
    }

    /// A string in the document (what the machine makes of a string opcode).
    pub fn push_str(&mut self, raw: &[u8]) -> Value {
        match std::str::from_utf8(raw) {
            Ok(s) => self.m.doc.push_str(s),
            Err(_) => {
                let s = String::from_utf8_lossy(raw).into_owned();
                self.m.doc.push_str(&s)
            }
        }
    }

    /// A LONG wider than 64 bits, in the document.
    pub fn int_from_le(&mut self, le: &[u8]) -> Value {
        self.m.doc.int_from_le(le)
    }

    /// An error at the last opcode.
    pub fn error(&self, message: impl Into<String>) -> PickleError {
        self.m.cursor.error(message.into())
    }

    /// Tell the progress sink how far the reading is, now and then.
    #[inline]
    pub fn tick(&mut self) {
        let pos = self.m.cursor.position();
        if pos >= self.next_report {
            self.progress.advanced(pos);
            self.next_report = pos + PROGRESS_STEP;
        }
    }
}

/// Decode, letting `divert` read the values of the top-level keys it wants.
pub fn parse_with_divert(
    data: &[u8],
    progress: &mut dyn Progress,
    divert: &mut dyn Divert,
) -> Result<Document> {
    let mut m = Machine::new(data, true);
    let _ = m.memo.try_reserve(data.len() / 16);
    m.divert = Some(divert);
    m.run(progress)?;
    Ok(m.doc)
}

/// Decode one pickle from `data`. Bytes after the `STOP` opcode are ignored, as `pickle.load`
/// ignores what follows in the stream.
pub fn parse(data: &[u8]) -> Result<Document> {
    parse_with_progress(data, &mut ())
}

pub fn parse_with_progress(data: &[u8], progress: &mut dyn Progress) -> Result<Document> {
    run_machine(data, progress, true)
}

/// Decode executing every opcode one by one, without the fused fast paths (`flat_dict`):
/// the reference the fuzz target compares the fast paths against.
pub fn parse_opcode_by_opcode(data: &[u8]) -> Result<Document> {
    run_machine(data, &mut (), false)
}

fn run_machine(data: &[u8], progress: &mut dyn Progress, fuse: bool) -> Result<Document> {
    let mut m = Machine::new(data, fuse);
    m.memo.reserve(data.len() / 16);
    m.run(progress)?;
    Ok(m.doc)
}

pub(super) struct Machine<'a, 's> {
    cursor: Cursor<'a>,
    divert: Option<&'s mut dyn Divert>,
    /// The top-level key just read is one `divert` wants: it reads the value.
    divert_next: bool,
    /// From the first diverted value on, the memo entries past the dense memo: only the
    /// recent inert handles are kept (see [`HandleWindow`]).
    window: Option<HandleWindow>,
    /// Use the fused fast paths (off only for `parse_opcode_by_opcode`).
    fuse: bool,
    stack: Vec<Value>,
    marks: Vec<usize>,
    /// Dense memo; `UNSET` marks ids never stored (8 bytes a slot: files memoize millions).
    memo: Vec<Value>,
    /// Whether `memo` may hold `UNSET` slots (ids PUT out of order): without them, every id
    /// below its length is stored, which `Diverted::memo_refs` checks without a memory load.
    memo_holes: bool,
    memo_sparse: HashMap<u64, Value>,
    doc: Document,
    scratch: Vec<Value>,
}

const PROGRESS_STEP: usize = 16 << 20;

const UNSET: Value = Value::UNSET;

impl<'a, 's> Machine<'a, 's> {
    fn new(data: &'a [u8], fuse: bool) -> Machine<'a, 's> {
        Machine {
            fuse,
            divert: None,
            divert_next: false,
            window: None,
            cursor: Cursor::new(data),
            stack: Vec::with_capacity(64),
            marks: Vec::new(),
            memo: Vec::new(),
            memo_holes: false,
            memo_sparse: HashMap::new(),
            doc: Document::with_room_for(data.len()),
            scratch: Vec::new(),
        }
    }

    /// MEMOIZE: the next id (the memo's length, as Python counts it).
    #[inline]
    fn memoize(&mut self, v: Value) -> u64 {
        let id = match &self.window {
            Some(w) => w.next,
            None => self.memo.len() as u64,
        };
        self.memo_put(id, v);
        id
    }

    /// A string key of the top-level dict was pushed: does `divert` want its value?
    #[cold]
    fn offer_key(&mut self) {
        let Some(divert) = self.divert.as_deref_mut() else {
            return;
        };
        let doc = &self.doc;
        let keys: Vec<&str> = self.stack[1..self.stack.len() - 1]
            .iter()
            .step_by(2)
            .map(|&k| doc.as_str(k).unwrap_or("?"))
            .collect();
        if let Some(key) = doc.as_str(*self.stack.last().expect("a key")) {
            self.divert_next = divert.wants(key, &keys);
        }
    }

    /// Hand the reading of one value to `divert`.
    #[cold]
    fn run_divert(&mut self, progress: &mut dyn Progress) -> Result<()> {
        self.divert_next = false;
        let divert = self.divert.take().expect("divert_next only with a divert");
        if self.window.is_none() {
            self.window = Some(HandleWindow::new(self.memo.len() as u64));
        }
        let mut r = Diverted {
            next_report: self.cursor.position() + PROGRESS_STEP,
            m: self,
            progress,
        };
        let v = divert.read(&mut r);
        self.divert = Some(divert);
        self.stack.push(v?);
        Ok(())
    }
    fn err<T>(&self, message: impl Into<String>) -> Result<T> {
        Err(self.cursor.error(message.into()))
    }

    #[inline]
    fn pop(&mut self) -> Result<Value> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return self.err("stack underflow: an opcode needs a value but the stack is empty");
        }
        Ok(self.stack.pop().unwrap())
    }

    #[inline]
    fn top(&self) -> Result<Value> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return self.err("stack underflow: an opcode needs a value but the stack is empty");
        }
        Ok(*self.stack.last().unwrap())
    }

    /// Pop everything above the last MARK into `scratch`.
    fn pop_mark(&mut self) -> Result<()> {
        let Some(mark) = self.marks.pop() else {
            return self.err("MARK expected: an opcode needs a marked group but there is no MARK");
        };
        self.scratch.clear();
        self.scratch.extend(self.stack.drain(mark..));
        Ok(())
    }

    #[inline]
    fn memo_put(&mut self, id: u64, v: Value) {
        if let Some(w) = &mut self.window {
            if id >= w.base {
                if !w.put(id, v) {
                    // ids out of order: the caller reads the file again the plain way
                    self.doc.taken_reused = true;
                }
                return;
            }
        }
        let len = self.memo.len() as u64;
        if id < len {
            self.memo[id as usize] = v;
        } else if id < len + MEMO_DENSE_SLACK {
            self.memo_holes |= id > len;
            self.memo.resize(id as usize, UNSET);
            self.memo.push(v);
        } else {
            self.memo_holes = true;
            self.memo_sparse.insert(id, v);
        }
    }

    /// A small dict written in one batch whose items are all numbers, None/bools or memo
    /// references — `}` [MEMOIZE] `(` item… `u`, the shape of every trace event and block of an
    /// allocator snapshot — executed as one step: the same dict, memo entry and stack as the
    /// opcodes one by one would leave, at a fraction of the work. Called just after EMPTY_DICT;
    /// false (having changed nothing) for anything else, which then runs opcode by opcode.
    fn flat_dict(&mut self) -> Result<bool> {
        let Some(batch) = FlatBatch::match_at(self.cursor.rest(), |id| self.memo_lookup(id)) else {
            return Ok(false);
        };
        let FlatBatch {
            memoized,
            pairs,
            keys: raw_keys,
            values,
            len: i,
        } = batch;
        // matched: now the effects, in the order the opcodes would have them
        let mut keys = [Value::NONE; MAX_PAIRS];
        for (k, &r) in keys.iter_mut().zip(&raw_keys[..pairs]) {
            *k = self.value_of(r);
        }
        let shape = self.doc.shape_of(&keys[..pairs]);
        let values = &values[..pairs];
        let mut items = [Value::NONE; MAX_PAIRS];
        for (item, &v) in items.iter_mut().zip(values) {
            *item = self.value_of(v);
        }
        let dict = self
            .doc
            .shaped_dict(shape, &items[..pairs])
            .map_err(|m| self.cursor.error(m.to_string()))?;
        if memoized {
            let _ = self.memoize(dict);
        }
        self.stack.push(dict);
        self.cursor.advance(i);
        Ok(true)
    }

    fn value_of(&mut self, v: FlatValue) -> Value {
        match v {
            FlatValue::Int(i) => self.doc.int(i),
            FlatValue::Float(f) => Value::float(f),
            FlatValue::Value(v) => {
                if v.is_taken() {
                    self.doc.taken_reused = true;
                }
                v
            }
        }
    }

    /// Whether `id` is stored, without reading it (a handle let go of counts: it was stored).
    #[inline(always)]
    fn memo_holds(&self, id: u64) -> bool {
        id < self.memo.len() as u64
            || self
                .window
                .as_ref()
                .is_some_and(|w| id >= w.base && id < w.next)
    }

    /// The memo entry `id`, if stored. A handle the window has let go of reads as
    /// [`EVICTED_HANDLE`] and marks the document, so the caller reads the file again.
    #[inline]
    fn memo_lookup(&mut self, id: u64) -> Option<Value> {
        if let Some(&v) = self.memo.get(id as usize) {
            if v != UNSET {
                return Some(v);
            }
        }
        self.memo_lookup_beyond(id)
    }

    #[inline]
    fn memo_lookup_beyond(&mut self, id: u64) -> Option<Value> {
        if let Some(w) = &mut self.window {
            if id >= w.base {
                return match w.get(id) {
                    Lookup::Stored(v) => Some(v),
                    Lookup::Evicted => {
                        self.doc.taken_reused = true;
                        Some(Value::taken(EVICTED_HANDLE))
                    }
                    Lookup::Never => None,
                };
            }
        }
        self.memo_sparse.get(&id).copied()
    }

    fn memo_get(&mut self, id: u64) -> Result<()> {
        match self.memo_lookup(id) {
            Some(v) => {
                if v.is_taken() {
                    self.doc.taken_reused = true;
                }
                self.stack.push(v);
                Ok(())
            }
            None => self.err(format!(
                "memo key {id} was never stored (a GET before its PUT)"
            )),
        }
    }

    fn push_str_bytes(&mut self, raw: &[u8]) {
        let v = match std::str::from_utf8(raw) {
            Ok(s) => self.doc.push_str(s),
            // Python writes lone surrogates with 'surrogatepass'; keep the text readable.
            Err(_) => {
                let s = String::from_utf8_lossy(raw).into_owned();
                self.doc.push_str(&s)
            }
        };
        self.stack.push(v);
        // a key of the top-level dict: [dict, MARK, key, value, ..., key]
        if self.divert.is_some()
            && self.marks.len() == 1
            && self.marks[0] == 1
            && self.stack.len().is_multiple_of(2)
            && self.stack[0].is_dict()
        {
            self.offer_key();
        }
    }

    fn push_text(&mut self, s: &str) {
        let v = self.doc.push_str(s);
        self.stack.push(v);
    }

    fn run(&mut self, progress: &mut dyn Progress) -> Result<()> {
        let mut next_report = PROGRESS_STEP;
        loop {
            if self.cursor.position() >= next_report {
                progress.advanced(self.cursor.position());
                next_report = self.cursor.position() + PROGRESS_STEP;
            }
            // the key's own memo entry first, then the value is the divert's
            if self.divert_next
                && !matches!(
                    self.cursor.rest().first(),
                    Some(0x94 | 0x95 | b'q' | b'r' | b'p')
                )
            {
                self.run_divert(progress)?;
                next_report = self.cursor.position() + PROGRESS_STEP;
                continue;
            }
            match self.cursor.next_op()? {
                Op::Stop => {
                    let v = self.pop()?;
                    self.doc.root = Some(v);
                    progress.advanced(self.cursor.position());
                    return Ok(());
                }
                op => self.exec(op)?,
            }
        }
    }

    /// Execute one opcode (any but STOP).
    fn exec(&mut self, op: Op<'a>) -> Result<()> {
        {
            match op {
                Op::Proto(_) | Op::Frame => {}
                Op::Stop => return self.err("STOP inside a value"),
                // ---- marks and stack ----
                Op::Mark => self.marks.push(self.stack.len()),
                Op::Pop => {
                    self.pop()?;
                }
                Op::PopMark => self.pop_mark()?,
                Op::Dup => {
                    let v = self.top()?;
                    if v.is_taken() {
                        self.doc.taken_reused = true;
                    }
                    self.stack.push(v);
                }
                // ---- scalars ----
                Op::None => self.stack.push(Value::NONE),
                Op::Bool(b) => self.stack.push(if b { Value::TRUE } else { Value::FALSE }),
                Op::Int(i) => {
                    let v = self.doc.int(i);
                    self.stack.push(v);
                }
                Op::Long(le) => {
                    let v = self.doc.int_from_le(le);
                    self.stack.push(v);
                }
                Op::DecimalInt(text) => {
                    let v = self.big_decimal(text)?;
                    self.stack.push(v);
                }
                Op::Float(f) => self.stack.push(Value::float(f)),
                // ---- strings and bytes ----
                Op::Unicode(raw) | Op::BinString(raw) => self.push_str_bytes(raw),
                Op::UnicodeEscaped(raw) => self.push_text(&decode_raw_unicode_escape(raw)),
                Op::StringLiteral(line) => {
                    let Some(raw) = decode_python_string_literal(line) else {
                        return self.err("STRING: argument is not a quoted string literal");
                    };
                    // Python 3 decodes protocol-0 strings as ASCII by default; keep text as text.
                    self.push_str_bytes(&raw);
                }
                Op::Bytes(raw) => {
                    let v = self.doc.push_bytes(raw);
                    self.stack.push(v);
                }
                Op::NextBuffer => {
                    return self.err("NEXT_BUFFER: out-of-band buffers are not part of the file");
                }
                Op::ReadonlyBuffer => {
                    self.top()?; // a flag on the buffer above; nothing to do
                }
                // ---- containers ----
                Op::EmptyTuple => {
                    let v = self.new_container(ContainerKind::Tuple, &[])?;
                    self.stack.push(v);
                }
                Op::Tuple => self.build_from_mark(ContainerKind::Tuple)?,
                Op::TupleN(n) => {
                    let floor = self.marks.last().copied().unwrap_or(0);
                    if self.stack.len() < floor + n {
                        return self.err(format!("TUPLE{n}: needs {n} values on the stack"));
                    }
                    let at = self.stack.len() - n;
                    let mut items = [Value::NONE; 3];
                    items[..n].copy_from_slice(&self.stack[at..]);
                    self.stack.truncate(at);
                    let v = self.new_container(ContainerKind::Tuple, &items[..n])?;
                    self.stack.push(v);
                }
                Op::EmptyList => {
                    let v = self.doc.new_container(ContainerKind::List);
                    self.stack.push(v);
                }
                Op::List => self.build_from_mark(ContainerKind::List)?,
                Op::EmptyDict => {
                    if !(self.fuse && self.flat_dict()?) {
                        let v = self.doc.new_container(ContainerKind::Dict);
                        self.stack.push(v);
                    }
                }
                Op::Dict => self.build_from_mark(ContainerKind::Dict)?,
                Op::EmptySet => {
                    let v = self.doc.new_container(ContainerKind::Set);
                    self.stack.push(v);
                }
                Op::FrozenSet => self.build_from_mark(ContainerKind::Set)?,
                Op::Append => {
                    let item = self.pop()?;
                    let target = self.top()?;
                    let list = self.items_target(target, false)?;
                    self.extend(list, &[item])?;
                }
                Op::Appends | Op::AddItems => self.add_marked(false)?,
                Op::SetItem => {
                    let v = self.pop()?;
                    let k = self.pop()?;
                    let target = self.top()?;
                    let dict = self.items_target(target, true)?;
                    self.extend(dict, &[k, v])?;
                }
                Op::SetItems => self.add_marked(true)?,
                // ---- memo ----
                Op::Get(id) => self.memo_get(id)?,
                Op::Put(id) => {
                    let v = self.top()?;
                    self.memo_put(id, v);
                }
                Op::Memoize => {
                    let v = self.top()?;
                    let _ = self.memoize(v);
                }
                // ---- globals and objects: recorded, never called ----
                Op::Global { module, name } => {
                    let module = String::from_utf8_lossy(module).into_owned();
                    let name = String::from_utf8_lossy(name).into_owned();
                    let v = self.doc.global(&module, &name);
                    self.stack.push(v);
                }
                Op::StackGlobal => {
                    let name = self.pop()?;
                    let module = self.pop()?;
                    let (Some(m), Some(n)) = (self.doc.as_str(module), self.doc.as_str(name))
                    else {
                        return self.err("STACK_GLOBAL: module and name must be strings");
                    };
                    let (m, n) = (m.to_string(), n.to_string());
                    let v = self.doc.global(&m, &n);
                    self.stack.push(v);
                }
                Op::Reduce => {
                    let args = self.pop()?;
                    let callable = self.pop()?;
                    let v = self.reduce_as(ObjectKind::Reduce, callable, args)?;
                    self.stack.push(v);
                }
                Op::NewObj => {
                    let args = self.pop()?;
                    let cls = self.pop()?;
                    let v = self.reduce_as(ObjectKind::NewObj, cls, args)?;
                    self.stack.push(v);
                }
                Op::NewObjEx => {
                    let _kwargs = self.pop()?;
                    let args = self.pop()?;
                    let cls = self.pop()?;
                    let v = self.reduce_as(ObjectKind::NewObj, cls, args)?;
                    self.stack.push(v);
                }
                Op::Inst { module, name } => {
                    let module = String::from_utf8_lossy(module).into_owned();
                    let name = String::from_utf8_lossy(name).into_owned();
                    self.pop_mark()?;
                    let items = std::mem::take(&mut self.scratch);
                    let args = self.new_container(ContainerKind::Tuple, &items);
                    self.scratch = items;
                    let cls = self.doc.global(&module, &name);
                    let v = self.doc.object(ObjectKind::Inst, cls, args?);
                    self.stack.push(v);
                }
                Op::Obj => {
                    self.pop_mark()?;
                    if self.scratch.is_empty() {
                        return self.err("OBJ: needs a class after MARK");
                    }
                    let items = std::mem::take(&mut self.scratch);
                    let args = self.new_container(ContainerKind::Tuple, &items[1..]);
                    let cls = items[0];
                    self.scratch = items;
                    let v = self.doc.object(ObjectKind::Inst, cls, args?);
                    self.stack.push(v);
                }
                Op::Build => {
                    let state = self.pop()?;
                    let target = self.top()?;
                    if let Some(oid) = target.object_id() {
                        self.doc.objects[oid].state = state;
                    }
                    // BUILD on a plain container (e.g. a dict subclass with __dict__) is ignored.
                }
                Op::PersId(pid) => {
                    let pid = String::from_utf8_lossy(pid).into_owned();
                    let pid = self.doc.push_str(&pid);
                    let v = self.doc.object(ObjectKind::PersistentId, Value::NONE, pid);
                    self.stack.push(v);
                }
                Op::BinPersId => {
                    let pid = self.pop()?;
                    let v = self.doc.object(ObjectKind::PersistentId, Value::NONE, pid);
                    self.stack.push(v);
                }
                Op::Ext(code) => {
                    let code = self.doc.int(code as i64);
                    let v = self.doc.object(ObjectKind::Extension, Value::NONE, code);
                    self.stack.push(v);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_dicts_read_in_one_step_behave_like_any_dict() {
        // ['a', 'b', d] where d = {'a': 5, 'b': 6} is one flat batch of memo keys (the fused
        // path, a shaped dict), then gets a second batch {'a': 7} (back to an ordinary dict)
        let bytes = b"\x80\x04]\x94(\x8c\x01a\x94\x8c\x01b\x94}\x94(h\x01K\x05h\x02K\x06u(h\x01K\x07uh\x03e.";
        let doc = parse(bytes).unwrap();
        let list = doc.as_seq(doc.root()).unwrap();
        assert_eq!(list.len(), 4);
        assert_eq!(
            list[2], list[3],
            "the dict and its memo reference are one object"
        );
        let d = doc.as_dict(list[2]).unwrap();
        let pairs: Vec<(&str, i64)> = d
            .iter()
            .map(|(k, v)| (doc.as_str(k).unwrap(), doc.as_int(v).unwrap()))
            .collect();
        assert_eq!(pairs, [("a", 5), ("b", 6), ("a", 7)]);
        assert_eq!(doc.as_int(d.get("a").unwrap()), Some(7));
        // a second dict with the same keys shares the shape
        let bytes = b"\x80\x04]\x94(\x8c\x01a\x94\x8c\x01b\x94}\x94(h\x01K\x01h\x02K\x02u}\x94(h\x01K\x03h\x02K\x04ue.";
        let doc = parse(bytes).unwrap();
        let list = doc.as_seq(doc.root()).unwrap();
        let second = doc.as_dict(list[3]).unwrap();
        assert_eq!(doc.as_int(second.get("b").unwrap()), Some(4));
        assert_eq!(second.len(), 2);
    }
}
