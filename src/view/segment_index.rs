//! The segment timeline: reserved memory by segment over time, one band per segment from the
//! event that cudaMalloc'd (or mapped) it to the one that freed (or unmapped) it, stacked.
//!
//! Built in the same pass over the events as the allocation index
//! (`snapshot_index.rs`)
//! and tiled by the same code: each segment is an [`Alloc`] of an [`AllocIndex`] whose series
//! is the reserved bytes after each event, so a tile of it is bounded as the allocation tiles
//! are (a sample per pixel column, at most `MAX_DRAWN` segments one by one, the rest summed
//! into bands). Beside it, per segment, what the hover names: its address, stream, and
//! whether an expandable segment's mapping made it.

use std::collections::BTreeMap;

use serde::Serialize;

use super::event_series::EventSeries;
use super::index::{Alloc, AllocIndex, Marks, Tile, NO_CATEGORY};
use crate::analysis::sites::Sites;
use crate::analysis::timeline::Point;
use crate::model::snapshot::{Snapshot, StackId};

/// What the hover names of a segment, beside its size and lifetime (the tile's).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct SegmentFacts {
    /// Its base address (for a mapping: where the mapped range starts).
    pub address: u64,
    /// The stream it was allocated for.
    pub stream: i64,
    /// Made by `segment_map` (an expandable segment's pages), not `segment_alloc`.
    pub mapped: bool,
}

/// The segments of one device's trace, tiled as allocations are; `facts[i]` is
/// `index.allocs[i]`'s.
pub struct SegmentIndex {
    /// Segments as allocations; the series is the reserved bytes.
    pub index: AllocIndex,
    /// Address and stream of each.
    pub facts: Vec<SegmentFacts>,
}

/// A segment tile: the tile, and the facts of each segment it draws (in `drawn`'s order).
#[derive(Debug, Serialize)]
pub struct SegmentTile {
    /// The tile: samples of reserved bytes, segments drawn one by one, the rest banded.
    #[serde(flatten)]
    pub tile: Tile,
    /// `facts[k]` is `tile.drawn[k]`'s.
    pub facts: Vec<SegmentFacts>,
}

impl SegmentIndex {
    /// The tile of `[x0, x1]` on `axis`: as [`AllocIndex::tile_on`], bands by site.
    pub fn tile(
        &self,
        x0: f64,
        x1: f64,
        width: usize,
        height: usize,
        axis: super::index::Axis,
    ) -> SegmentTile {
        let tile = (self.index).tile_on(x0, x1, width, height, axis, super::index::BandBy::Site);
        let facts = tile
            .drawn
            .iter()
            .map(|d| self.facts[d.id as usize])
            .collect();
        SegmentTile { tile, facts }
    }
}

/// A segment while its events are read.
struct Open {
    alloc: Alloc,
    facts: SegmentFacts,
}

/// Segment allocs and maps paired with their frees and unmaps in event order. A range is
/// freed wherever it lies in what was made: an unmap of part of a mapping splits it (each
/// piece keeps the mapping's start), one over several mappings closes each.
#[derive(Default)]
pub struct SegmentPairing {
    made: Vec<Open>,
    /// Open segments by address.
    open: BTreeMap<u64, usize>,
}

impl SegmentPairing {
    /// Event `i` made `size` bytes at `addr` on `stream`.
    pub fn made(&mut self, i: usize, addr: u64, size: u64, stream: i64, stack: u32, mapped: bool) {
        if size == 0 {
            return;
        }
        self.open.insert(addr, self.made.len());
        self.made.push(Open {
            alloc: Alloc {
                start: i as u32,
                end: Alloc::NONE,
                size,
                origin: stack,
                free_origin: Alloc::NONE,
                site: 0,
                category: NO_CATEGORY,
                judged: [0; 2],
            },
            facts: SegmentFacts {
                address: addr,
                stream,
                mapped,
            },
        });
    }

    /// Event `i` freed (or unmapped) `size` bytes at `addr`.
    pub fn freed(&mut self, i: usize, addr: u64, size: u64, stream: i64, stack: u32) {
        let (mut addr, end) = (addr, addr.saturating_add(size));
        while addr < end {
            let covering = (self.open.range(..=addr).next_back())
                .map(|(&a, &k)| (a, k))
                .filter(|&(a, k)| a + self.made[k].alloc.size > addr);
            let Some((base, k)) = covering else {
                // made before the trace: the next open one (if any) bounds this piece
                let next = (self.open.range(addr..).next()).map_or(end, |(&a, _)| a.min(end));
                self.push_before(i, addr, next - addr, stream, stack);
                addr = next;
                continue;
            };
            self.open.remove(&base);
            let whole = self.made[k].alloc.size;
            let stop = (base + whole).min(end);
            // the pieces left standing keep the start and facts of what they were cut from
            let keep = |me: &mut Self, at: u64, len: u64| {
                if len > 0 {
                    let mut piece = Open {
                        alloc: me.made[k].alloc,
                        facts: me.made[k].facts,
                    };
                    piece.alloc.size = len;
                    piece.facts.address = at;
                    me.open.insert(at, me.made.len());
                    me.made.push(piece);
                }
            };
            keep(self, base, addr - base);
            keep(self, stop, base + whole - stop);
            let m = &mut self.made[k];
            m.alloc.size = stop - addr;
            m.alloc.end = i as u32;
            m.alloc.free_origin = stack;
            m.facts.address = addr;
            addr = stop;
        }
    }

    fn push_before(&mut self, i: usize, addr: u64, size: u64, stream: i64, stack: u32) {
        self.made.push(Open {
            alloc: Alloc {
                start: Alloc::NONE,
                end: i as u32,
                size,
                origin: Alloc::NONE,
                free_origin: stack,
                site: 0,
                category: NO_CATEGORY,
                judged: [0; 2],
            },
            facts: SegmentFacts {
                address: addr,
                stream,
                mapped: false,
            },
        });
    }

    /// The index: the segments the trace shows, and the snapshot's segments of `device` that
    /// no event touched (made before the trace, live at its end), stacked as allocations are
    /// (older than the trace at the bottom, then by the event that made them).
    pub fn finish(
        mut self,
        snap: &Snapshot,
        device: u32,
        sites: &mut Sites<'_>,
        reserved: EventSeries,
        x_is_time: bool,
        peak_reserved: Option<Point>,
    ) -> SegmentIndex {
        for s in snap.segments_on(device) {
            let touched = (self.open.range(..s.address + s.total_size).next_back())
                .is_some_and(|(&a, &k)| a + self.made[k].alloc.size > s.address);
            if !touched && s.total_size > 0 {
                self.made.push(Open {
                    alloc: Alloc {
                        start: Alloc::NONE,
                        end: Alloc::NONE,
                        size: s.total_size,
                        origin: s.stack.0,
                        free_origin: Alloc::NONE,
                        site: 0,
                        category: NO_CATEGORY,
                        judged: [0; 2],
                    },
                    facts: SegmentFacts {
                        address: s.address,
                        stream: s.stream,
                        mapped: s.is_expandable == Some(true),
                    },
                });
            }
        }
        let mut made = self.made;
        made.sort_by_key(|m| (m.alloc.start().map_or(0, |s| s as u64 + 1), m.facts.address));
        let mut labels: Vec<String> = Vec::new();
        let mut label_id: rustc_hash::FxHashMap<String, u32> = Default::default();
        let mut allocs = Vec::with_capacity(made.len());
        let mut facts = Vec::with_capacity(made.len());
        for m in made {
            let mut a = m.alloc;
            let label = match a.start() {
                Some(_) => {
                    let key = sites.site(StackId(a.origin));
                    sites.label(key, false)
                }
                None => "made before the trace".to_string(),
            };
            a.site = *label_id.entry(label).or_insert_with_key(|label| {
                labels.push(label.clone());
                labels.len() as u32 - 1
            });
            allocs.push(a);
            facts.push(m.facts);
        }
        SegmentIndex {
            index: AllocIndex {
                device,
                device_label: format!("cuda:{device}"),
                allocs,
                sites: labels,
                series: reserved,
                marks: Marks {
                    x_is_time,
                    peak_allocated: peak_reserved,
                    ooms: Vec::new(),
                    annotations: Vec::new(),
                },
            },
            facts,
        }
    }
}
