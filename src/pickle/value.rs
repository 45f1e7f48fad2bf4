//! The values a pickle decodes to, stored in one arena (`Document`).
//!
//! Why an arena of 8-byte handles: a 1M-op MemoryTracker file holds ~3M tuples and ~4M memo
//! entries, and a 1M-event allocator snapshot ~1.5M small dicts. A `Value` is a NaN-boxed `u64`
//! (a plain `f64`, or a tag and a 47-bit payload inside the negative quiet-NaN space), and
//! containers are spans of one shared item pool, so memory stays a small multiple of the file
//! and objects shared through the pickle memo stay shared: a handle is copied, never the object.

use std::collections::HashMap;

use super::error::LimitError;

/// A handle to one decoded value. Cheap to copy; resolve it with [`Document::view`].
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Value(u64);

const BOX_PREFIX: u64 = 0x1FFF; // top 13 bits of a boxed value
const TAG_SHIFT: u32 = 47;
const PAYLOAD_MASK: u64 = (1 << TAG_SHIFT) - 1;
const INLINE_INT_MIN: i64 = -(1 << 46);
const INLINE_INT_MAX: i64 = (1 << 46) - 1;
/// Little-endian two's complement of 0..=8 bytes (LONG1 as Python writes it) as an i64.
#[inline]
pub(crate) fn int_from_short_le(bytes: &[u8]) -> i64 {
    debug_assert!(bytes.len() <= 8);
    if bytes.is_empty() {
        return 0;
    }
    // byte by byte, not a copy into a buffer: a variable-length memcpy followed by an 8-byte
    // load stalls on store forwarding, and every address in a snapshot is read here
    let mut v = 0u64;
    for (i, &b) in bytes.iter().enumerate() {
        v |= (b as u64) << (8 * i);
    }
    let unused = 64 - 8 * bytes.len() as u32;
    ((v << unused) as i64) >> unused
}

/// [`int_from_short_le`] of the first `len` (0..=8, at most `bytes.len()`) bytes of `bytes`.
/// Where 8 bytes follow (nearly always, in a file) one 8-byte load of them where they lie,
/// shifted: a byte at a time it was 2% of the instructions of a reading (every address and
/// time of a trace is a LONG1).
#[inline(always)]
pub(crate) fn int_from_le_prefix(bytes: &[u8], len: usize) -> i64 {
    debug_assert!(len <= 8 && len <= bytes.len());
    match bytes.first_chunk::<8>() {
        Some(word) if len > 0 => {
            let unused = 64 - 8 * len as u32;
            ((u64::from_le_bytes(*word) << unused) as i64) >> unused
        }
        _ => int_from_short_le(&bytes[..len]),
    }
}

/// What `depth_of` says of a taken value (one a `Divert` reader kept to itself): nothing of it
/// nests in the document.
pub(crate) const TAKEN_DEPTH: u16 = 9;

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
    /// A tuple of 1..=15 scalars, items inline in the pool: payload = offset << 4 | len.
    /// MemoryTracker files hold millions of (name, MiB) pairs; this saves each its span.
    ScalarTuple = 14,
    /// A value a `Divert` reader kept to itself instead of the document: payload = its handle.
    /// (`Value::UNSET` has this tag too, with an all-ones payload no handle reaches.)
    Taken = 15,
}

impl Tag {
    #[inline]
    fn from_bits(bits: u64) -> Tag {
        const TAGS: [Tag; 16] = [
            Tag::None,
            Tag::False,
            Tag::True,
            Tag::Int,
            Tag::WideInt,
            Tag::BigInt,
            Tag::Str,
            Tag::Bytes,
            Tag::Tuple,
            Tag::List,
            Tag::Dict,
            Tag::Set,
            Tag::Global,
            Tag::Object,
            Tag::ScalarTuple,
            Tag::Taken,
        ];
        TAGS[(bits & 0xF) as usize]
    }
}

impl Value {
    pub const NONE: Value = Value::boxed(Tag::None, 0);
    pub const TRUE: Value = Value::boxed(Tag::True, 0);
    pub const FALSE: Value = Value::boxed(Tag::False, 0);
    /// Never a decoded value: marks empty memo slots inside the reader.
    pub(crate) const UNSET: Value = Value(u64::MAX);

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

    /// The 47-bit payload, sign-extended.
    fn inline_int(self) -> i64 {
        ((self.payload() as i64) << (64 - TAG_SHIFT)) >> (64 - TAG_SHIFT)
    }

    /// Not a container: nothing nests below it.
    #[inline]
    pub(crate) fn is_scalar(self) -> bool {
        // tags 8..=11 are containers, 14 an inline tuple, 15 a value a divert kept
        let tag = (self.0 >> TAG_SHIFT) & 0xF;
        !self.is_boxed() || !((8..=11).contains(&tag) || tag >= 14)
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

    pub(crate) fn taken(handle: u64) -> Value {
        Value::boxed(Tag::Taken, handle)
    }

    #[inline]
    pub(crate) fn is_taken(self) -> bool {
        self != Value::UNSET && self.tag() == Some(Tag::Taken)
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

/// Where a container's items are. Most containers are written in one batch (a tuple, an event
/// dict) and sit contiguously in the shared pool; one that grows again after other values were
/// written (a big dict, batched 1000 items per SETITEMS) moves to a vector of its own, so
/// growing never leaves copies behind in the pool. A small dict read in one step (see
/// `reader::flat_dict`) stores only its values, behind the id of its key list ("shape"): the
/// 1.5M event dicts of a snapshot share six keys, which would otherwise be half their size.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Span {
    /// Pool offset, or index into `Document::own` when `Owned`.
    pub start: u32,
    /// Items: values only when `Shaped`, keys and values interleaved for other dicts.
    pub len: u32,
    /// Nesting depth of containers below this one (0 for a container of scalars).
    pub depth: u16,
    pub storage: Storage,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Storage {
    Pool,
    Owned,
    /// In the pool: the shape id (as raw bits), then `len` values.
    Shaped,
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
    pub(crate) own: Vec<Vec<Value>>,
    pub(crate) spans: Vec<Span>,
    /// Key lists of shaped dicts, and each list's id.
    shapes: Vec<Vec<Value>>,
    shape_ids: rustc_hash::FxHashMap<Vec<Value>, u32>,
    /// The shape used last: consecutive dicts (trace events) nearly always share it.
    last_shape: u32,
    globals: Vec<(Value, Value)>,
    pub(crate) objects: Vec<Object>,
    global_cache: HashMap<(String, String), Value>,
    pub(crate) taken_reused: bool,
    /// The length of the file decoded, 0 when not known: what bounds how many distinct values
    /// a reader following shared references may honestly meet.
    source_len: usize,
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
    Dict(Dict<'d>),
    Set(&'d [Value]),
    Global {
        module: &'d str,
        name: &'d str,
    },
    Object(&'d Object),
    /// A value a [`Divert`](super::Divert) reader kept to itself: its handle there.
    Taken(u64),
}

impl Document {
    /// An empty document with room reserved for what a file of `file_len` bytes typically
    /// decodes to (address space only until written), so the big buffers are not copied as
    /// they grow.
    pub(crate) fn with_room_for(file_len: usize) -> Document {
        let mut d = Document {
            source_len: file_len,
            ..Document::default()
        };
        let _ = d.items.try_reserve(file_len / 4);
        let _ = d.text.try_reserve(file_len / 2);
        let _ = d.text_ends.try_reserve(file_len / 32);
        let _ = d.spans.try_reserve(file_len / 32);
        d
    }

    /// The length of the file this document was decoded from (0 when not known).
    pub fn source_len(&self) -> usize {
        self.source_len
    }

    pub fn root(&self) -> Value {
        self.root.unwrap_or(Value::NONE)
    }

    /// The handle of a value a [`Divert`](super::Divert) reader kept to itself.
    #[inline]
    pub fn as_taken(&self, v: Value) -> Option<u64> {
        v.is_taken().then(|| v.payload())
    }

    /// Whether a taken value was referenced outside the reader that kept it (memo GET, DUP,
    /// inside another dict): then the document is not what the file says.
    pub fn taken_reused(&self) -> bool {
        self.taken_reused
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
            Tag::Int => View::Int(v.inline_int()),
            Tag::WideInt => View::Int(self.wide_ints[i]),
            Tag::BigInt => View::BigInt(&self.big_ints[i]),
            Tag::Str => View::Str(self.text_at(i)),
            Tag::Bytes => View::Bytes(self.bytes_at(i)),
            Tag::Tuple => View::Tuple(self.span_items(i)),
            Tag::ScalarTuple => View::Tuple(self.scalar_tuple(i)),
            Tag::List => View::List(self.span_items(i)),
            Tag::Dict => View::Dict(self.dict_at(i)),
            Tag::Set => View::Set(self.span_items(i)),
            Tag::Global => {
                let (m, n) = self.globals[i];
                View::Global {
                    module: self.as_str(m).unwrap_or(""),
                    name: self.as_str(n).unwrap_or(""),
                }
            }
            Tag::Object => View::Object(&self.objects[i]),
            Tag::Taken => View::Taken(v.payload()),
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
        let (start, len) = (s.start as usize, s.len as usize);
        match s.storage {
            Storage::Owned => &self.own[start],
            Storage::Pool => &self.items[start..start + len],
            Storage::Shaped => &self.items[start + 1..start + 1 + len],
        }
    }

    fn dict_at(&self, i: usize) -> Dict<'_> {
        let s = self.spans[i];
        let keys = (s.storage == Storage::Shaped)
            .then(|| self.shapes[self.items[s.start as usize].0 as usize].as_slice());
        Dict {
            doc: self,
            keys,
            items: self.span_items(i),
        }
    }

    // ---- typed accessors used by the formats layer ----

    pub fn is_str(&self, v: Value) -> bool {
        v.tag() == Some(Tag::Str)
    }

    pub fn as_str(&self, v: Value) -> Option<&str> {
        match v.tag() {
            Some(Tag::Str) => Some(self.text_at(v.index())),
            _ => None,
        }
    }

    /// Byte range of a string in [`Document::text`]: lets a caller keep strings without
    /// copying them, by taking the text buffer once it is done with the document.
    pub fn str_range(&self, v: Value) -> Option<std::ops::Range<usize>> {
        match v.tag() {
            Some(Tag::Str) => {
                let i = v.index();
                let start = if i == 0 {
                    0
                } else {
                    self.text_ends[i - 1] as usize
                };
                Some(start..self.text_ends[i] as usize)
            }
            _ => None,
        }
    }

    /// Every string of the document, concatenated (see [`Document::str_range`]).
    pub fn into_text(self) -> String {
        self.text
    }

    // The accessors below test the tag directly instead of building a `View`: the formats
    // layer calls them millions of times on large files.

    pub fn as_int(&self, v: Value) -> Option<i64> {
        match v.tag() {
            Some(Tag::Int) => Some(v.inline_int()),
            Some(Tag::WideInt) => Some(self.wide_ints[v.index()]),
            Some(Tag::True) => Some(1),
            Some(Tag::False) => Some(0),
            _ => None,
        }
    }

    /// An int or a float as f64 (big ints are rounded).
    pub fn as_f64(&self, v: Value) -> Option<f64> {
        match v.tag() {
            None => Some(f64::from_bits(v.0)),
            Some(Tag::BigInt) => Some(big_int_to_f64(&self.big_ints[v.index()])),
            _ => self.as_int(v).map(|i| i as f64),
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
        match v.tag() {
            Some(Tag::ScalarTuple) => Some(self.scalar_tuple(v.index())),
            Some(Tag::Tuple | Tag::List) => Some(self.span_items(v.index())),
            _ => None,
        }
    }

    pub fn as_dict(&self, v: Value) -> Option<Dict<'_>> {
        match v.tag() {
            Some(Tag::Dict) => Some(self.dict_at(v.index())),
            _ => None,
        }
    }

    fn scalar_tuple(&self, payload: usize) -> &[Value] {
        let (start, len) = (payload >> 4, payload & 0xF);
        &self.items[start..start + len]
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
            View::Dict(_) | View::Taken(_) => "dict",
            View::Set(_) => "set",
            View::Global { .. } => "global",
            View::Object(_) => "object",
        }
    }

    /// `type_name` with its article, for sentences: "an int", "a dict".
    pub fn type_name_with_article(&self, v: Value) -> String {
        let name = self.type_name(v);
        let article = if name.starts_with(['a', 'e', 'i', 'o', 'u']) {
            "an"
        } else {
            "a"
        };
        format!("{article} {name}")
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
    #[inline]
    pub(crate) fn int_from_le(&mut self, bytes: &[u8]) -> Value {
        if bytes.is_empty() {
            return self.int(0);
        }
        if bytes.len() <= 8 {
            return self.int(int_from_short_le(bytes));
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
            start: 0,
            len: 0,
            depth: 0,
            storage: Storage::Pool,
        });
        let id = (self.spans.len() - 1) as u64;
        Value::boxed(kind.tag(), id)
    }

    /// Depth of `v` as a container (0 for scalars and empty containers' contents).
    #[inline]
    pub(crate) fn depth_of(&self, v: Value) -> u16 {
        if v.is_scalar() {
            return 0;
        }
        match v.container_id() {
            Some(id) => self.spans[id].depth.saturating_add(1),
            None if v.tag() == Some(Tag::ScalarTuple) => 1,
            None if v.is_taken() => TAKEN_DEPTH,
            None => 0,
        }
    }

    /// Append `new` to a container: in place at the end of the pool when the container is
    /// there (or still empty), else in the container's own vector (see `Span`).
    pub(crate) fn extend(&mut self, c: Value, new: &[Value]) -> Result<(), LimitError> {
        if new.is_empty() {
            return Ok(());
        }
        let id = c.container_id().expect("extend on a container");
        let mut span = self.spans[id];
        for &v in new {
            if !v.is_scalar() {
                span.depth = span.depth.max(self.depth_of(v));
            }
        }
        if span.depth > super::MAX_DEPTH {
            return Err(LimitError::TooDeep);
        }
        if span.storage == Storage::Shaped {
            // more items after all: keys and values interleaved, in a vector of its own
            let start = span.start as usize;
            let keys = &self.shapes[self.items[start].0 as usize];
            let values = &self.items[start + 1..start + 1 + span.len as usize];
            let mut own = Vec::with_capacity((values.len() * 2 + new.len()) * 2);
            for (k, v) in keys.iter().zip(values) {
                own.push(*k);
                own.push(*v);
            }
            span = Span {
                start: self.own.len() as u32,
                len: own.len() as u32,
                depth: span.depth,
                storage: Storage::Owned,
            };
            self.own.push(own);
        }
        let pool = &mut self.items;
        if span.storage == Storage::Owned {
            self.own[span.start as usize].extend_from_slice(new);
        } else if span.len == 0 || (span.start + span.len) as usize == pool.len() {
            if span.len == 0 {
                span.start = pool.len() as u32;
            }
            pool.extend_from_slice(new);
            if pool.len() > u32::MAX as usize {
                return Err(LimitError::TooManyValues);
            }
        } else {
            let (start, len) = (span.start as usize, span.len as usize);
            let mut own = Vec::with_capacity((len + new.len()) * 2);
            own.extend_from_slice(&pool[start..start + len]);
            own.extend_from_slice(new);
            span.start = self.own.len() as u32;
            span.storage = Storage::Owned;
            self.own.push(own);
        }
        span.len += new.len() as u32;
        self.spans[id] = span;
        Ok(())
    }

    /// A new dict of `keys` and `values` (as many of each), its keys stored once per distinct
    /// key list. Further items turn it into an ordinary dict (see `extend`).
    /// The id of a key list, registering it the first time.
    #[inline]
    pub(crate) fn shape_of(&mut self, keys: &[Value]) -> u32 {
        let shape = match self.shapes.get(self.last_shape as usize) {
            Some(last) if last.as_slice() == keys => self.last_shape,
            _ => match self.shape_ids.get(keys) {
                Some(&id) => id,
                None => {
                    let id = self.shapes.len() as u32;
                    self.shapes.push(keys.to_vec());
                    self.shape_ids.insert(keys.to_vec(), id);
                    id
                }
            },
        };
        self.last_shape = shape;
        shape
    }

    /// A dict of the key list `shape` (from `shape_of`) and `values`.
    pub(crate) fn shaped_dict(
        &mut self,
        shape: u32,
        values: &[Value],
    ) -> Result<Value, LimitError> {
        let keys = &self.shapes[shape as usize];
        let mut depth = 0;
        for &v in keys.iter().chain(values) {
            if !v.is_scalar() {
                depth = depth.max(self.depth_of(v));
            }
        }
        if depth > super::MAX_DEPTH {
            return Err(LimitError::TooDeep);
        }
        let start = self.items.len();
        if start + 1 + values.len() > u32::MAX as usize {
            return Err(LimitError::TooManyValues);
        }
        self.items.push(Value(shape as u64));
        self.items.extend_from_slice(values);
        self.spans.push(Span {
            start: start as u32,
            len: values.len() as u32,
            depth,
            storage: Storage::Shaped,
        });
        Ok(Value::boxed(Tag::Dict, (self.spans.len() - 1) as u64))
    }

    /// A tuple of `items`, inline when they are few scalars, else as a container.
    pub(crate) fn push_scalar_tuple(&mut self, items: &[Value]) -> Option<Value> {
        if items.is_empty() || items.len() > 15 || !items.iter().all(|v| v.is_scalar()) {
            return None;
        }
        let start = self.items.len() as u64;
        // element by element: for two or three items this beats a memcpy call
        for &v in items {
            self.items.push(v);
        }
        Some(Value::boxed(
            Tag::ScalarTuple,
            (start << 4) | items.len() as u64,
        ))
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
    /// The shared key list of a shaped dict (then `items` are its values), else None (then
    /// `items` are keys and values interleaved).
    keys: Option<&'d [Value]>,
    items: &'d [Value],
}

impl std::fmt::Debug for Dict<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<'d> Dict<'d> {
    pub fn len(&self) -> usize {
        match self.keys {
            Some(k) => k.len(),
            None => self.items.len() / 2,
        }
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

    /// For a dict read in one step (see `reader::flat_dict`): its key list, shared with every
    /// dict of the same keys (compare with `std::ptr::eq` to recognise the shape), and its
    /// values in the same order. None for other dicts.
    pub fn shaped(&self) -> Option<(&'d [Value], &'d [Value])> {
        self.keys.map(|k| (k, self.items))
    }

    pub fn iter(&self) -> DictIter<'d> {
        DictIter {
            keys: self.keys,
            items: self.items,
            next: 0,
        }
    }
}

/// The (key, value) pairs of a [`Dict`], in order.
pub struct DictIter<'d> {
    keys: Option<&'d [Value]>,
    items: &'d [Value],
    next: usize,
}

impl Iterator for DictIter<'_> {
    type Item = (Value, Value);

    #[inline]
    fn next(&mut self) -> Option<(Value, Value)> {
        let i = self.next;
        let pair = match self.keys {
            Some(keys) => (*keys.get(i)?, *self.items.get(i)?),
            None => (*self.items.get(2 * i)?, *self.items.get(2 * i + 1)?),
        };
        self.next += 1;
        Some(pair)
    }
}

/// An int stored wider than 64 bits (LONG1 writes 2^63 in 9 bytes) that fits in a u64.
pub fn big_int_to_u64(le: &[u8]) -> Option<u64> {
    let negative = le.last().is_some_and(|b| b & 0x80 != 0);
    if negative || le.iter().skip(8).any(|&b| b != 0) {
        return None;
    }
    Some(
        le.iter()
            .take(8)
            .rev()
            .fold(0u64, |acc, &b| acc << 8 | b as u64),
    )
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
    fn long1_read_from_a_word_is_python_s_twos_complement() {
        // (LONG1 bytes as Python's pickle writes them, then what follows in the file)
        let cases: [(&[u8], i64); 8] = [
            (&[], 0),
            (&[0x7f], 127),
            (&[0x80], -128),
            (&[0x00, 0x80], -32768),
            (&[0x00, 0x80, 0x00], 32768),
            (&[0x00, 0x3a, 0xdc, 0x87, 0x1e, 0x82, 0x00], 0x821e87dc3a00),
            (&[0xff; 7], -1),
            (&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f], i64::MAX),
        ];
        for (le, want) in cases {
            assert_eq!(int_from_short_le(le), want, "{le:?}");
            // the same bytes followed by others, and at the very end of the data
            let mut followed = le.to_vec();
            followed.extend_from_slice(&[0xa5; 9]);
            assert_eq!(int_from_le_prefix(&followed, le.len()), want, "{le:?}");
            assert_eq!(int_from_le_prefix(le, le.len()), want, "{le:?} at the end");
        }
    }

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
