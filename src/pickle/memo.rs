//! The memo of a pickle past a diverted value's start: handles in a ring of recent ids,
//! the document values packed (see [`HandleWindow`]). A leaf of the reader.

use super::value::Value;

/// What a GET of a handle the window no longer holds reads as (never a handle a reader makes:
/// the snapshot reader's are stack ids and two constants just past 2^40).
pub(super) const EVICTED_HANDLE: u64 = (1 << 41) - 1;

/// The memo past a diverted value's start. A diverted reader memoizes an inert handle for
/// every container it keeps to itself (two a trace event: millions in a large snapshot), and
/// later GETs of those come a few ids later (a free's frame list, shared by its completion:
/// within 64 ids in every real capture measured). So handles live in a ring of recent ids, and
/// only the document values (frame dicts, strings) are kept, packed: a bit an id says which,
/// and a count a word ranks them. 8 bytes an id become about 1.5 bits.
pub(super) struct HandleWindow {
    pub(super) base: u64,
    pub(super) next: u64,
    /// Bit `i` of word `w`: id `base + 64w + i` holds a document value.
    kept_bits: Vec<u64>,
    /// Document values kept before word `w`.
    kept_before: Vec<u32>,
    kept: Vec<Value>,
    recent: Box<[(u64, Value)]>,
    /// Kept values fetched lately, by id (direct-mapped): an event's keys and action names
    /// are the same few ids, fetched millions of times.
    hot: Box<[(u64, Value)]>,
}

pub(super) enum Lookup {
    Stored(Value),
    Evicted,
    Never,
}

/// How many recent memo ids the window keeps handles for.
pub const RECENT_HANDLES: usize = 1 << 16;
const HOT_VALUES: usize = 1 << 12;

impl HandleWindow {
    pub(super) fn new(base: u64) -> HandleWindow {
        HandleWindow {
            base,
            next: base,
            kept_bits: Vec::new(),
            kept_before: Vec::new(),
            kept: Vec::new(),
            recent: vec![(u64::MAX, Value::UNSET); RECENT_HANDLES].into_boxed_slice(),
            hot: vec![(u64::MAX, Value::UNSET); HOT_VALUES].into_boxed_slice(),
        }
    }

    /// Store `id`: the next id, or a handle stored again (a reader fills in what its
    /// container turned out to be); false for anything else, which the window cannot keep.
    #[inline]
    pub(super) fn put(&mut self, id: u64, v: Value) -> bool {
        if id != self.next {
            let slot = &mut self.recent[id as usize % RECENT_HANDLES];
            if slot.0 == id && v.is_taken() {
                slot.1 = v;
                return true;
            }
            return false;
        }
        self.push_next(v);
        true
    }

    /// Store `values` at the next ids, as `put` one by one would, in one loop (a round taken
    /// over stores hundreds of thousands at once).
    pub(super) fn put_run(&mut self, values: impl Iterator<Item = Value>) {
        values.for_each(|v| self.push_next(v));
    }

    /// Store `v` at the next id.
    #[inline(always)]
    fn push_next(&mut self, v: Value) {
        let rel = self.next - self.base;
        let (w, bit) = ((rel / 64) as usize, rel % 64);
        if w == self.kept_bits.len() {
            self.kept_bits.push(0);
            self.kept_before.push(self.kept.len() as u32);
        }
        if v.is_taken() {
            self.recent[self.next as usize % RECENT_HANDLES] = (self.next, v);
        } else {
            self.kept_bits[w] |= 1 << bit;
            self.kept.push(v);
        }
        self.next += 1;
    }

    /// Memo entry `id` without the cache; whether it is a kept value (not a handle).
    #[inline]
    pub(super) fn find(&self, id: u64) -> (Lookup, bool) {
        if id >= self.next {
            return (Lookup::Never, false);
        }
        let rel = id - self.base;
        let (w, bit) = ((rel / 64) as usize, rel % 64);
        let bits = self.kept_bits[w];
        if bits >> bit & 1 == 1 {
            let below = (bits & ((1u64 << bit) - 1)).count_ones();
            return (
                Lookup::Stored(self.kept[(self.kept_before[w] + below) as usize]),
                true,
            );
        }
        match self.recent[id as usize % RECENT_HANDLES] {
            (at, v) if at == id => (Lookup::Stored(v), false),
            _ => (Lookup::Evicted, false),
        }
    }

    /// `get` without touching the cache.
    pub(super) fn peek(&self, id: u64) -> Option<Value> {
        match self.find(id).0 {
            Lookup::Stored(v) => Some(v),
            Lookup::Evicted | Lookup::Never => None,
        }
    }

    #[inline]
    pub(super) fn get(&mut self, id: u64) -> Lookup {
        let hot = self.hot[id as usize % HOT_VALUES];
        if hot.0 == id {
            return Lookup::Stored(hot.1);
        }
        let (found, kept) = self.find(id);
        if let (Lookup::Stored(v), true) = (&found, kept) {
            self.hot[id as usize % HOT_VALUES] = (id, *v);
        }
        found
    }
}
