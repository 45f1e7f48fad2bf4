//! The event listing of `python -m torch.cuda._memory_viz trace`, in linear time and with
//! correct totals.
//!
//! Each allocation and segment gets a short name (`a`, `b`, … `z`, `a1`, …), in event order;
//! frees refer to them by name (or by address when the allocation is older than the trace).
//! Differences from `_memory_viz` (docs/snapshots.md): its `TOTAL MEM` line reuses the loop
//! index as the byte count, so it prints roughly the number of entries; ours is what it means
//! to be, the bytes allocated minus the bytes freed over the trace. Its segment lookup scans every
//! segment per allocation (quadratic) and matches final segments by `allocated_size`; ours is a
//! sorted lookup by the segment's full size, and forgets segments the trace frees.
//! `segment_map`/`segment_unmap` (expandable segments), `snapshot` and unknown actions get a line
//! of their own instead of a dict repr.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;
use serde::Serialize;

use crate::model::snapshot::{Action, EventAux, Snapshot, TraceEvent};
use crate::model::trace::TraceSink;

/// A name `_memory_viz` would give: the n-th of `a..z`, `a1..z1`, …
pub fn name_of(n: u32) -> String {
    let mut s = String::new();
    push_name(&mut s, n);
    s
}

/// Append `name_of(n)` to `out`.
pub fn push_name(out: &mut String, n: u32) {
    let (r, m) = (n / 26, n % 26);
    out.push((b'a' + m as u8) as char);
    if r > 0 {
        out.push_str(itoa::Buffer::new().format(r));
    }
}

/// What an entry refers to: a name given earlier, or a raw address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ref {
    /// An allocation or segment named earlier in the listing (the `n` of [`name_of`]).
    Name(u32),
    /// An address the listing has not named (allocated before the trace began).
    Addr(u64),
}

/// Where an allocation lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// In a segment the trace allocated, by its name.
    Named(u32),
    /// In a segment of the final state: `seg_{index in the file's segment list}`.
    Final(usize),
    /// In no known segment: the offset is the address itself.
    Mem,
}

/// One line of the `_memory_viz trace` listing.
#[derive(Clone, Copy, Debug)]
pub enum Line {
    /// `alloc`: a new allocation, given the next name.
    Alloc {
        /// The allocation's name, the `n` of [`name_of`].
        name: u32,
        /// The segment it lies in.
        place: Place,
        /// Bytes from the start of `place` (the address itself for `Place::Mem`).
        offset: u64,
        /// Bytes requested.
        size: u64,
    },
    /// `free_requested`: the program freed an allocation.
    FreeRequested {
        /// The allocation freed, by name or address.
        target: Ref,
        /// Bytes freed (as requested).
        size: u64,
    },
    /// `free_completed`: the freed block went back to the pool.
    FreeCompleted {
        /// The allocation whose free completed, by name or address.
        target: Ref,
        /// Bytes freed (as requested).
        size: u64,
    },
    /// `segment_alloc`: a new segment (cudaMalloc), given the next name.
    SegmentAlloc {
        /// The segment's name, the `n` of [`name_of`].
        name: u32,
        /// The segment's base address.
        addr: u64,
        /// The segment's size in bytes.
        size: u64,
    },
    /// `segment_free`: a segment given back (cudaFree).
    SegmentFree {
        /// The segment freed, by name or address.
        target: Ref,
        /// The segment's size in bytes.
        size: u64,
    },
    /// `segment_map`: pages mapped into an expandable segment, given the next name.
    SegmentMap {
        /// The mapped range's name, the `n` of [`name_of`].
        name: u32,
        /// Address of the mapped range.
        addr: u64,
        /// Bytes mapped.
        size: u64,
    },
    /// `segment_unmap`: pages of an expandable segment unmapped.
    SegmentUnmap {
        /// The range unmapped, by name or address.
        target: Ref,
        /// Bytes unmapped.
        size: u64,
    },
    /// `oom`: an allocation failed.
    Oom {
        /// Bytes the failed allocation asked for.
        size: u64,
        /// What CUDA reported free then; None when the file does not say.
        device_free: Option<u64>,
    },
    /// (its metadata is the event's)
    Annotate {
        /// The allocation the metadata is about, by name or address.
        target: Ref,
    },
    /// `snapshot`: a snapshot was taken here.
    Snapshot {
        /// The event's `size` field.
        size: u64,
    },
    /// An action the listing has no form for (its name is the event's).
    Other {
        /// The event's address.
        addr: u64,
        /// The event's `size` field.
        size: u64,
    },
}

/// Totals over the listing's entries.
#[derive(Debug, Default, Serialize)]
pub struct Totals {
    /// Trace events of every action.
    pub entries: usize,
    /// `alloc` events.
    pub allocs: usize,
    /// Bytes requested by `alloc` events.
    pub alloc_bytes: u64,
    /// Bytes of `free_requested` events.
    pub free_requested_bytes: u64,
    /// Bytes of `free_completed` events.
    pub free_completed_bytes: u64,
    /// Bytes allocated minus bytes whose free completed over the trace (`TOTAL MEM`).
    pub net_bytes: i64,
    /// Bytes of `segment_alloc` and `segment_map` events.
    pub segment_alloc_bytes: u64,
    /// Bytes of `segment_free` and `segment_unmap` events.
    pub segment_free_bytes: u64,
    /// `oom` events.
    pub ooms: usize,
}

/// One device's listing: its totals (known up front, as the text and JSON forms put them
/// first) and its lines, made one at a time as they are written ([`DeviceListing::namer`]): a
/// listing of millions of events never exists whole.
#[derive(Debug)]
pub struct DeviceListing {
    /// Device index of the trace listed.
    pub device: u32,
    /// Totals over the device's whole trace.
    pub totals: Totals,
}

impl Totals {
    fn add(&mut self, e: &TraceEvent) {
        self.entries += 1;
        match e.action {
            Action::Alloc => {
                self.allocs += 1;
                self.alloc_bytes += e.size;
            }
            Action::FreeRequested => self.free_requested_bytes += e.size,
            Action::FreeCompleted => self.free_completed_bytes += e.size,
            Action::SegmentAlloc | Action::SegmentMap => self.segment_alloc_bytes += e.size,
            Action::SegmentFree | Action::SegmentUnmap => self.segment_free_bytes += e.size,
            Action::Oom => self.ooms += 1,
            Action::Annotate | Action::Snapshot | Action::Other => {}
        }
    }
}

/// Each device's [`Totals`], taken as the reader streams the events by (the listing's lines
/// come after, from where the events were put aside).
#[derive(Default)]
pub struct ListingTotals {
    devices: Vec<Totals>,
}

impl ListingTotals {
    /// Device `device`'s listing (its totals).
    pub fn take(&mut self, device: u32) -> DeviceListing {
        let mut totals: Totals = (self.devices.get_mut(device as usize))
            .map(std::mem::take)
            .unwrap_or_default();
        totals.net_bytes = totals.alloc_bytes as i64 - totals.free_completed_bytes as i64;
        DeviceListing { device, totals }
    }
}

impl TraceSink for ListingTotals {
    fn event(&mut self, device: u32, e: &TraceEvent, _stream: i64, _aux: Option<&EventAux>) {
        let d = device as usize;
        if self.devices.len() <= d {
            self.devices.resize_with(d + 1, Totals::default);
        }
        self.devices[d].add(e);
    }

    fn restart(&mut self) {
        self.devices.clear();
    }
}

impl DeviceListing {
    /// What names the device's events' lines, one event at a time in order.
    pub fn namer(&self, snap: &Snapshot) -> Namer {
        let mut finals: Vec<(u64, u64, usize)> = snap
            .segments
            .iter()
            .enumerate()
            .filter(|(_, s)| s.device == self.device)
            .map(|(i, s)| (s.address, s.total_size, i))
            .collect();
        finals.sort_unstable();
        Namer {
            finals,
            live_segs: BTreeMap::new(),
            alloc_names: AddrNames::new(),
            last_place: None,
            seg_names: FxHashMap::default(),
            next: 0,
        }
    }
}

/// The walk that names allocations and segments as `_memory_viz trace` does.
pub struct Namer {
    /// The final segments (address, size, index), sorted: where an address no live segment
    /// of the trace covers lies.
    finals: Vec<(u64, u64, usize)>,
    live_segs: BTreeMap<u64, (u64, u32)>,
    alloc_names: AddrNames,
    /// The place of the last allocation looked up, while no segment of the trace comes or goes.
    last_place: Option<KnownPlace>,
    seg_names: FxHashMap<u64, u32>,
    next: u32,
}

impl Namer {
    /// Ask for what naming `e` will look up, ahead of [`Namer::line`] (a hint: the lookups of
    /// allocations' names miss the caches on long traces).
    #[inline]
    pub fn prefetch(&self, e: &TraceEvent) {
        if matches!(
            e.action,
            Action::Alloc | Action::FreeRequested | Action::FreeCompleted
        ) {
            self.alloc_names.prefetch(e.addr);
        }
    }

    fn place_of(&mut self, addr: u64) -> (Place, u64) {
        // (allocations come in runs within one segment: most are answered by the last lookup)
        if let Some(k) = self.last_place {
            if k.from <= addr && addr < k.to {
                return (k.place, addr - k.base);
            }
        }
        let (place, offset, known) = self.look_up_place(addr);
        self.last_place = Some(known);
        (place, offset)
    }

    /// Where `addr` lies, and a range of addresses around it that lie in the same place.
    fn look_up_place(&self, addr: u64) -> (Place, u64, KnownPlace) {
        // (the next segment starting above `addr`, of each kind, ends the range known)
        let next_live = || {
            (self.live_segs.range(addr.saturating_add(1)..).next()).map_or(u64::MAX, |(&a, _)| a)
        };
        if let Some((&start, &(size, name))) = self.live_segs.range(..=addr).next_back() {
            if addr < start.saturating_add(size) {
                let known = KnownPlace {
                    // no live segment starts in (start, addr]: the same one holds from `start`
                    from: start,
                    to: start.saturating_add(size).min(next_live()),
                    base: start,
                    place: Place::Named(name),
                };
                return (Place::Named(name), addr - start, known);
            }
        }
        let k = self.finals.partition_point(|&(a, _, _)| a <= addr);
        let next_final = self.finals.get(k).map_or(u64::MAX, |&(a, _, _)| a);
        // (segments starting below `addr` may reach past it: only from `addr` up is known)
        let mut known = KnownPlace {
            from: addr,
            to: next_live().min(next_final),
            base: 0,
            place: Place::Mem,
        };
        if k > 0 {
            let (start, size, i) = self.finals[k - 1];
            if addr < start.saturating_add(size) {
                known.to = known.to.min(start.saturating_add(size));
                known.base = start;
                known.place = Place::Final(i);
                return (Place::Final(i), addr - start, known);
            }
            // (past the end of that one: Mem until the next segment starts)
        }
        (Place::Mem, addr, known)
    }

    /// The line of the next event `e`, with what it carries.
    pub fn line(&mut self, e: &TraceEvent, aux: Option<&EventAux>) -> Line {
        match e.action {
            Action::Alloc => {
                let name = self.next;
                self.next += 1;
                let (place, offset) = self.place_of(e.addr);
                self.alloc_names.insert(e.addr, name);
                Line::Alloc {
                    name,
                    place,
                    offset,
                    size: e.size,
                }
            }
            Action::FreeRequested => Line::FreeRequested {
                target: self.alloc_names.get(e.addr),
                size: e.size,
            },
            // the name stays bound to the address until the next allocation there, so a
            // late `annotate` or a repeated free still reads by name
            Action::FreeCompleted => Line::FreeCompleted {
                target: self.alloc_names.get(e.addr),
                size: e.size,
            },
            Action::SegmentAlloc | Action::SegmentMap => {
                let name = self.next;
                self.next += 1;
                self.live_segs.insert(e.addr, (e.size, name));
                self.last_place = None;
                self.seg_names.insert(e.addr, name);
                if e.action == Action::SegmentAlloc {
                    Line::SegmentAlloc {
                        name,
                        addr: e.addr,
                        size: e.size,
                    }
                } else {
                    Line::SegmentMap {
                        name,
                        addr: e.addr,
                        size: e.size,
                    }
                }
            }
            Action::SegmentFree | Action::SegmentUnmap => {
                let target = lookup(&self.seg_names, e.addr);
                if matches!(self.live_segs.get(&e.addr), Some(&(size, _)) if size == e.size) {
                    self.live_segs.remove(&e.addr);
                    self.last_place = None;
                }
                if e.action == Action::SegmentFree {
                    Line::SegmentFree {
                        target,
                        size: e.size,
                    }
                } else {
                    Line::SegmentUnmap {
                        target,
                        size: e.size,
                    }
                }
            }
            Action::Oom => Line::Oom {
                size: e.size,
                device_free: aux.and_then(|a| a.device_free),
            },
            Action::Annotate => Line::Annotate {
                target: self.alloc_names.get(e.addr),
            },
            Action::Snapshot => Line::Snapshot { size: e.size },
            Action::Other => Line::Other {
                addr: e.addr,
                size: e.size,
            },
        }
    }
}

fn lookup(names: &FxHashMap<u64, u32>, addr: u64) -> Ref {
    match names.get(&addr) {
        Some(&n) => Ref::Name(n),
        None => Ref::Addr(addr),
    }
}

/// Addresses `from..to` lie in `place`, at offsets from `base`.
#[derive(Clone, Copy)]
struct KnownPlace {
    from: u64,
    to: u64,
    base: u64,
    place: Place,
}

/// Address -> the name last given to an allocation there, with open addressing and linear
/// probing. Names are never removed (one stays bound until the next allocation at its address),
/// so the table holds every address the trace allocated at: on long traces it outgrows the
/// caches, and a lookup per allocation and per free that misses them was the listing's largest
/// cost. Here a lookup is one slot of 12 bytes, which [`AddrNames::prefetch`] asks for ahead.
/// (Not [`super::address_map::AddressMap`]: with nothing ever removed, its 16-byte slots and
/// removal by shifting back buy nothing here, and at 10 GB the 4 bytes a slot are ~120 MB.)
struct AddrNames {
    /// `EMPTY` where free. A power of two long, at most 80% full.
    slots: Vec<Slot>,
    len: usize,
    /// 64 minus log2 of the slot count: a hash's top bits index the slots.
    shift: u32,
    /// The name at address `EMPTY` itself, which no slot can hold.
    at_empty: Option<u32>,
}

const EMPTY: u64 = u64::MAX;

/// An address and its name in 12 bytes, not 16: the table holds every address a trace
/// allocated at (tens of millions in a 10 GB capture).
#[derive(Clone, Copy)]
#[repr(C, packed(4))]
struct Slot {
    addr: u64,
    name: u32,
}

impl Slot {
    const FREE: Slot = Slot {
        addr: EMPTY,
        name: 0,
    };
}

impl AddrNames {
    fn new() -> AddrNames {
        const BITS: u32 = 12;
        AddrNames {
            slots: vec![Slot::FREE; 1 << BITS],
            len: 0,
            shift: 64 - BITS,
            at_empty: None,
        }
    }

    #[inline]
    fn slot_of(&self, addr: u64) -> usize {
        // (Fibonacci hashing: addresses are multiples of 512, their top bits mix well)
        (addr.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize
    }

    /// Start loading the slot of `addr` and the line after it: at up to 80% full, a lookup
    /// often reads on past the slots of the first line.
    #[inline]
    fn prefetch(&self, addr: u64) {
        let slot = self.slots.as_ptr().wrapping_add(self.slot_of(addr));
        crate::memory::prefetch_bytes(slot, 64 + 1); // (its line and the next)
    }

    fn get(&self, addr: u64) -> Ref {
        let found = if addr == EMPTY {
            self.at_empty
        } else {
            let mask = self.slots.len() - 1;
            let mut i = self.slot_of(addr);
            loop {
                let Slot { addr: k, name } = self.slots[i];
                if k == addr {
                    break Some(name);
                }
                if k == EMPTY {
                    break None;
                }
                i = (i + 1) & mask;
            }
        };
        match found {
            Some(n) => Ref::Name(n),
            None => Ref::Addr(addr),
        }
    }

    fn insert(&mut self, addr: u64, name: u32) {
        if addr == EMPTY {
            self.at_empty = Some(name);
            return;
        }
        if (self.len + 1) * 5 > self.slots.len() * 4 {
            self.grow();
        }
        let mask = self.slots.len() - 1;
        let mut i = self.slot_of(addr);
        loop {
            let slot = &mut self.slots[i];
            let k = slot.addr;
            if k == addr {
                slot.name = name;
                return;
            }
            if k == EMPTY {
                *slot = Slot { addr, name };
                self.len += 1;
                return;
            }
            i = (i + 1) & mask;
        }
    }

    fn grow(&mut self) {
        let bigger = vec![Slot::FREE; self.slots.len() * 2];
        let old = std::mem::replace(&mut self.slots, bigger);
        self.shift -= 1;
        self.len = 0;
        for Slot { addr, name } in old {
            if addr != EMPTY {
                self.insert(addr, name);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Places come out as the plain lookup gives them, whatever the last lookup remembered:
    /// overlapping final segments, trace segments coming and going inside and around them.
    #[test]
    fn remembered_places_are_the_places() {
        fn plain(n: &Namer, addr: u64) -> (Place, u64) {
            if let Some((&start, &(size, name))) = n.live_segs.range(..=addr).next_back() {
                if addr < start + size {
                    return (Place::Named(name), addr - start);
                }
            }
            let k = n.finals.partition_point(|&(a, _, _)| a <= addr);
            if k > 0 {
                let (start, size, i) = n.finals[k - 1];
                if addr < start + size {
                    return (Place::Final(i), addr - start);
                }
            }
            (Place::Mem, addr)
        }
        let mut x = 7u64;
        let mut rand = move |m: u64| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) % m
        };
        let mut namer = Namer {
            finals: vec![
                (100, 50, 0),
                (120, 10, 1),
                (120, 200, 2),
                (400, 10, 3),
                (900, 1, 4),
            ],
            live_segs: BTreeMap::new(),
            alloc_names: AddrNames::new(),
            last_place: None,
            seg_names: FxHashMap::default(),
            next: 0,
        };
        namer.finals.sort_unstable();
        let event = |action, addr, size| TraceEvent {
            addr,
            size,
            time_us: crate::model::snapshot::NO_TIME,
            stack: crate::model::snapshot::StackId::MISSING,
            stream_index: 0,
            action,
        };
        let mut segs: Vec<(u64, u64)> = Vec::new();
        for _ in 0..20_000 {
            match rand(20) {
                0 => {
                    let (a, size) = (rand(1000), 1 + rand(80));
                    namer.line(&event(Action::SegmentAlloc, a, size), None);
                    segs.push((a, size));
                }
                1 if !segs.is_empty() => {
                    let (a, size) = segs.swap_remove(rand(segs.len() as u64) as usize);
                    namer.line(&event(Action::SegmentFree, a, size), None);
                }
                _ => {
                    let addr = rand(1000);
                    let want = plain(&namer, addr);
                    let Line::Alloc { place, offset, .. } =
                        namer.line(&event(Action::Alloc, addr, 1), None)
                    else {
                        unreachable!("an alloc's line")
                    };
                    assert_eq!((place, offset), want, "at {addr}");
                }
            }
        }
    }

    /// The table answers as a map would, through growth, rebinding and the one address no
    /// slot can hold.
    #[test]
    fn addr_names_answer_as_a_map() {
        let mut t = AddrNames::new();
        let mut want = std::collections::HashMap::new();
        let mut x = 0x1234_5678u64;
        for n in 0..50_000u32 {
            // (a few thousand distinct addresses, many bound again)
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let addr = match n % 1000 {
                0 => EMPTY,
                1 => 0,
                _ => (x >> 52) << 9,
            };
            t.insert(addr, n);
            want.insert(addr, n);
            let probe = (x >> 40) << 9;
            let expect = want.get(&probe).map_or(Ref::Addr(probe), |&v| Ref::Name(v));
            assert_eq!(t.get(probe), expect);
        }
        for (&addr, &n) in &want {
            assert_eq!(t.get(addr), Ref::Name(n));
        }
        assert_eq!(t.len + 1, want.len());
    }

    #[test]
    fn names_run_like_memory_viz() {
        assert_eq!(name_of(0), "a");
        assert_eq!(name_of(25), "z");
        assert_eq!(name_of(26), "a1");
        assert_eq!(name_of(27 + 26), "b2");
    }
}
