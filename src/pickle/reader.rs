//! The pickle virtual machine, protocols 0–5, without ever calling anything.
//!
//! Globals become inert `Global` values; `REDUCE`/`NEWOBJ`/`INST`/`OBJ` become inert `Object`s
//! that keep their callable and arguments. The only constructions it understands are the ones
//! whose meaning is plain data: `collections.defaultdict` and `OrderedDict` (read as dicts),
//! `builtins.set`/`frozenset`, `bytearray` and `_codecs.encode` (how protocol 2 writes bytes).

use std::collections::HashMap;

use super::value::{ContainerKind, Document, ObjectKind, Span, Value, View};

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

/// Decode one pickle from `data`. Bytes after the `STOP` opcode are ignored, as `pickle.load`
/// ignores what follows in the stream.
pub fn parse(data: &[u8]) -> Result<Document> {
    parse_with_progress(data, &mut ())
}

pub fn parse_with_progress(data: &[u8], progress: &mut dyn Progress) -> Result<Document> {
    let mut m = Machine {
        data,
        pos: 0,
        op_start: 0,
        stack: Vec::with_capacity(64),
        marks: Vec::new(),
        memo: Vec::new(),
        memo_sparse: HashMap::new(),
        doc: Document::default(),
        scratch: Vec::new(),
    };
    m.run(progress)?;
    Ok(m.doc)
}

struct Machine<'a> {
    data: &'a [u8],
    pos: usize,
    op_start: usize,
    stack: Vec<Value>,
    marks: Vec<usize>,
    memo: Vec<Option<Value>>,
    memo_sparse: HashMap<u64, Value>,
    doc: Document,
    scratch: Vec<Value>,
}

const PROGRESS_STEP: usize = 16 << 20;

impl<'a> Machine<'a> {
    fn err<T>(&self, message: impl Into<String>) -> Result<T> {
        Err(PickleError {
            offset: self.op_start,
            message: message.into(),
        })
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let data: &'a [u8] = self.data;
        if n > data.len() - self.pos {
            return Err(PickleError {
                offset: self.op_start,
                message: format!(
                    "truncated: opcode needs {} more bytes but the file ends after {}",
                    n,
                    data.len() - self.pos
                ),
            });
        }
        let s = &data[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().unwrap()))
    }

    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }

    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }

    /// A declared length, checked against what is left of the file before anything is allocated.
    fn len(&mut self, declared: u64) -> Result<usize> {
        let left = (self.data.len() - self.pos) as u64;
        if declared > left {
            return self.err(format!(
                "declared length {declared} is larger than the {left} bytes left in the file"
            ));
        }
        Ok(declared as usize)
    }

    fn line(&mut self) -> Result<&'a [u8]> {
        let data: &'a [u8] = self.data;
        let rest = &data[self.pos..];
        match rest.iter().position(|&b| b == b'\n') {
            Some(n) => {
                self.pos += n + 1;
                Ok(&rest[..n])
            }
            None => self.err("truncated: a text argument has no terminating newline"),
        }
    }

    fn pop(&mut self) -> Result<Value> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return self.err("stack underflow: an opcode needs a value but the stack is empty");
        }
        Ok(self.stack.pop().unwrap())
    }

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

    fn memo_put(&mut self, id: u64, v: Value) {
        let len = self.memo.len() as u64;
        if id < len {
            self.memo[id as usize] = Some(v);
        } else if id < len + MEMO_DENSE_SLACK {
            self.memo.resize(id as usize, None);
            self.memo.push(Some(v));
        } else {
            self.memo_sparse.insert(id, v);
        }
    }

    fn memo_get(&mut self, id: u64) -> Result<()> {
        let v = match self.memo.get(id as usize) {
            Some(Some(v)) => Some(*v),
            _ => self.memo_sparse.get(&id).copied(),
        };
        match v {
            Some(v) => {
                self.stack.push(v);
                Ok(())
            }
            None => self.err(format!(
                "memo key {id} was never stored (a GET before its PUT)"
            )),
        }
    }

    fn new_container(&mut self, kind: ContainerKind, items: &[Value]) -> Result<Value> {
        let c = self.doc.new_container(kind);
        self.extend(c, items)?;
        Ok(c)
    }

    /// Append `new` to a container's span, relocating the span to the end of the pool (with room
    /// to double) when another container has been written after it.
    fn extend(&mut self, c: Value, new: &[Value]) -> Result<()> {
        if new.is_empty() {
            return Ok(());
        }
        let id = c.container_id().expect("extend on a container");
        let mut depth = self.doc.spans[id].depth;
        for &v in new {
            depth = depth.max(self.doc.depth_of(v));
        }
        if depth > MAX_DEPTH {
            return self.err(format!("containers nested more than {MAX_DEPTH} deep"));
        }
        let pool = &mut self.doc.items;
        let Span {
            start, len, cap, ..
        } = self.doc.spans[id];
        let (start, len, cap) = (start as usize, len as usize, cap as usize);
        let need = len + new.len();
        let (new_start, new_cap) = if need <= cap {
            pool[start + len..start + need].copy_from_slice(new);
            (start, cap)
        } else if start + cap == pool.len() {
            let fits = cap - len;
            pool[start + len..start + cap].copy_from_slice(&new[..fits]);
            pool.extend_from_slice(&new[fits..]);
            (start, need)
        } else {
            let new_start = pool.len();
            let new_cap = need.max(2 * len);
            pool.extend_from_within(start..start + len);
            pool.extend_from_slice(new);
            pool.resize(new_start + new_cap, Value::NONE);
            (new_start, new_cap)
        };
        if pool.len() > u32::MAX as usize {
            return self.err("more than 4 billion values: the file is too large to read");
        }
        self.doc.spans[id] = Span {
            start: new_start as u32,
            len: need as u32,
            cap: new_cap as u32,
            depth,
        };
        Ok(())
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

    fn run(&mut self, progress: &mut dyn Progress) -> Result<()> {
        let mut next_report = PROGRESS_STEP;
        loop {
            if self.pos >= next_report {
                progress.advanced(self.pos);
                next_report = self.pos + PROGRESS_STEP;
            }
            self.op_start = self.pos;
            if self.pos >= self.data.len() {
                if self.pos == 0 {
                    return self.err("empty file: no pickle data");
                }
                return self.err("truncated: the file ends before the pickle's STOP opcode");
            }
            let op = self.data[self.pos];
            self.pos += 1;
            match op {
                0x80 => {
                    let proto = self.u8()?;
                    if proto > 5 {
                        return self.err(format!(
                            "unsupported pickle protocol {proto} (0-5 are known)"
                        ));
                    }
                }
                0x95 => {
                    // FRAME: a length hint for buffered readers; the data follows inline.
                    let n = self.u64()?;
                    self.len(n)?;
                }
                b'.' => {
                    let v = self.pop()?;
                    self.doc.root = Some(v);
                    progress.advanced(self.pos);
                    return Ok(());
                }
                // ---- marks and stack ----
                b'(' => self.marks.push(self.stack.len()),
                b'0' => {
                    self.pop()?;
                }
                b'1' => {
                    self.pop_mark()?;
                }
                b'2' => {
                    let v = self.top()?;
                    self.stack.push(v);
                }
                // ---- scalars ----
                b'N' => self.stack.push(Value::NONE),
                0x88 => self.stack.push(Value::TRUE),
                0x89 => self.stack.push(Value::FALSE),
                b'J' => {
                    let i = self.u32()? as i32 as i64;
                    let v = self.doc.int(i);
                    self.stack.push(v);
                }
                b'K' => {
                    let i = self.u8()? as i64;
                    let v = self.doc.int(i);
                    self.stack.push(v);
                }
                b'M' => {
                    let i = self.u16()? as i64;
                    let v = self.doc.int(i);
                    self.stack.push(v);
                }
                0x8a => {
                    let n = self.u8()? as usize;
                    let b = self.take(n)?;
                    let v = self.doc.int_from_le(b);
                    self.stack.push(v);
                }
                0x8b => {
                    let n = self.u32()? as u64;
                    let n = self.len(n)?;
                    let b = self.take(n)?;
                    let v = self.doc.int_from_le(b);
                    self.stack.push(v);
                }
                b'I' => {
                    let line = self.line()?;
                    let v = match line {
                        b"01" => Value::TRUE,
                        b"00" => Value::FALSE,
                        _ => self.decimal_int(line)?,
                    };
                    self.stack.push(v);
                }
                b'L' => {
                    let line = self.line()?;
                    let digits = line.strip_suffix(b"L").unwrap_or(line);
                    let v = self.decimal_int(digits)?;
                    self.stack.push(v);
                }
                b'G' => {
                    let f = f64::from_be_bytes(self.take(8)?.try_into().unwrap());
                    self.stack.push(Value::float(f));
                }
                b'F' => {
                    let line = self.line()?;
                    let text = std::str::from_utf8(line).ok().map(str::trim);
                    match text.and_then(parse_python_float) {
                        Some(f) => self.stack.push(Value::float(f)),
                        None => return self.err("FLOAT: not a number"),
                    }
                }
                // ---- strings and bytes ----
                0x8c => {
                    let n = self.u8()? as usize;
                    let raw = self.take(n)?;
                    self.push_str_bytes(raw);
                }
                b'X' => {
                    let n = self.u32()? as u64;
                    let n = self.len(n)?;
                    let raw = self.take(n)?;
                    self.push_str_bytes(raw);
                }
                0x8d => {
                    let n = self.u64()?;
                    let n = self.len(n)?;
                    let raw = self.take(n)?;
                    self.push_str_bytes(raw);
                }
                b'V' => {
                    let line = self.line()?;
                    let s = decode_raw_unicode_escape(line);
                    let v = self.doc.push_str(&s);
                    self.stack.push(v);
                }
                b'S' => {
                    let line = self.line()?;
                    let Some(raw) = decode_python_string_literal(line) else {
                        return self.err("STRING: argument is not a quoted string literal");
                    };
                    // Python 3 decodes protocol-0 strings as ASCII by default; keep text as text.
                    self.push_str_bytes(&raw);
                }
                b'T' => {
                    let n = self.u32()? as i32;
                    if n < 0 {
                        return self.err("BINSTRING: negative length");
                    }
                    let n = self.len(n as u64)?;
                    let raw = self.take(n)?;
                    self.push_str_bytes(raw);
                }
                b'U' => {
                    let n = self.u8()? as usize;
                    let raw = self.take(n)?;
                    self.push_str_bytes(raw);
                }
                b'B' | 0x96 | 0x8e | b'C' => {
                    let n = match op {
                        b'C' => self.u8()? as u64,
                        b'B' => self.u32()? as u64,
                        _ => self.u64()?,
                    };
                    let n = self.len(n)?;
                    let raw = self.take(n)?;
                    let v = self.doc.push_bytes(raw);
                    self.stack.push(v);
                }
                0x97 => {
                    return self.err("NEXT_BUFFER: out-of-band buffers are not part of the file");
                }
                0x98 => {
                    self.top()?; // READONLY_BUFFER: a flag on the buffer above; nothing to do
                }
                // ---- containers ----
                b')' => {
                    let v = self.new_container(ContainerKind::Tuple, &[])?;
                    self.stack.push(v);
                }
                b't' => {
                    self.pop_mark()?;
                    let items = std::mem::take(&mut self.scratch);
                    let v = self.new_container(ContainerKind::Tuple, &items);
                    self.scratch = items;
                    self.stack.push(v?);
                }
                0x85..=0x87 => {
                    let n = (op - 0x84) as usize;
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
                b']' => {
                    let v = self.doc.new_container(ContainerKind::List);
                    self.stack.push(v);
                }
                b'l' => {
                    self.pop_mark()?;
                    let items = std::mem::take(&mut self.scratch);
                    let v = self.new_container(ContainerKind::List, &items);
                    self.scratch = items;
                    self.stack.push(v?);
                }
                b'}' => {
                    let v = self.doc.new_container(ContainerKind::Dict);
                    self.stack.push(v);
                }
                b'd' => {
                    self.pop_mark()?;
                    if self.scratch.len() % 2 != 0 {
                        return self.err("DICT: odd number of items after MARK");
                    }
                    let items = std::mem::take(&mut self.scratch);
                    let v = self.new_container(ContainerKind::Dict, &items);
                    self.scratch = items;
                    self.stack.push(v?);
                }
                0x8f => {
                    let v = self.doc.new_container(ContainerKind::Set);
                    self.stack.push(v);
                }
                0x91 => {
                    self.pop_mark()?;
                    let items = std::mem::take(&mut self.scratch);
                    let v = self.new_container(ContainerKind::Set, &items);
                    self.scratch = items;
                    self.stack.push(v?);
                }
                b'a' => {
                    let item = self.pop()?;
                    let target = self.top()?;
                    let list = self.items_target(target, false)?;
                    self.extend(list, &[item])?;
                }
                b'e' | 0x90 => {
                    self.pop_mark()?;
                    let target = self.top()?;
                    let list = self.items_target(target, false)?;
                    let items = std::mem::take(&mut self.scratch);
                    let r = self.extend(list, &items);
                    self.scratch = items;
                    r?;
                }
                b's' => {
                    let v = self.pop()?;
                    let k = self.pop()?;
                    let target = self.top()?;
                    let dict = self.items_target(target, true)?;
                    self.extend(dict, &[k, v])?;
                }
                b'u' => {
                    self.pop_mark()?;
                    if self.scratch.len() % 2 != 0 {
                        return self.err("SETITEMS: odd number of items after MARK");
                    }
                    let target = self.top()?;
                    let dict = self.items_target(target, true)?;
                    let items = std::mem::take(&mut self.scratch);
                    let r = self.extend(dict, &items);
                    self.scratch = items;
                    r?;
                }
                // ---- memo ----
                b'g' => {
                    let line = self.line()?;
                    let id = self.decimal_u64(line)?;
                    self.memo_get(id)?;
                }
                b'h' => {
                    let id = self.u8()? as u64;
                    self.memo_get(id)?;
                }
                b'j' => {
                    let id = self.u32()? as u64;
                    self.memo_get(id)?;
                }
                b'p' => {
                    let line = self.line()?;
                    let id = self.decimal_u64(line)?;
                    let v = self.top()?;
                    self.memo_put(id, v);
                }
                b'q' => {
                    let id = self.u8()? as u64;
                    let v = self.top()?;
                    self.memo_put(id, v);
                }
                b'r' => {
                    let id = self.u32()? as u64;
                    let v = self.top()?;
                    self.memo_put(id, v);
                }
                0x94 => {
                    let v = self.top()?;
                    let id = self.memo.len() as u64;
                    self.memo_put(id, v);
                }
                // ---- globals and objects: recorded, never called ----
                b'c' => {
                    let module = self.line()?;
                    let name = self.line()?;
                    let module = String::from_utf8_lossy(module).into_owned();
                    let name = String::from_utf8_lossy(name).into_owned();
                    let v = self.doc.global(&module, &name);
                    self.stack.push(v);
                }
                0x93 => {
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
                b'R' => {
                    let args = self.pop()?;
                    let callable = self.pop()?;
                    let v = self.reduce(callable, args)?;
                    self.stack.push(v);
                }
                0x81 => {
                    let args = self.pop()?;
                    let cls = self.pop()?;
                    let v = self.reduce_as(ObjectKind::NewObj, cls, args)?;
                    self.stack.push(v);
                }
                0x92 => {
                    let _kwargs = self.pop()?;
                    let args = self.pop()?;
                    let cls = self.pop()?;
                    let v = self.reduce_as(ObjectKind::NewObj, cls, args)?;
                    self.stack.push(v);
                }
                b'i' => {
                    let module = String::from_utf8_lossy(self.line()?).into_owned();
                    let name = String::from_utf8_lossy(self.line()?).into_owned();
                    self.pop_mark()?;
                    let items = std::mem::take(&mut self.scratch);
                    let args = self.new_container(ContainerKind::Tuple, &items);
                    self.scratch = items;
                    let cls = self.doc.global(&module, &name);
                    let v = self.doc.object(ObjectKind::Inst, cls, args?);
                    self.stack.push(v);
                }
                b'o' => {
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
                b'b' => {
                    let state = self.pop()?;
                    let target = self.top()?;
                    if let Some(oid) = target.object_id() {
                        self.doc.objects[oid].state = state;
                    }
                    // BUILD on a plain container (e.g. a dict subclass with __dict__) is ignored.
                }
                b'P' => {
                    let pid = String::from_utf8_lossy(self.line()?).into_owned();
                    let pid = self.doc.push_str(&pid);
                    let v = self.doc.object(ObjectKind::PersistentId, Value::NONE, pid);
                    self.stack.push(v);
                }
                b'Q' => {
                    let pid = self.pop()?;
                    let v = self.doc.object(ObjectKind::PersistentId, Value::NONE, pid);
                    self.stack.push(v);
                }
                0x82..=0x84 => {
                    let code = match op {
                        0x82 => self.u8()? as i64,
                        0x83 => self.u16()? as i64,
                        _ => self.u32()? as i64,
                    };
                    let code = self.doc.int(code);
                    let v = self.doc.object(ObjectKind::Extension, Value::NONE, code);
                    self.stack.push(v);
                }
                other => {
                    return self.err(format!(
                        "unknown opcode 0x{other:02x}; not a pickle, or a corrupt one"
                    ));
                }
            }
        }
    }

    fn reduce(&mut self, callable: Value, args: Value) -> Result<Value> {
        self.reduce_as(ObjectKind::Reduce, callable, args)
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

    fn decimal_u64(&self, line: &[u8]) -> Result<u64> {
        std::str::from_utf8(line)
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .map_or_else(|| self.err("memo key is not a decimal number"), Ok)
    }

    fn decimal_int(&mut self, line: &[u8]) -> Result<Value> {
        let Ok(text) = std::str::from_utf8(line) else {
            return self.err("INT/LONG: not a decimal number");
        };
        let text = text.trim();
        if let Ok(i) = text.parse::<i64>() {
            return Ok(self.doc.int(i));
        }
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

fn parse_python_float(s: &str) -> Option<f64> {
    match s {
        "inf" => Some(f64::INFINITY),
        "-inf" => Some(f64::NEG_INFINITY),
        "nan" => Some(f64::NAN),
        _ => s.parse().ok(),
    }
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
    fn string_literals_unescape() {
        assert_eq!(
            decode_python_string_literal(b"'a\\nb\\x41\\101'").unwrap(),
            b"a\nbAA"
        );
        assert!(decode_python_string_literal(b"abc").is_none());
        assert_eq!(decode_raw_unicode_escape(b"caf\\u00e9"), "café");
    }
}
