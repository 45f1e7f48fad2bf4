//! The values a pickle decodes to, stored in one arena (`Document`).
//!
//! Why an arena of 8-byte handles: a 1M-op MemoryTracker file holds ~3M tuples and ~4M memo
//! entries, and a 1M-event allocator snapshot ~1.5M small dicts. A `Value` is a NaN-boxed `u64`
//! (a plain `f64`, or a tag and a 47-bit payload inside the negative quiet-NaN space), and
//! containers are spans of one shared item pool, so memory stays a small multiple of the file
//! and objects shared through the pickle memo stay shared: a handle is copied, never the object.

use std::collections::HashMap;

/// A handle to one decoded value. Cheap to copy; resolve it with [`Document::view`].
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Value(u64);

const BOX_PREFIX: u64 = 0x1FFF; // top 13 bits of a boxed value
const TAG_SHIFT: u32 = 47;
const PAYLOAD_MASK: u64 = (1 << TAG_SHIFT) - 1;
const INLINE_INT_MIN: i64 = -(1 << 46);
const INLINE_INT_MAX: i64 = (1 << 46) - 1;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
enum Tag {
    None = 0,
    False = 1,
    True = 2,
    Int = 3,
    WideInt = 4,
    BigInt = 5,
    Str = 6,
    Bytes = 7,
    Tuple = 8,
    List = 9,
    Dict = 10,
    Set = 11,
    Global = 12,
    Object = 13,
}

impl Tag {
    fn from_bits(bits: u64) -> Tag {
        match bits {
            0 => Tag::None,
            1 => Tag::False,
            2 => Tag::True,
            3 => Tag::Int,
            4 => Tag::WideInt,
            5 => Tag::BigInt,
            6 => Tag::Str,
            7 => Tag::Bytes,
            8 => Tag::Tuple,
            9 => Tag::List,
            10 => Tag::Dict,
            11 => Tag::Set,
            12 => Tag::Global,
            _ => Tag::Object,
        }
    }
}

impl Value {
    pub const NONE: Value = Value::boxed(Tag::None, 0);
    pub const TRUE: Value = Value::boxed(Tag::True, 0);
    pub const FALSE: Value = Value::boxed(Tag::False, 0);

    const fn boxed(tag: Tag, payload: u64) -> Value {
        Value((BOX_PREFIX << 51) | ((tag as u64) << TAG_SHIFT) | (payload & PAYLOAD_MASK))
    }

    pub(crate) fn float(f: f64) -> Value {
        // Every NaN becomes the one positive quiet NaN, which lies outside the boxed space.
        if f.is_nan() {
            Value(f64::NAN.to_bits())
        } else {
            Value(f.to_bits())
        }
    }

    fn is_boxed(self) -> bool {
        (self.0 >> 51) == BOX_PREFIX
    }

    fn tag(self) -> Option<Tag> {
        self.is_boxed()
            .then(|| Tag::from_bits((self.0 >> TAG_SHIFT) & 0xF))
    }

    fn payload(self) -> u64 {
        self.0 & PAYLOAD_MASK
    }

    fn index(self) -> usize {
        self.payload() as usize
    }

    /// The container id of a tuple, list, dict or set.
    pub(crate) fn container_id(self) -> Option<usize> {
        match self.tag() {
            Some(Tag::Tuple | Tag::List | Tag::Dict | Tag::Set) => Some(self.index()),
            _ => None,
        }
    }

    pub(crate) fn is_dict(self) -> bool {
        self.tag() == Some(Tag::Dict)
    }

    pub(crate) fn is_list(self) -> bool {
        self.tag() == Some(Tag::List)
    }

    pub(crate) fn is_set(self) -> bool {
        self.tag() == Some(Tag::Set)
    }

    pub(crate) fn object_id(self) -> Option<usize> {
        (self.tag() == Some(Tag::Object)).then(|| self.index())
    }
}

impl std::fmt::Debug for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.tag() {
            None => write!(f, "Float({})", f64::from_bits(self.0)),
            Some(tag) => write!(f, "{:?}#{}", tag, self.payload()),
        }
    }
}

/// How an opaque object came to be in the file. Nothing is ever called: the callable and its
/// arguments are kept as data so that a reader can tell what the file asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectKind {
    /// `REDUCE`: callable(*args)
    Reduce,
    /// `NEWOBJ` / `NEWOBJ_EX`: cls.__new__(cls, *args)
    NewObj,
    /// `INST` / `OBJ` (protocol 0/1 class instances)
    Inst,
    /// `PERSID` / `BINPERSID`: a reference the pickler kept outside the file (torch storages)
    PersistentId,
    /// `EXT1/2/4`: an entry of the copyreg extension registry
    Extension,
}

#[derive(Clone, Debug)]
pub struct Object {
    pub kind: ObjectKind,
    pub callable: Value,
    pub args: Value,
    /// What `BUILD` gave it (`__setstate__` argument), or None.
    pub state: Value,
    /// Items that `SETITEMS`/`APPENDS` added to it (a dict or list), or None.
    pub items: Value,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Span {
    pub start: u32,
    pub len: u32,
    pub cap: u32,
    /// Nesting depth of containers below this one (0 for a container of scalars).
    pub depth: u16,
}

/// A decoded pickle: the root value and the arena that every handle points into.
#[derive(Default)]
pub struct Document {
    pub(crate) root: Option<Value>,
    text: String,
    text_ends: Vec<u64>,
    bytes: Vec<u8>,
    bytes_ends: Vec<u64>,
    wide_ints: Vec<i64>,
    big_ints: Vec<Vec<u8>>,
    pub(crate) items: Vec<Value>,
    pub(crate) spans: Vec<Span>,
    globals: Vec<(Value, Value)>,
    pub(crate) objects: Vec<Object>,
    global_cache: HashMap<(String, String), Value>,
}

/// A resolved value, borrowing from its [`Document`].
#[derive(Clone, Copy, Debug)]
pub enum View<'d> {
    None,
    Bool(bool),
    Int(i64),
    /// An integer wider than 64 bits: little-endian two's complement bytes.
    BigInt(&'d [u8]),
    Float(f64),
    Str(&'d str),
    Bytes(&'d [u8]),
    Tuple(&'d [Value]),
    List(&'d [Value]),
    /// Keys and values interleaved: `[k0, v0, k1, v1, ...]`.
    Dict(&'d [Value]),
    Set(&'d [Value]),
    Global {
        module: &'d str,
        name: &'d str,
    },
    Object(&'d Object),
}

impl Document {
    pub fn root(&self) -> Value {
        self.root.unwrap_or(Value::NONE)
    }

    pub fn view(&self, v: Value) -> View<'_> {
        let Some(tag) = v.tag() else {
            return View::Float(f64::from_bits(v.0));
        };
        let i = v.index();
        match tag {
            Tag::None => View::None,
            Tag::False => View::Bool(false),
            Tag::True => View::Bool(true),
            Tag::Int => {
                // sign-extend the 47-bit payload
                let raw = v.payload() as i64;
                View::Int((raw << (64 - TAG_SHIFT)) >> (64 - TAG_SHIFT))
            }
            Tag::WideInt => View::Int(self.wide_ints[i]),
            Tag::BigInt => View::BigInt(&self.big_ints[i]),
            Tag::Str => View::Str(self.text_at(i)),
            Tag::Bytes => View::Bytes(self.bytes_at(i)),
            Tag::Tuple => View::Tuple(self.span_items(i)),
            Tag::List => View::List(self.span_items(i)),
            Tag::Dict => View::Dict(self.span_items(i)),
            Tag::Set => View::Set(self.span_items(i)),
            Tag::Global => {
                let (m, n) = self.globals[i];
                View::Global {
                    module: self.as_str(m).unwrap_or(""),
                    name: self.as_str(n).unwrap_or(""),
                }
            }
            Tag::Object => View::Object(&self.objects[i]),
        }
    }

    fn text_at(&self, i: usize) -> &str {
        let start = if i == 0 {
            0
        } else {
            self.text_ends[i - 1] as usize
        };
        &self.text[start..self.text_ends[i] as usize]
    }

    fn bytes_at(&self, i: usize) -> &[u8] {
        let start = if i == 0 {
            0
        } else {
            self.bytes_ends[i - 1] as usize
        };
        &self.bytes[start..self.bytes_ends[i] as usize]
    }

    fn span_items(&self, i: usize) -> &[Value] {
        let s = self.spans[i];
        &self.items[s.start as usize..(s.start + s.len) as usize]
    }

    // ---- typed accessors used by the formats layer ----

    pub fn as_str(&self, v: Value) -> Option<&str> {
        match v.tag() {
            Some(Tag::Str) => Some(self.text_at(v.index())),
            _ => None,
        }
    }

    pub fn as_int(&self, v: Value) -> Option<i64> {
        match self.view(v) {
            View::Int(i) => Some(i),
            View::Bool(b) => Some(b as i64),
            _ => None,
        }
    }

    /// An int or a float as f64 (big ints are rounded).
    pub fn as_f64(&self, v: Value) -> Option<f64> {
        match self.view(v) {
            View::Float(f) => Some(f),
            View::Int(i) => Some(i as f64),
            View::BigInt(b) => Some(big_int_to_f64(b)),
            View::Bool(b) => Some(b as i64 as f64),
            _ => None,
        }
    }

    pub fn as_bool(&self, v: Value) -> Option<bool> {
        match self.view(v) {
            View::Bool(b) => Some(b),
            View::Int(i) => Some(i != 0),
            _ => None,
        }
    }

    pub fn is_none(&self, v: Value) -> bool {
        v == Value::NONE
    }

    /// The items of a tuple or a list.
    pub fn as_seq(&self, v: Value) -> Option<&[Value]> {
        match self.view(v) {
            View::Tuple(s) | View::List(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_dict(&self, v: Value) -> Option<Dict<'_>> {
        match self.view(v) {
            View::Dict(items) => Some(Dict { doc: self, items }),
            _ => None,
        }
    }

    /// A short name of the value's type, as Python would say it, for error messages.
    pub fn type_name(&self, v: Value) -> &'static str {
        match self.view(v) {
            View::None => "None",
            View::Bool(_) => "bool",
            View::Int(_) | View::BigInt(_) => "int",
            View::Float(_) => "float",
            View::Str(_) => "str",
            View::Bytes(_) => "bytes",
            View::Tuple(_) => "tuple",
            View::List(_) => "list",
            View::Dict(_) => "dict",
            View::Set(_) => "set",
            View::Global { .. } => "global",
            View::Object(_) => "object",
        }
    }

    // ---- construction, used by the reader ----

    pub(crate) fn push_str(&mut self, s: &str) -> Value {
        self.text.push_str(s);
        self.text_ends.push(self.text.len() as u64);
        Value::boxed(Tag::Str, (self.text_ends.len() - 1) as u64)
    }

    pub(crate) fn push_bytes(&mut self, b: &[u8]) -> Value {
        self.bytes.extend_from_slice(b);
        self.bytes_ends.push(self.bytes.len() as u64);
        Value::boxed(Tag::Bytes, (self.bytes_ends.len() - 1) as u64)
    }

    pub(crate) fn int(&mut self, i: i64) -> Value {
        if (INLINE_INT_MIN..=INLINE_INT_MAX).contains(&i) {
            Value::boxed(Tag::Int, i as u64)
        } else {
            self.wide_ints.push(i);
            Value::boxed(Tag::WideInt, (self.wide_ints.len() - 1) as u64)
        }
    }

    /// An integer from little-endian two's complement bytes (LONG1 / LONG4).
    pub(crate) fn int_from_le(&mut self, bytes: &[u8]) -> Value {
        if bytes.is_empty() {
            return self.int(0);
        }
        if bytes.len() <= 8 {
            let negative = bytes[bytes.len() - 1] & 0x80 != 0;
            let mut buf = if negative { [0xFFu8; 8] } else { [0u8; 8] };
            buf[..bytes.len()].copy_from_slice(bytes);
            return self.int(i64::from_le_bytes(buf));
        }
        self.big_ints.push(bytes.to_vec());
        Value::boxed(Tag::BigInt, (self.big_ints.len() - 1) as u64)
    }

    pub(crate) fn global(&mut self, module: &str, name: &str) -> Value {
        // Files name the same global many times (every tensor rebuild); keep one copy.
        if let Some(v) = self
            .global_cache
            .get(&(module.to_string(), name.to_string()))
        {
            return *v;
        }
        let m = self.push_str(module);
        let n = self.push_str(name);
        self.globals.push((m, n));
        let v = Value::boxed(Tag::Global, (self.globals.len() - 1) as u64);
        self.global_cache
            .insert((module.to_string(), name.to_string()), v);
        v
    }

    pub(crate) fn object(&mut self, kind: ObjectKind, callable: Value, args: Value) -> Value {
        self.objects.push(Object {
            kind,
            callable,
            args,
            state: Value::NONE,
            items: Value::NONE,
        });
        Value::boxed(Tag::Object, (self.objects.len() - 1) as u64)
    }

    pub(crate) fn new_container(&mut self, kind: ContainerKind) -> Value {
        self.spans.push(Span {
            start: self.items.len() as u32,
            len: 0,
            cap: 0,
            depth: 0,
        });
        let id = (self.spans.len() - 1) as u64;
        Value::boxed(kind.tag(), id)
    }

    /// Depth of `v` as a container (0 for scalars and empty containers' contents).
    pub(crate) fn depth_of(&self, v: Value) -> u16 {
        match v.container_id() {
            Some(id) => self.spans[id].depth.saturating_add(1),
            None => 0,
        }
    }
}

#[derive(Clone, Copy)]
pub(crate) enum ContainerKind {
    Tuple,
    List,
    Dict,
    Set,
}

impl ContainerKind {
    fn tag(self) -> Tag {
        match self {
            ContainerKind::Tuple => Tag::Tuple,
            ContainerKind::List => Tag::List,
            ContainerKind::Dict => Tag::Dict,
            ContainerKind::Set => Tag::Set,
        }
    }
}

/// A dict view with lookups by string key (linear: the dicts looked up by key are small).
#[derive(Clone, Copy)]
pub struct Dict<'d> {
    doc: &'d Document,
    items: &'d [Value],
}

impl<'d> Dict<'d> {
    pub fn len(&self) -> usize {
        self.items.len() / 2
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The value under a string key; the last one wins, as in Python.
    pub fn get(&self, key: &str) -> Option<Value> {
        self.iter()
            .filter(|(k, _)| self.doc.as_str(*k) == Some(key))
            .map(|(_, v)| v)
            .last()
    }

    pub fn iter(&self) -> impl Iterator<Item = (Value, Value)> + 'd {
        self.items.chunks_exact(2).map(|kv| (kv[0], kv[1]))
    }
}

/// An int wider than 64 bits, as the nearest f64.
pub fn big_int_to_f64(le: &[u8]) -> f64 {
    let negative = le.last().is_some_and(|b| b & 0x80 != 0);
    // magnitude of a two's complement number: invert and add one when negative
    let mut mag: Vec<u8> = le.to_vec();
    if negative {
        let mut carry = 1u16;
        for b in mag.iter_mut() {
            let x = (!*b) as u16 + carry;
            *b = x as u8;
            carry = x >> 8;
        }
    }
    let v = mag
        .iter()
        .rev()
        .fold(0.0f64, |acc, &b| acc * 256.0 + b as f64);
    if negative {
        -v
    } else {
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_and_ints_round_trip_through_handles() {
        let mut d = Document::default();
        for f in [
            0.0,
            -0.0,
            1.5,
            -1e300,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::MIN_POSITIVE,
        ] {
            let v = Value::float(f);
            assert!(matches!(d.view(v), View::Float(g) if g.to_bits() == f.to_bits()));
        }
        assert!(matches!(d.view(Value::float(f64::NAN)), View::Float(g) if g.is_nan()));
        for i in [
            0,
            1,
            -1,
            INLINE_INT_MAX,
            INLINE_INT_MIN,
            i64::MAX,
            i64::MIN,
            0x7F00_0000_0000,
        ] {
            let v = d.int(i);
            assert_eq!(d.as_int(v), Some(i));
        }
        let v = d.int_from_le(&[0xff, 0xff]);
        assert_eq!(d.as_int(v), Some(-1));
        let big = d.int_from_le(&[0, 0, 0, 0, 0, 0, 0, 0, 1]);
        assert_eq!(d.as_f64(big), Some(2f64.powi(64)));
    }

    #[test]
    fn strings_are_kept_apart() {
        let mut d = Document::default();
        let a = d.push_str("abc");
        let b = d.push_str("");
        let c = d.push_str("é");
        assert_eq!(d.as_str(a), Some("abc"));
        assert_eq!(d.as_str(b), Some(""));
        assert_eq!(d.as_str(c), Some("é"));
    }
}
