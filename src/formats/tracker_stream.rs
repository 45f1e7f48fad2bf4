//! MemoryTracker stats as `save_stats()` writes them, read straight from the opcode stream.
//!
//! The generic reader first builds a document of every tuple and string (~500 instructions and
//! ~60 bytes per op entry). This reads the one layout PyTorch writes — protocol 4/5, a dict of
//! `collections.defaultdict`s of `{op index: (name, MiB)}` with indices 0..n in order and names
//! shared through the memo — directly into the model, matching the bytes of each entry where
//! it can. At the first thing outside that layout it returns None and the caller uses the
//! generic reader, so it can only make a file faster, never read it differently:
//! `tests/reader_equivalence.rs` and the fuzz target check that both paths agree.

use crate::model::units::MIB;
use crate::model::{Marker, OpNames, TrackerStats};
use crate::pickle::ops::{Cursor, Op};
use crate::pickle::Progress;

/// A memo slot: the id of a string, or one of these markers.
type Slot = u32;
const SLOT_OTHER: Slot = u32::MAX;
const SLOT_DEFAULTDICT: Slot = u32::MAX - 1;
const SLOT_UNSET: Slot = u32::MAX - 2;
const MAX_STRINGS: usize = (u32::MAX - 3) as usize;

const MEMOIZE: u8 = 0x94;

/// The keys of a stats file this reader knows.
enum Key {
    Allocated,
    Active,
    Reserved,
    Markers,
    Retries,
    OpIndex,
}
const PROGRESS_STEP: usize = 16 << 20;

struct Stream<'a, 'p> {
    cursor: Cursor<'a>,
    pending: Option<Op<'a>>,
    memo: Vec<Slot>,
    /// What the last value read would be memoized as.
    last: Slot,
    text: String,
    strings: Vec<(u32, u32)>,
    progress: &'p mut dyn Progress,
    next_report: usize,
}

struct Checkpoint<'a> {
    cursor: Cursor<'a>,
    pending: Option<Op<'a>>,
    memo: usize,
    strings: usize,
    text: usize,
}

/// One series: MiB values by op index and, for the first series read, the name ids.
struct SeriesData {
    names: Vec<u32>,
    values: Vec<f64>,
}

pub fn read(data: &[u8], progress: &mut dyn Progress) -> Option<TrackerStats> {
    // sizes from what a MemoryTracker file holds per op (~100 bytes: three entries, one name)
    let ops_guess = data.len() / 90;
    let mut s = Stream {
        cursor: Cursor::new(data),
        pending: None,
        memo: Vec::with_capacity(ops_guess * 4),
        last: SLOT_OTHER,
        text: String::new(),
        strings: Vec::with_capacity(ops_guess),
        progress,
        next_report: PROGRESS_STEP,
    };
    let _ = s.text.try_reserve(data.len() / 2);
    let stats = s.root(ops_guess);
    s.progress.advanced(s.cursor.position());
    stats
}

impl<'a> Stream<'a, '_> {
    /// The next opcode that is not a FRAME hint. Errors end the fast path (the generic
    /// reader then reports them properly).
    #[inline(always)]
    fn next(&mut self) -> Option<Op<'a>> {
        if let Some(op) = self.pending.take() {
            return Some(op);
        }
        loop {
            if self.cursor.position() >= self.next_report {
                self.progress.advanced(self.cursor.position());
                self.next_report = self.cursor.position() + PROGRESS_STEP;
            }
            match self.cursor.next_op().ok()? {
                Op::Frame => continue,
                op => return Some(op),
            }
        }
    }

    fn push_back(&mut self, op: Op<'a>) {
        self.pending = Some(op);
    }

    fn expect(&mut self, want: Op<'static>) -> Option<()> {
        (self.next()? == want).then_some(())
    }

    /// Record `self.last` if the next opcode stores it in the memo.
    #[inline(always)]
    fn memoize(&mut self) -> Option<()> {
        if self.pending.is_none() && self.cursor.eat(MEMOIZE) {
            self.memo.push(self.last);
            return Some(());
        }
        match self.next()? {
            Op::Memoize => self.memo.push(self.last),
            Op::Put(id) => {
                // only fresh ids: overwriting a slot could not be undone by `rollback`
                let id = usize::try_from(id).ok()?;
                if id < self.memo.len() || id > self.memo.len() + (1 << 16) {
                    return None;
                }
                self.memo.resize(id, SLOT_UNSET);
                self.memo.push(self.last);
            }
            op => self.push_back(op),
        }
        Some(())
    }

    fn slot(&self, id: u64) -> Option<Slot> {
        self.memo.get(usize::try_from(id).ok()?).copied()
    }

    fn new_str(&mut self, text: &str) -> Option<u32> {
        if self.strings.len() >= MAX_STRINGS {
            return None;
        }
        let start = u32::try_from(self.text.len()).ok()?;
        u32::try_from(self.text.len() + text.len()).ok()?;
        self.text.push_str(text);
        self.strings.push((start, text.len() as u32));
        Some((self.strings.len() - 1) as u32)
    }

    fn str_at(&self, id: u32) -> &str {
        let (start, len) = self.strings[id as usize];
        &self.text[start as usize..(start + len) as usize]
    }

    /// A string value: a new one, or one shared through the memo. Its id, memo recorded.
    fn string(&mut self) -> Option<u32> {
        let id = match self.next()? {
            Op::Unicode(raw) => self.new_str(std::str::from_utf8(raw).ok()?)?,
            Op::Get(id) => match self.slot(id)? {
                s if (s as usize) < MAX_STRINGS => s,
                _ => return None,
            },
            _ => return None,
        };
        self.last = id;
        self.memoize()?;
        Some(id)
    }

    fn root(&mut self, ops_guess: usize) -> Option<TrackerStats> {
        match self.next()? {
            Op::Proto(4 | 5) => {}
            _ => return None,
        }
        self.expect(Op::EmptyDict)?;
        self.last = SLOT_OTHER;
        self.memoize()?;
        self.expect(Op::Mark)?;
        let mut stats = TrackerStats::default();
        let mut allocated: Option<SeriesData> = None;
        let (mut active, mut reserved) = (None, None);
        loop {
            let key = match self.next()? {
                Op::SetItems => break,
                op => {
                    self.push_back(op);
                    self.string()?
                }
            };
            // allocated must come first (as save_stats writes it): it fixes the op count and
            // names that the other series are checked against
            let ops = allocated.as_ref().map(|a| a.values.len());
            let key = match self.str_at(key) {
                "memories_allocated" => Key::Allocated,
                "memories_active" => Key::Active,
                "memories_reserved" => Key::Reserved,
                "markers" => Key::Markers,
                "num_alloc_retries" => Key::Retries,
                "op_index" => Key::OpIndex,
                _ => return None, // e.g. the `memtrack` extension: the generic reader has it
            };
            match (key, ops) {
                (Key::Allocated, None) => allocated = Some(self.series(None, ops_guess)?),
                (Key::Active, Some(n)) => active = Some(self.series(Some(n), n)?.values),
                (Key::Reserved, Some(n)) => reserved = Some(self.series(Some(n), n)?.values),
                (Key::Markers, _) => stats.markers = self.markers()?,
                (Key::Retries, _) => stats.num_alloc_retries = self.int()?,
                (Key::OpIndex, _) => stats.op_index = Some(self.int()?),
                _ => return None, // a series before allocated, or twice
            }
        }
        self.expect(Op::Stop)?;
        let allocated = allocated?;
        stats.allocated = allocated.values;
        stats.active = active?;
        stats.reserved = reserved?;
        let spans = allocated
            .names
            .iter()
            .map(|&id| self.strings[id as usize])
            .collect();
        stats.names = OpNames::from_spans(std::mem::take(&mut self.text), spans)?;
        Some(stats)
    }

    fn int(&mut self) -> Option<i64> {
        match self.next()? {
            Op::Int(i) => Some(i),
            Op::Bool(b) => Some(b as i64),
            _ => None,
        }
    }

    /// `collections.defaultdict(...)` as REDUCE writes it, or a plain `{}`; memo recorded.
    fn empty_dict(&mut self) -> Option<()> {
        match self.next()? {
            Op::EmptyDict => {}
            first => {
                self.push_back(first);
                self.defaultdict_global()?;
                // the arguments: () or (factory,) — a global such as builtins.int, or None
                match self.next()? {
                    Op::EmptyTuple => {}
                    op => {
                        self.push_back(op);
                        match self.next()? {
                            Op::None => {}
                            op => {
                                self.push_back(op);
                                self.any_global()?;
                            }
                        }
                        self.expect(Op::TupleN(1))?;
                        self.last = SLOT_OTHER;
                        self.memoize()?;
                    }
                }
                self.expect(Op::Reduce)?;
            }
        }
        self.last = SLOT_OTHER;
        self.memoize()
    }

    fn defaultdict_global(&mut self) -> Option<()> {
        match self.next()? {
            Op::Get(id) if self.slot(id)? == SLOT_DEFAULTDICT => {}
            op => {
                self.push_back(op);
                if self.stack_global()? != ("collections", "defaultdict") {
                    return None;
                }
            }
        }
        self.last = SLOT_DEFAULTDICT;
        self.memoize()
    }

    /// A global such as `builtins.int` given as a default factory; memo recorded.
    fn any_global(&mut self) -> Option<()> {
        match self.next()? {
            Op::Get(id) if self.slot(id)? == SLOT_OTHER => {}
            op => {
                self.push_back(op);
                self.stack_global()?;
            }
        }
        self.last = SLOT_OTHER;
        self.memoize()
    }

    fn stack_global(&mut self) -> Option<(&str, &str)> {
        let module = self.string()?;
        let name = self.string()?;
        self.expect(Op::StackGlobal)?;
        Some((self.str_at(module), self.str_at(name)))
    }

    /// Items of a dict, each read by `item` (`raw` gets the first try inside a batch) and
    /// given to `sink`: MARK k v ... SETITEMS batches, or k v SETITEM for a batch of one. A
    /// lone item is tried speculatively: with string keys it cannot be told from the next key
    /// of the enclosing dict until its SETITEM shows up (or does not).
    fn items<T>(
        &mut self,
        raw: impl Fn(&mut Self) -> Option<T>,
        item: impl Fn(&mut Self) -> Option<T>,
        mut sink: impl FnMut(T) -> Option<()>,
    ) -> Option<()> {
        loop {
            match self.next()? {
                Op::Mark => loop {
                    if self.pending.is_none() {
                        if let Some(t) = raw(self) {
                            sink(t)?;
                            continue;
                        }
                    }
                    match self.next()? {
                        Op::SetItems => break,
                        op => {
                            self.push_back(op);
                            sink(item(self)?)?;
                        }
                    }
                },
                op => {
                    self.push_back(op);
                    let saved = self.checkpoint();
                    if let Some(t) = item(self) {
                        if self.next() == Some(Op::SetItem) {
                            sink(t)?;
                            continue;
                        }
                    }
                    self.rollback(saved);
                    return Some(());
                }
            }
        }
    }

    fn checkpoint(&self) -> Checkpoint<'a> {
        Checkpoint {
            cursor: self.cursor.clone(),
            pending: self.pending,
            memo: self.memo.len(),
            strings: self.strings.len(),
            text: self.text.len(),
        }
    }

    /// Undo everything read since `c`. The memo only ever grows (see `memoize`), so
    /// truncating restores it.
    fn rollback(&mut self, c: Checkpoint<'a>) {
        self.cursor = c.cursor;
        self.pending = c.pending;
        self.memo.truncate(c.memo);
        self.strings.truncate(c.strings);
        self.text.truncate(c.text);
    }

    /// A series dict. Keys must be 0, 1, 2, ... (and `expect_len` of them when given); values
    /// are stored as bytes; names are kept only for the first series (`expect_len` None).
    fn series(&mut self, expect_len: Option<usize>, room: usize) -> Option<SeriesData> {
        self.empty_dict()?;
        let keep_names = expect_len.is_none();
        let mut d = SeriesData {
            names: if keep_names {
                Vec::with_capacity(room)
            } else {
                Vec::new()
            },
            values: Vec::with_capacity(room),
        };
        self.items(
            |s| s.raw_entry(),
            |s| {
                let key = s.int()?;
                let name = s.string()?;
                let mib = match s.next()? {
                    Op::Float(f) => f,
                    Op::Int(i) => i as f64,
                    _ => return None,
                };
                if !matches!(s.next()?, Op::TupleN(2)) {
                    return None;
                }
                s.last = SLOT_OTHER;
                s.memoize()?;
                Some((key, name, mib))
            },
            |(key, name, mib)| {
                if key != d.values.len() as i64 || !super::tracker::plausible_mib(mib) {
                    return None;
                }
                d.values.push(mib * MIB);
                if keep_names {
                    d.names.push(name);
                }
                Some(())
            },
        )?;
        if expect_len.is_some_and(|n| n != d.values.len()) {
            return None;
        }
        Some(d)
    }

    /// One `op index: (name, MiB)` entry matched byte for byte in the form protocol 4/5
    /// pickles take (BININT*, SHORT_BINUNICODE+MEMOIZE or BINGET/LONG_BINGET, BINFLOAT,
    /// TUPLE2, MEMOIZE): a fraction of the work of decoding each opcode. Anything else, a
    /// FRAME boundary included, returns None having changed nothing, and the opcode path
    /// reads the entry.
    #[inline(always)]
    fn raw_entry(&mut self) -> Option<(i64, u32, f64)> {
        let b = self.cursor.rest();
        let (key, mut i) = match *b.first()? {
            b'K' => (*b.get(1)? as i64, 2),
            b'M' => (u16::from_le_bytes(b.get(1..3)?.try_into().ok()?) as i64, 3),
            b'J' => (i32::from_le_bytes(b.get(1..5)?.try_into().ok()?) as i64, 5),
            _ => return None,
        };
        enum Name<'b> {
            New(&'b str, bool),
            Memo(u32),
        }
        let name = match *b.get(i)? {
            0x8c => {
                let n = *b.get(i + 1)? as usize;
                let text = std::str::from_utf8(b.get(i + 2..i + 2 + n)?).ok()?;
                i += 2 + n;
                let memoized = b.get(i) == Some(&MEMOIZE);
                i += memoized as usize;
                Name::New(text, memoized)
            }
            op @ (b'h' | b'j') => {
                let (id, len) = if op == b'h' {
                    (*b.get(i + 1)? as usize, 2)
                } else {
                    (
                        u32::from_le_bytes(b.get(i + 1..i + 5)?.try_into().ok()?) as usize,
                        5,
                    )
                };
                i += len;
                match *self.memo.get(id)? {
                    s if (s as usize) < MAX_STRINGS => Name::Memo(s),
                    _ => return None,
                }
            }
            _ => return None,
        };
        if *b.get(i)? != b'G' || *b.get(i + 9)? != 0x86 {
            return None;
        }
        let mib = f64::from_be_bytes(b.get(i + 1..i + 9)?.try_into().ok()?);
        i += 10;
        let tuple_memoized = b.get(i) == Some(&MEMOIZE);
        i += tuple_memoized as usize;
        // matched: now the side effects
        let name = match name {
            Name::Memo(id) => id,
            Name::New(text, memoized) => {
                let id = self.new_str(text)?;
                if memoized {
                    self.memo.push(id);
                }
                id
            }
        };
        if tuple_memoized {
            self.memo.push(SLOT_OTHER);
        }
        self.cursor.advance(i);
        Some((key, name, mib))
    }

    fn markers(&mut self) -> Option<Vec<Marker>> {
        self.empty_dict()?;
        let mut markers = Vec::new();
        self.items(
            |_| None,
            |s| {
                let name = s.string()?;
                let op_index = s.int()?;
                Some(Marker {
                    name: s.str_at(name).to_string(),
                    op_index,
                })
            },
            |m| {
                markers.push(m);
                Some(())
            },
        )?;
        Some(markers)
    }
}
