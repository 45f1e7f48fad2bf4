//! A map from block addresses to small values, for the analyses that pair a trace's frees
//! with its allocations (`sites::LiveAt`, `simulate`'s replay). With a live set of millions of
//! blocks every lookup is a cache miss (and, with 4 KiB pages, a TLB miss): the table is one
//! flat array of (address, value) slots (open addressing, linear probing, deletion by shifting
//! back, so no tombstones lengthen the probes), large tables ask the kernel for huge pages, and
//! [`AddressMap::prefetch`] lets a caller that knows the next addresses start their misses early.
//! Iteration order is unspecified (callers sum or sort what they take out).

/// The key that marks an empty slot; a real key equal to it is kept aside.
const EMPTY: u64 = u64::MAX;

/// Address -> `V`, as `HashMap<u64, V>` for the operations the analyses use.
#[derive(Clone)]
pub struct AddressMap<V: Copy + Default> {
    slots: Vec<(u64, V)>,
    /// `slots.len() - 1` (a power of two minus one).
    mask: usize,
    /// 64 - log2(slots.len()): the hash's top bits index the table.
    shift: u32,
    len: usize,
    /// The value of key `EMPTY`, when present.
    max_key: Option<V>,
}

impl<V: Copy + Default> Default for AddressMap<V> {
    fn default() -> Self {
        AddressMap::new()
    }
}

impl<V: Copy + Default> AddressMap<V> {
    /// An empty map.
    pub fn new() -> AddressMap<V> {
        AddressMap::with_slots(16)
    }

    fn with_slots(n: usize) -> AddressMap<V> {
        AddressMap {
            slots: table(n),
            mask: n - 1,
            shift: 64 - n.trailing_zeros(),
            len: 0,
            max_key: None,
        }
    }

    /// Entries in the map.
    pub fn len(&self) -> usize {
        self.len + usize::from(self.max_key.is_some())
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[inline]
    fn home(&self, key: u64) -> usize {
        // Fibonacci hashing: addresses are multiples of 512, their low bits say nothing
        (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize
    }

    /// The slot holding `key`, or the empty slot where it would go.
    #[inline]
    fn find(&self, key: u64) -> usize {
        let mut i = self.home(key);
        loop {
            let k = self.slots[i].0;
            if k == key || k == EMPTY {
                return i;
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Start loading the slot `key` lives in (or would) and the slot after it, for a lookup
    /// soon after: a lookup that finds another key there reads on into the next slot, and a
    /// removal shifts the next slots back. Every line the two touch is asked for (the 40-byte
    /// slots of `plot --stacked`'s open allocations often end in the next line; fetching only
    /// a slot's first line left its pass 1 waiting on the rest: 12-18% of it at 1.1 GB).
    #[inline]
    pub fn prefetch(&self, key: u64) {
        let slot = self.slots.as_ptr().wrapping_add(self.home(key));
        crate::memory::prefetch_bytes(slot, 2 * std::mem::size_of::<(u64, V)>());
    }

    /// The value of `key`.
    #[inline]
    pub fn get(&self, key: u64) -> Option<&V> {
        if key == EMPTY {
            return self.max_key.as_ref();
        }
        let i = self.find(key);
        (self.slots[i].0 == key).then(|| &self.slots[i].1)
    }

    /// The value of `key`, to change.
    #[inline]
    pub fn get_mut(&mut self, key: u64) -> Option<&mut V> {
        if key == EMPTY {
            return self.max_key.as_mut();
        }
        let i = self.find(key);
        (self.slots[i].0 == key).then(|| &mut self.slots[i].1)
    }

    /// Whether `key` is in the map.
    #[inline]
    pub fn contains_key(&self, key: u64) -> bool {
        self.get(key).is_some()
    }

    /// Set `key` to `value`; its value before, if any.
    #[inline]
    pub fn insert(&mut self, key: u64, value: V) -> Option<V> {
        if key == EMPTY {
            return self.max_key.replace(value);
        }
        let i = self.find(key);
        if self.slots[i].0 == key {
            return Some(std::mem::replace(&mut self.slots[i].1, value));
        }
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow();
            let i = self.find(key);
            self.slots[i] = (key, value);
        } else {
            self.slots[i] = (key, value);
        }
        self.len += 1;
        None
    }

    /// The value of `key`, inserted as `V::default()` when absent.
    #[inline]
    pub fn entry_or_default(&mut self, key: u64) -> &mut V {
        if self.get(key).is_none() {
            self.insert(key, V::default());
        }
        self.get_mut(key).expect("just inserted")
    }

    /// Take `key` out; its value, if it was there.
    #[inline]
    pub fn remove(&mut self, key: u64) -> Option<V> {
        if key == EMPTY {
            return self.max_key.take();
        }
        let mut i = self.find(key);
        if self.slots[i].0 != key {
            return None;
        }
        let value = self.slots[i].1;
        // shift back the entries after it that probed past it
        let mut j = i;
        loop {
            j = (j + 1) & self.mask;
            let k = self.slots[j].0;
            if k == EMPTY {
                break;
            }
            let h = self.home(k);
            if (j.wrapping_sub(h) & self.mask) >= (j.wrapping_sub(i) & self.mask) {
                self.slots[i] = self.slots[j];
                i = j;
            }
        }
        self.slots[i] = (EMPTY, V::default());
        self.len -= 1;
        Some(value)
    }

    /// Every (key, value), in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &V)> + '_ {
        let kept = self.slots.iter().filter(|s| s.0 != EMPTY);
        kept.map(|s| (s.0, &s.1))
            .chain(self.max_key.as_ref().map(|v| (EMPTY, v)))
    }

    /// Every value, in no particular order.
    pub fn values(&self) -> impl Iterator<Item = &V> + '_ {
        self.iter().map(|(_, v)| v)
    }

    fn grow(&mut self) {
        let old = std::mem::replace(self, AddressMap::with_slots(self.slots.len() * 2));
        self.max_key = old.max_key;
        for &(k, v) in &old.slots {
            if k != EMPTY {
                let i = self.find(k);
                self.slots[i] = (k, v);
                self.len += 1;
            }
        }
    }
}

/// `n` empty slots; a table of several MiB asks for huge pages first (fewer TLB misses on
/// random lookups), which the kernel may or may not give.
fn table<V: Copy + Default>(n: usize) -> Vec<(u64, V)> {
    let mut slots: Vec<(u64, V)> = Vec::with_capacity(n);
    crate::memory::advise_huge_pages(&slots);
    slots.resize(n, (EMPTY, V::default()));
    slots
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustc_hash::FxHashMap;

    /// Against a HashMap: the same answers through inserts, replacements and removals that
    /// shift probe runs back, across growth, with the key that marks empty slots too.
    #[test]
    fn answers_as_a_hash_map_does() {
        let mut m: AddressMap<u32> = AddressMap::new();
        let mut want: FxHashMap<u64, u32> = FxHashMap::default();
        let mut x: u64 = 12345;
        for step in 0..200_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // few distinct keys, multiples of 512, so probe runs collide and wrap
            let key = if x.is_multiple_of(997) {
                EMPTY
            } else {
                (x % 5000) * 512
            };
            match x % 3 {
                0 => assert_eq!(m.remove(key), want.remove(&key), "step {step}"),
                _ => assert_eq!(m.insert(key, step), want.insert(key, step), "step {step}"),
            }
            assert_eq!(m.len(), want.len());
            if step % 1000 == 0 {
                for (k, v) in &want {
                    assert_eq!(m.get(*k), Some(v));
                }
                let mut got: Vec<(u64, u32)> = m.iter().map(|(k, v)| (k, *v)).collect();
                let mut all: Vec<(u64, u32)> = want.iter().map(|(k, v)| (*k, *v)).collect();
                got.sort_unstable();
                all.sort_unstable();
                assert_eq!(got, all);
            }
        }
        *m.entry_or_default(7) += 3;
        *m.entry_or_default(7) += 3;
        assert_eq!(m.get(7), Some(&6));
        assert!(m.contains_key(7) && !m.contains_key(8));
    }
}
