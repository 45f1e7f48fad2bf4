//! The pickle virtual machine, protocols 0–5, without ever calling anything.
//!
//! Globals become inert `Global` values; `REDUCE`/`NEWOBJ`/`INST`/`OBJ` become inert `Object`s
//! that keep their callable and arguments. The only constructions it understands are the ones
//! whose meaning is plain data: `collections.defaultdict` and `OrderedDict` (read as dicts),
//! `builtins.set`/`frozenset`, `bytearray` and `_codecs.encode` (how protocol 2 writes bytes).

use std::collections::HashMap;

use super::ops::{Cursor, Op};
use super::value::{
    int_from_short_le, ContainerKind, Document, ObjectKind, Value, View, TAKEN_DEPTH,
};

/// Containers nested deeper than this are refused: Python's own pickler cannot write them
/// (it recurses), and every consumer may then walk a document without exhausting its stack.
pub const MAX_DEPTH: u16 = 1000;
/// The memo is indexed by the ids a file declares; ids far beyond what was stored go to a map
/// so that one `LONG_BINPUT 0xFFFFFFFF` cannot allocate gigabytes.
const MEMO_DENSE_SLACK: u64 = 1 << 16;
/// Python refuses to parse longer decimal ints (sys.int_info.str_digits_check_threshold).
const MAX_DECIMAL_DIGITS: usize = 4300;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PickleError {
    pub offset: usize,
    pub message: String,
}

impl std::fmt::Display for PickleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (at byte {})", self.message, self.offset)
    }
}

impl std::error::Error for PickleError {}

type Result<T> = std::result::Result<T, PickleError>;

/// Called as parsing moves forward with the number of bytes consumed, so a memory-mapped
/// caller can drop pages it will not read again (and draw progress).
pub trait Progress {
    fn advanced(&mut self, consumed: usize);
}

impl Progress for () {
    fn advanced(&mut self, _consumed: usize) {}
}

/// A value of a flat dict as the fused path decoded it, before it became a document value.
#[derive(Clone, Copy, Debug)]
pub enum FlatValue {
    Int(i64),
    Float(f64),
    /// A memo reference, None or a bool.
    Value(Value),
}

/// Takes small flat dicts (see `Machine::flat_dict`) straight from the opcode stream instead
/// of the document, for a reader that wants millions of them as its own records (a snapshot's
/// trace events). The document then holds a [`View::Taken`] handle where the dict would be.
/// Any dict the sink declines is read as usual, so a sink changes where dicts live, never
/// what they say.
pub trait DictSink {
    /// Asked once per key list (`shape` numbers them in the document): offer dicts with these
    /// keys to `take`?
    fn wants(&mut self, doc: &Document, shape: u32, keys: &[Value]) -> bool;
    /// One dict of a wanted key list, its values in key order: its handle, or None to leave
    /// it to the document. Values that are containers nest less than the document's bound.
    fn take(&mut self, doc: &Document, shape: u32, values: &[FlatValue]) -> Option<u64>;
}

/// Decode one pickle from `data`. Bytes after the `STOP` opcode are ignored, as `pickle.load`
/// ignores what follows in the stream.
pub fn parse(data: &[u8]) -> Result<Document> {
    parse_with_progress(data, &mut ())
}

pub fn parse_with_progress(data: &[u8], progress: &mut dyn Progress) -> Result<Document> {
    run_machine(data, progress, true, None)
}

/// Decode, handing the flat dicts `sink` wants to it.
pub fn parse_with_sink(
    data: &[u8],
    progress: &mut dyn Progress,
    sink: &mut dyn DictSink,
) -> Result<Document> {
    run_machine(data, progress, true, Some(sink))
}

/// Decode executing every opcode one by one, without the fused fast paths (`flat_dict`):
/// the reference the fuzz target compares the fast paths against.
pub fn parse_opcode_by_opcode(data: &[u8]) -> Result<Document> {
    run_machine(data, &mut (), false, None)
}

fn run_machine(
    data: &[u8],
    progress: &mut dyn Progress,
    fuse: bool,
    sink: Option<&mut dyn DictSink>,
) -> Result<Document> {
    let mut m = Machine {
        fuse,
        sink,
        sink_wants: Vec::new(),
        cursor: Cursor::new(data),
        stack: Vec::with_capacity(64),
        marks: Vec::new(),
        memo: Vec::new(),
        memo_sparse: HashMap::new(),
        doc: Document::with_room_for(data.len()),
        scratch: Vec::new(),
    };
    m.memo.reserve(data.len() / 16);
    m.run(progress)?;
    Ok(m.doc)
}

struct Machine<'a, 's> {
    cursor: Cursor<'a>,
    /// Use the fused fast paths (off only for `parse_opcode_by_opcode`).
    fuse: bool,
    sink: Option<&'s mut dyn DictSink>,
    /// By shape id: 0 not asked yet, 1 wanted, 2 not.
    sink_wants: Vec<u8>,
    stack: Vec<Value>,
    marks: Vec<usize>,
    /// Dense memo; `UNSET` marks ids never stored (8 bytes a slot: files memoize millions).
    memo: Vec<Value>,
    memo_sparse: HashMap<u64, Value>,
    doc: Document,
    scratch: Vec<Value>,
}

const PROGRESS_STEP: usize = 16 << 20;
const UNSET: Value = Value::UNSET;

impl<'a> Machine<'a, '_> {
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
        let len = self.memo.len() as u64;
        if id < len {
            self.memo[id as usize] = v;
        } else if id < len + MEMO_DENSE_SLACK {
            self.memo.resize(id as usize, UNSET);
            self.memo.push(v);
        } else {
            self.memo_sparse.insert(id, v);
        }
    }

    /// A small dict written in one batch whose items are all numbers, None/bools or memo
    /// references — `}` [MEMOIZE] `(` item… `u`, the shape of every trace event and block of an
    /// allocator snapshot — executed as one step: the same dict, memo entry and stack as the
    /// opcodes one by one would leave, at a fraction of the work. Called just after EMPTY_DICT;
    /// false (having changed nothing) for anything else, which then runs opcode by opcode.
    fn flat_dict(&mut self) -> Result<bool> {
        // snapshot events have 6 pairs, blocks 5; larger dicts go opcode by opcode
        const MAX_PAIRS: usize = 12;
        let b = self.cursor.rest();
        let memoized = b.first() == Some(&0x94);
        let mut i = memoized as usize;
        if b.get(i) != Some(&b'(') {
            return Ok(false);
        }
        i += 1;
        let mut raw_keys = [FlatValue::Value(Value::NONE); MAX_PAIRS];
        let mut values = [FlatValue::Value(Value::NONE); MAX_PAIRS];
        let mut n = 0;
        loop {
            let Some(&code) = b.get(i) else {
                return Ok(false);
            };
            if code == b'u' {
                i += 1;
                break;
            }
            if n == 2 * MAX_PAIRS {
                return Ok(false);
            }
            let arg = |len: usize| b.get(i + 1..i + 1 + len);
            let (v, len) = match code {
                b'h' | b'j' => {
                    let (id, len) = match code {
                        b'h' => (
                            *match arg(1) {
                                Some(a) => &a[0],
                                None => return Ok(false),
                            } as usize,
                            1,
                        ),
                        _ => match arg(4) {
                            Some(a) => (u32::from_le_bytes(a.try_into().unwrap()) as usize, 4),
                            None => return Ok(false),
                        },
                    };
                    match self.memo.get(id) {
                        Some(&v) if v != UNSET => (FlatValue::Value(v), len),
                        _ => return Ok(false),
                    }
                }
                b'K' => match arg(1) {
                    Some(a) => (FlatValue::Int(a[0] as i64), 1),
                    None => return Ok(false),
                },
                b'M' => match arg(2) {
                    Some(a) => (
                        FlatValue::Int(u16::from_le_bytes(a.try_into().unwrap()) as i64),
                        2,
                    ),
                    None => return Ok(false),
                },
                b'J' => match arg(4) {
                    Some(a) => (
                        FlatValue::Int(i32::from_le_bytes(a.try_into().unwrap()) as i64),
                        4,
                    ),
                    None => return Ok(false),
                },
                0x8a => match arg(1) {
                    // LONG1 of up to 8 bytes (Python writes the fewest that hold the value)
                    Some(&[k]) if k <= 8 => match b.get(i + 2..i + 2 + k as usize) {
                        Some(le) => (FlatValue::Int(int_from_short_le(le)), 1 + k as usize),
                        None => return Ok(false),
                    },
                    _ => return Ok(false),
                },
                b'G' => match arg(8) {
                    Some(a) => (
                        FlatValue::Float(f64::from_be_bytes(a.try_into().unwrap())),
                        8,
                    ),
                    None => return Ok(false),
                },
                b'N' => (FlatValue::Value(Value::NONE), 0),
                0x88 => (FlatValue::Value(Value::TRUE), 0),
                0x89 => (FlatValue::Value(Value::FALSE), 0),
                _ => return Ok(false),
            };
            if n % 2 == 0 {
                raw_keys[n / 2] = v;
            } else {
                values[n / 2] = v;
            }
            n += 1;
            i += 1 + len;
        }
        if n == 0 || n % 2 != 0 {
            return Ok(false);
        }
        // matched: now the effects, in the order the opcodes would have them
        let pairs = n / 2;
        let mut keys = [Value::NONE; MAX_PAIRS];
        for (k, &r) in keys.iter_mut().zip(&raw_keys[..pairs]) {
            *k = self.value_of(r);
        }
        let shape = self.doc.shape_of(&keys[..pairs]);
        let values = &values[..pairs];
        let dict = match self.offer_to_sink(shape, &keys[..pairs], values) {
            Some(taken) => taken,
            None => {
                let mut items = [Value::NONE; MAX_PAIRS];
                for (item, &v) in items.iter_mut().zip(values) {
                    *item = self.value_of(v);
                }
                self.doc
                    .shaped_dict(shape, &items[..pairs])
                    .map_err(|m| self.cursor.error(m))?
            }
        };
        if memoized {
            let id = self.memo.len() as u64;
            self.memo_put(id, dict);
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

    /// The taken handle if the sink wants dicts of `shape` and takes this one.
    #[inline]
    fn offer_to_sink(&mut self, shape: u32, keys: &[Value], values: &[FlatValue]) -> Option<Value> {
        let sink = self.sink.as_deref_mut()?;
        let s = shape as usize;
        if s >= self.sink_wants.len() {
            self.sink_wants.resize(s + 1, 0);
        }
        if self.sink_wants[s] == 0 {
            let nested = keys.iter().any(|k| !k.is_scalar());
            self.sink_wants[s] = if !nested && sink.wants(&self.doc, shape, keys) {
                1
            } else {
                2
            };
        }
        if self.sink_wants[s] != 1 {
            return None;
        }
        for &v in values {
            if let FlatValue::Value(v) = v {
                // a taken dict inside another: declined, and read as usual (which notes it)
                if v.is_taken() || self.doc.depth_of(v) >= TAKEN_DEPTH {
                    return None;
                }
            }
        }
        let handle = sink.take(&self.doc, shape, values)?;
        self.doc.taken_dicts += 1;
        Some(Value::taken(handle))
    }

    fn memo_get(&mut self, id: u64) -> Result<()> {
        let v = match self.memo.get(id as usize) {
            Some(&v) if v != UNSET => Some(v),
            _ => self.memo_sparse.get(&id).copied(),
        };
        match v {
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

    fn new_container(&mut self, kind: ContainerKind, items: &[Value]) -> Result<Value> {
        if let ContainerKind::Tuple = kind {
            if let Some(t) = self.doc.push_scalar_tuple(items) {
                return Ok(t);
            }
        }
        let c = self.doc.new_container(kind);
        self.extend(c, items)?;
        Ok(c)
    }

    fn extend(&mut self, c: Value, new: &[Value]) -> Result<()> {
        self.doc.extend(c, new).map_err(|m| self.cursor.error(m))
    }

    /// SETITEMS / APPENDS / ADDITEMS: the values above the last MARK go straight from the
    /// stack into the container below it (no intermediate copy: every event dict of a
    /// snapshot passes here).
    fn add_marked(&mut self, want_dict: bool) -> Result<()> {
        let Some(mark) = self.marks.pop() else {
            return self.err("MARK expected: an opcode needs a marked group but there is no MARK");
        };
        let floor = self.marks.last().copied().unwrap_or(0);
        if mark <= floor {
            return self.err("stack underflow: no container below the MARK");
        }
        if want_dict && !(self.stack.len() - mark).is_multiple_of(2) {
            return self.err("SETITEMS: odd number of items after MARK");
        }
        let target = self.items_target(self.stack[mark - 1], want_dict)?;
        let r = self.doc.extend(target, &self.stack[mark..]);
        self.stack.truncate(mark);
        r.map_err(|m| self.cursor.error(m))
    }

    /// The dict or list that SETITEM(S)/APPEND(S) add to: the value itself, or the item
    /// collection of an opaque object (a dict or list subclass rebuilt by REDUCE).
    fn items_target(&mut self, target: Value, want_dict: bool) -> Result<Value> {
        if (want_dict && target.is_dict()) || (!want_dict && (target.is_list() || target.is_set()))
        {
            return Ok(target);
        }
        if let Some(oid) = target.object_id() {
            let existing = self.doc.objects[oid].items;
            if existing != Value::NONE {
                return Ok(existing);
            }
            let kind = if want_dict {
                ContainerKind::Dict
            } else {
                ContainerKind::List
            };
            let c = self.doc.new_container(kind);
            self.doc.objects[oid].items = c;
            return Ok(c);
        }
        let (op, what) = if want_dict {
            ("SETITEMS", "dict")
        } else {
            ("APPENDS", "list")
        };
        self.err(format!(
            "{op} on a {} where a {what} was expected",
            self.doc.type_name(target)
        ))
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
            match self.cursor.next_op()? {
                Op::Proto(_) | Op::Frame => {}
                Op::Stop => {
                    let v = self.pop()?;
                    self.doc.root = Some(v);
                    progress.advanced(self.cursor.position());
                    return Ok(());
                }
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
                    let id = self.memo.len() as u64;
                    self.memo_put(id, v);
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
    }

    /// TUPLE / LIST / DICT / FROZENSET: a container of everything above the last MARK.
    fn build_from_mark(&mut self, kind: ContainerKind) -> Result<()> {
        self.pop_mark()?;
        if matches!(kind, ContainerKind::Dict) && !self.scratch.len().is_multiple_of(2) {
            return self.err("DICT: odd number of items after MARK");
        }
        let items = std::mem::take(&mut self.scratch);
        let v = self.new_container(kind, &items);
        self.scratch = items;
        self.stack.push(v?);
        Ok(())
    }

    /// Plain-data constructions get their data value; anything else an inert object.
    fn reduce_as(&mut self, kind: ObjectKind, callable: Value, args: Value) -> Result<Value> {
        if let View::Global { module, name } = self.doc.view(callable) {
            let args_items: Vec<Value> = self
                .doc
                .as_seq(args)
                .map(|s| s.to_vec())
                .unwrap_or_default();
            match (module, name) {
                ("collections", "defaultdict" | "OrderedDict") => {
                    // The items follow through SETITEMS; the default factory is not data.
                    return Ok(self.doc.new_container(ContainerKind::Dict));
                }
                ("builtins" | "__builtin__", "set" | "frozenset") => {
                    let items = match args_items.first() {
                        Some(v) => self.doc.as_seq(*v).map(|s| s.to_vec()).unwrap_or_default(),
                        None => Vec::new(),
                    };
                    return self.new_container(ContainerKind::Set, &items);
                }
                ("builtins" | "__builtin__", "list") if args_items.is_empty() => {
                    return Ok(self.doc.new_container(ContainerKind::List));
                }
                ("builtins" | "__builtin__", "dict") if args_items.is_empty() => {
                    return Ok(self.doc.new_container(ContainerKind::Dict));
                }
                ("builtins" | "__builtin__", "bytearray" | "bytes") => {
                    if let Some(b) = args_items.first().and_then(|v| match self.doc.view(*v) {
                        View::Bytes(b) => Some(b.to_vec()),
                        _ => None,
                    }) {
                        return Ok(self.doc.push_bytes(&b));
                    }
                    if args_items.is_empty() {
                        return Ok(self.doc.push_bytes(&[]));
                    }
                }
                ("_codecs", "encode") => {
                    // protocol 2 writes bytes as _codecs.encode(text, 'latin1')
                    if let [text, enc] = args_items[..] {
                        if let (Some(t), Some("latin1" | "latin-1")) =
                            (self.doc.as_str(text), self.doc.as_str(enc))
                        {
                            let b: Option<Vec<u8>> =
                                t.chars().map(|c| u8::try_from(c as u32).ok()).collect();
                            if let Some(b) = b {
                                return Ok(self.doc.push_bytes(&b));
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(self.doc.object(kind, callable, args))
    }

    /// An int too wide for i64, from protocol 0 decimal text.
    fn big_decimal(&mut self, text: &str) -> Result<Value> {
        let (negative, digits) = match text.strip_prefix('-') {
            Some(d) => (true, d),
            None => (false, text.strip_prefix('+').unwrap_or(text)),
        };
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return self.err("INT/LONG: not a decimal number");
        }
        if digits.len() > MAX_DECIMAL_DIGITS {
            return self.err(format!("INT/LONG: more than {MAX_DECIMAL_DIGITS} digits"));
        }
        Ok(self
            .doc
            .int_from_le(&decimal_to_twos_complement_le(negative, digits)))
    }
}

/// Little-endian two's complement bytes of a decimal integer (for ints wider than 64 bits).
fn decimal_to_twos_complement_le(negative: bool, digits: &str) -> Vec<u8> {
    let mut mag: Vec<u8> = vec![0];
    for d in digits.bytes() {
        let mut carry = (d - b'0') as u32;
        for byte in mag.iter_mut() {
            let x = *byte as u32 * 10 + carry;
            *byte = x as u8;
            carry = x >> 8;
        }
        while carry > 0 {
            mag.push(carry as u8);
            carry >>= 8;
        }
    }
    mag.push(0); // room for the sign bit
    if negative {
        let mut carry = 1u16;
        for b in mag.iter_mut() {
            let x = (!*b) as u16 + carry;
            *b = x as u8;
            carry = x >> 8;
        }
    }
    mag
}

/// Protocol 0 `UNICODE`: latin-1 bytes with `\uXXXX` and `\UXXXXXXXX` escapes.
fn decode_raw_unicode_escape(raw: &[u8]) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'\\' && i + 1 < raw.len() && (raw[i + 1] == b'u' || raw[i + 1] == b'U') {
            let n = if raw[i + 1] == b'u' { 4 } else { 8 };
            if let Some(hex) = raw.get(i + 2..i + 2 + n) {
                let code = std::str::from_utf8(hex)
                    .ok()
                    .and_then(|h| u32::from_str_radix(h, 16).ok());
                if let Some(c) = code.and_then(char::from_u32) {
                    out.push(c);
                    i += 2 + n;
                    continue;
                }
            }
        }
        out.push(raw[i] as char);
        i += 1;
    }
    out
}

/// Protocol 0 `STRING`: a Python 2 repr, `'...'` or `"..."`, with backslash escapes.
fn decode_python_string_literal(line: &[u8]) -> Option<Vec<u8>> {
    let q = *line.first()?;
    if line.len() < 2 || (q != b'\'' && q != b'"') || *line.last()? != q {
        return None;
    }
    let body = &line[1..line.len() - 1];
    let mut out = Vec::with_capacity(body.len());
    let mut i = 0;
    while i < body.len() {
        let b = body[i];
        if b != b'\\' || i + 1 >= body.len() {
            out.push(b);
            i += 1;
            continue;
        }
        let e = body[i + 1];
        i += 2;
        match e {
            b'n' => out.push(b'\n'),
            b't' => out.push(b'\t'),
            b'r' => out.push(b'\r'),
            b'\\' | b'\'' | b'"' => out.push(e),
            b'x' => {
                let hex = body.get(i..i + 2)?;
                out.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?);
                i += 2;
            }
            b'0'..=b'7' => {
                let mut v = (e - b'0') as u32;
                let mut k = 0;
                while k < 2 && i < body.len() && (b'0'..=b'7').contains(&body[i]) {
                    v = v * 8 + (body[i] - b'0') as u32;
                    i += 1;
                    k += 1;
                }
                out.push(v as u8);
            }
            _ => {
                out.push(b'\\');
                out.push(e);
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_big_ints_become_twos_complement() {
        assert_eq!(decimal_to_twos_complement_le(false, "256"), vec![0, 1, 0]);
        let neg = decimal_to_twos_complement_le(true, "1");
        assert!(neg.iter().all(|&b| b == 0xff));
    }

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

    #[test]
    fn string_literals_unescape() {
        assert_eq!(
            decode_python_string_literal(b"'a\\nb\\x41\\101'").unwrap(),
            b"a\nbAA"
        );
        assert!(decode_python_string_literal(b"abc").is_none());
        assert_eq!(decode_raw_unicode_escape(b"caf\\u00e9"), "café");
    }
}
