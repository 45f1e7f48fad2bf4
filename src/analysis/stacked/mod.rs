//! The Active Memory Timeline of `pytorch.org/memory_viz`, pre-aggregated for a fixed width.
//!
//! Every allocation in a device's trace is an interval (its `alloc` to its `free_requested`).
//! The N largest allocations or sites (bytes times the time they stay live: the N one can see)
//! become bands; all
//! other live bytes (smaller allocations, and what was live before the trace and never touched
//! by it) form one "other" band on top, so the top edge is the timeline's exact allocated bytes.
//!
//! A million events cannot be drawn one by one. The x range is cut into pixel columns, and in
//! each column the composition is sampled at the column's first, lowest, highest and last
//! event (as `decimate::min_max_envelope` does for lines): every spike the pixel grid can show
//! survives, and the peak drawn is the data's.
//!
//! It takes the device's timeline (its totals, not its series) and reads the events two or
//! three times, from wherever they are (a kept trace, or where the reading put them aside:
//! `TraceEvents`), keeping neither the events nor the allocations, only those live at once:
//! a 10 GB capture draws in bounded memory.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use rustc_hash::FxHashMap;
use serde::Serialize;

use crate::model::snapshot::{Action, Snapshot, StackId, TraceEvent, NO_TIME};
use crate::model::trace::TraceEvents;

mod columns;
mod origins;

use super::address_map::AddressMap;
use super::categories::{Judgement, PhaseWalk, Place};
use super::groups::{GroupBy, Grouper};
use super::sites::{Capture, Extra, MomentFinder, Origin, Sites, Tagger};
use super::timeline::{allocated_delta, AnnotationMark, Clock, OomMark, Point, Timeline};
#[cfg(test)]
use columns::column_picks;
use columns::ColumnPicks;
use origins::{OriginIds, OriginStats};

/// What one band of the stacked timeline stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BandBy {
    /// One band per allocation: the N that cover the most of the picture (bytes × time live).
    Allocation,
    /// One band per allocation site: the N with the most bytes live at once.
    Site,
}

/// One band of the stacked timeline: an allocation or a site, and its bytes over time.
#[derive(Debug, Serialize)]
pub struct Band {
    /// The site (`file:line:function`, `_memory_viz`'s frame filter).
    pub site: String,
    /// Bytes of the allocation; for a site, the most it held at once.
    pub bytes: u64,
    /// Allocations the band stands for (1 for an allocation).
    pub allocations: u64,
    /// Kept frames of the (first) allocation's stack, innermost first.
    pub stack: Vec<String>,
    /// x of the allocation and its free; None: before the trace began / still live at the end.
    pub alloc_x: Option<f64>,
    /// x of its `free_requested`; None while still live at the end (always None for a site).
    pub free_x: Option<f64>,
}

/// The composition just after one event.
#[derive(Debug, Serialize)]
pub struct Sample {
    /// 0-based index of the trace event the sample follows.
    pub index: usize,
    /// Seconds since `t0_us` when `x_is_time`, else the event index.
    pub x: f64,
    /// Allocated bytes (the top edge).
    pub total: i64,
    /// Bytes of each band, in band order; the rest of `total` is "other".
    pub bands: Vec<i64>,
}

/// A device's stacked timeline: the largest allocations (or sites) as bands, the rest as one.
#[derive(Debug, Serialize)]
pub struct Stacked {
    /// Device index of the trace.
    pub device: u32,
    /// Number of trace events.
    pub events: usize,
    /// Whether bands are allocations or sites.
    pub by: BandBy,
    /// Whether x is seconds since `t0_us` (else the event index).
    pub x_is_time: bool,
    /// Whether the trace has times (x may still be the event index).
    pub has_time: bool,
    /// `time_us` of the first event, in microseconds, when x is time.
    pub t0_us: Option<i64>,
    /// x of the first and last event.
    pub x_range: (f64, f64),
    /// Allocated bytes before the first event.
    pub initial_bytes: i64,
    /// Allocations the trace shows: its `alloc`s, plus frees of older ones.
    pub allocations: usize,
    /// Allocations in no band (drawn grey).
    pub other_allocations: usize,
    /// The bands, bottom first (oldest allocation, or first site, at the bottom).
    pub bands: Vec<Band>,
    /// The composition at each column's first, lowest, highest and last event, in event order.
    pub samples: Vec<Sample>,
    /// Where allocated bytes peaked (x as this picture's x); None without events.
    pub peak: Option<Point>,
    /// The trace's `oom` events, x as this picture's x.
    pub ooms: Vec<OomMark>,
    /// `external_annotations` marks, x as this picture's x.
    pub annotations: Vec<AnnotationMark>,
    /// What a band of `by: site` stands for (`site`, `user`, `category`, …).
    pub group_by: &'static str,
    /// The moment `--at` asked for, marked; None when not asked or not in the trace.
    pub moment: Option<MomentMark>,
}

/// A moment marked on the stacked timeline.
#[derive(Debug, Serialize)]
pub struct MomentMark {
    /// As asked (`peak`, `event 12`, `5.2s`, `NAME:end@2`).
    pub label: String,
    /// The trace event the moment follows.
    pub index: usize,
    /// Its x on this picture.
    pub x: f64,
    /// Allocated bytes right after it.
    pub bytes: i64,
}

/// How bands of `by: site` are grouped, and which moment to mark.
#[derive(Clone, Debug)]
pub struct Grouping {
    /// What a band is.
    pub by: GroupBy,
    /// What the grouping keeps of each allocation (its `extra`, with the annotations known).
    pub extra: Extra,
    /// The moment to mark: its label and how to find it.
    pub moment: Option<(String, Capture)>,
}

impl Grouping {
    /// By site, no moment marked.
    pub fn sites() -> Grouping {
        Grouping {
            by: GroupBy::Site,
            extra: Extra::Nothing,
            moment: None,
        }
    }
}

/// Events each pass holds back before taking them, while the slot of their address in the
/// table of open allocations is fetched (with millions open at once every lookup is a cache
/// miss: at 10 GB they were most of the first pass).
const LOOKAHEAD: usize = 16;

/// An allocation still open while the events are read (its `alloc` seen, its free not yet).
#[derive(Clone, Copy)]
struct Open {
    /// Its id: allocations are numbered in the order the trace shows them (an `alloc`, or a
    /// free of one allocated before the trace began).
    id: u32,
    start: u32,
    size: u64,
    stack: StackId,
    /// What the grouping keeps of it (`Tagger`'s id).
    extra: u32,
    /// x of its `alloc`.
    x: f64,
    /// Where it was made (when allocations are judged).
    made: Place,
}

impl Default for Open {
    fn default() -> Open {
        Open {
            id: 0,
            start: 0,
            size: 0,
            stack: StackId::MISSING,
            extra: 0,
            x: 0.0,
            made: Place::UNKNOWN,
        }
    }
}

/// Pairs each `alloc` with its `free_requested` by address, numbering the allocations the
/// same way on every pass over the events; a free without an alloc was allocated before the
/// trace began. Holds only the allocations open, never all of them.
#[derive(Default)]
struct Pairing {
    open: AddressMap<Open>,
    next: u32,
}

/// What an event did to the allocations.
enum Paired {
    /// An allocation begins; one still open at the same address (a file that never freed it)
    /// is displaced: never freed, live to the end.
    Alloc(Option<Open>),
    /// An allocation ends: the open one it was (`Some`), or one from before the trace
    /// (`None`), numbered `id`.
    Free(u32, Option<Open>),
    Neither,
}

impl Pairing {
    /// Event `i`, `e`, at `x`; `extra` tags a new allocation, made at `made`.
    fn event(&mut self, i: usize, e: &TraceEvent, x: f64, extra: u32, made: Place) -> Paired {
        match e.action {
            Action::Alloc => {
                let id = self.next;
                self.next += 1;
                let open = Open {
                    id,
                    start: i as u32,
                    size: e.size,
                    stack: e.stack,
                    extra,
                    x,
                    made,
                };
                Paired::Alloc(self.open.insert(e.addr, open))
            }
            Action::FreeRequested => match self.open.remove(e.addr) {
                Some(o) => Paired::Free(o.id, Some(o)),
                None => {
                    let id = self.next;
                    self.next += 1;
                    Paired::Free(id, None)
                }
            },
            _ => Paired::Neither,
        }
    }
}

/// One pass over a device's events, with each event's x and the allocated bytes after it.
struct Walk {
    clock: Clock,
    carried: i64,
    allocated: i64,
}

impl Walk {
    fn new(tl: &Timeline, x_is_time: bool) -> Walk {
        Walk {
            clock: Clock::new(if x_is_time { tl.t0_us } else { None }),
            carried: NO_TIME,
            allocated: tl.initial_allocated_bytes,
        }
    }

    /// Event `i`'s (x, allocated after it).
    #[inline]
    fn step(&mut self, i: usize, e: &TraceEvent) -> (f64, i64) {
        if e.time_us != NO_TIME {
            self.carried = e.time_us;
        }
        self.allocated += allocated_delta(e);
        (self.clock.x(i, self.carried), self.allocated)
    }
}

/// An allocation chosen as a band (by allocation).
#[derive(Clone, Copy)]
struct Chosen {
    start: Option<usize>,
    size: u64,
    stack: StackId,
    alloc_x: Option<f64>,
    free_x: Option<f64>,
}

/// The stacked timeline of a device with `n` bands over `columns` pixel columns, from its
/// timeline `tl` (series not needed) and its events in `events` (with the snapshot's stacks).
///
/// With `by_event` x is the event index (as `_memory_viz` draws it: idle stretches take no
/// room), else time when the trace has it.
///
/// The events are read two or three times (once more for bands by site) and never held:
/// memory is bounded by the allocations live at once and, by site, 4 bytes an allocation.
#[allow(clippy::too_many_arguments)]
pub fn stacked(
    snap: &Snapshot,
    n: usize,
    by: BandBy,
    grouping: Grouping,
    columns: usize,
    by_event: bool,
    mut tl: Timeline,
    events: &mut dyn TraceEvents,
) -> std::io::Result<Stacked> {
    let device = tl.device;
    let group_by = grouping.by.name();
    let moment_label = grouping.moment.as_ref().map(|(l, _)| l.clone());
    tl.series = Default::default(); // (not read: x and allocated come with the events)
    let has_time = tl.x_is_time;
    let event_count = events.count(device);
    let x_is_time = tl.x_is_time && !by_event;
    // x of the first and last event
    let x_range = match (event_count, x_is_time) {
        (0, _) => (0.0, 0.0),
        (_, true) => (
            0.0,
            Clock::new(tl.t0_us).x(event_count - 1, tl.last_time_us.unwrap_or(NO_TIME)),
        ),
        (_, false) => (0.0, (event_count - 1) as f64),
    };
    // annotations carry only a time: by event, each is placed at the first event at or after it
    let mut annotation_order: Vec<usize> = Vec::new();
    if by_event && tl.x_is_time {
        annotation_order = (0..tl.annotations.len()).collect();
        annotation_order.sort_by(|&a, &b| tl.annotations[a].x.total_cmp(&tl.annotations[b].x));
        tl.x_is_time = false;
        for o in &mut tl.ooms {
            o.x = o.index as f64;
        }
        if let Some(p) = tl.peak_allocated.as_mut() {
            p.x = p.index as f64;
        }
    }

    // pass 1: pair the allocations, pick the events to sample (first, min, max and last of
    // each pixel column), find the moment; by allocation, keep the n largest; by site, note
    // where each allocation came from
    let mut pairing = Pairing::default();
    let mut picks = ColumnPicks::new(x_range, columns.max(1));
    let mut origins = OriginIds::new(
        &grouping.extra,
        grouping.by.needs_judgements(),
        snap.stacks.stack_count(),
    );
    // where each allocating and freeing event ran, when allocations are judged
    let phases = grouping.by.phases(snap);
    let mut phase_walk = PhaseWalk::default();
    // (the strings the grouping reads are known once the events are read)
    let mut grouper = Grouper::new(snap, device, grouping.by, Vec::new());
    let mut tagger = Tagger::new(grouping.extra);
    let peak_index = tl.peak_allocated.as_ref().map(|p| p.index);
    let mut finder = grouping.moment.as_ref().map(|(_, c)| MomentFinder::new(*c));
    let mut moment = None;
    let mut walk = Walk::new(&tl, x_is_time);
    let mut time_walk = Walk::new(&tl, true);
    let mut placed = 0; // annotations placed (by event)
                        // the n largest (the earlier first among equals), kept in a heap whose top is the least
    let mut largest: BinaryHeap<Reverse<Largest>> = BinaryHeap::with_capacity(n + 1);
    let mut chosen: FxHashMap<u32, Chosen> = FxHashMap::default();
    // by site: each allocation's origin (an id of `origins`), and those from before the trace
    let mut origin_of: Vec<u32> = Vec::new();
    let mut before: Vec<(u32, u64)> = Vec::new();
    // the events that free an allocation from before the trace (numbered without pairing by
    // the last pass)
    let mut unpaired_frees: Vec<usize> = Vec::new();
    // by site: the area (below) each origin's allocations cover (to rank sites as
    // allocations), how many there are and the first of them
    let mut origin_stats: Vec<OriginStats> = Vec::new();
    let last = event_count;
    // "largest" on the picture: bytes times the x span they stay live, so a band is something
    // one can see (the biggest allocations of a step are often its shortest-lived
    // temporaries, a hairline at any width)
    let area = |size: u64, x0: Option<f64>, x1: Option<f64>| -> f64 {
        let x0 = x0.unwrap_or(x_range.0);
        let x1 = x1.unwrap_or(x_range.1);
        let span = if last > 1 { (x1 - x0).max(0.0) } else { 1.0 };
        size as f64 * span.max(f64::MIN_POSITIVE)
    };
    // allocation `id` (`open` unless from before the trace), `size` bytes, ends (freed by a
    // stack at x, or still live at the end), judged so (when allocations are)
    let mut close = |id: u32,
                     open: Option<Open>,
                     size: u64,
                     free: Option<(StackId, f64)>,
                     judged: Option<Judgement>| {
        let start_x = open.map(|o| o.x);
        match by {
            BandBy::Allocation => {
                let free_x = free.map(|(_, x)| x);
                let candidate = Largest(area(size, start_x, free_x), id);
                let keep = match largest.peek() {
                    _ if largest.len() < n => true,
                    Some(Reverse(least)) => candidate > *least,
                    None => false,
                };
                if keep {
                    if largest.len() >= n {
                        if let Some(Reverse(out)) = largest.pop() {
                            chosen.remove(&out.1);
                        }
                    }
                    largest.push(Reverse(candidate));
                    let stack = match (open, free) {
                        (Some(o), _) => o.stack,
                        (None, Some((s, _))) => s,
                        (None, None) => StackId::MISSING,
                    };
                    chosen.insert(
                        id,
                        Chosen {
                            start: open.map(|o| o.start as usize),
                            size,
                            stack,
                            alloc_x: start_x,
                            free_x,
                        },
                    );
                }
            }
            BandBy::Site => {
                let origin = match open {
                    Some(o) => origins.id(o.stack, o.extra, judged),
                    None => origins.id(free.map_or(StackId::MISSING, |f| f.0), 0, judged),
                };
                if origin_of.len() <= id as usize {
                    origin_of.resize(id as usize + 1, u32::MAX);
                }
                origin_of[id as usize] = origin;
                if origin_stats.len() <= origin as usize {
                    origin_stats.resize(origin as usize + 1, OriginStats::default());
                }
                let st = &mut origin_stats[origin as usize];
                st.area += area(size, start_x, free.map(|(_, x)| x));
                st.count += 1;
                st.first = st.first.min(id);
            }
        }
        if open.is_none() {
            before.push((id, size));
        }
    };
    // event `i`, `e`; `tag`: what an `alloc` carries, or what an `annotate` gives its
    // allocation (tagged as the events are read, in their order)
    let mut take = |pairing: &mut Pairing, i: usize, e: &TraceEvent, tag: Option<u32>| {
        let (x, allocated) = walk.step(i, e);
        if !annotation_order.is_empty() {
            let (time_x, _) = time_walk.step(i, e);
            while let Some(&k) = annotation_order.get(placed) {
                if tl.annotations[k].x > time_x {
                    break;
                }
                tl.annotations[k].x = i as f64;
                placed += 1;
            }
        }
        picks.push(i, x, allocated);
        if let Some(f) = finder.as_mut() {
            if f.at(i, e, peak_index) {
                moment = Some((i, x, allocated));
            }
        }
        let place = match (&phases, e.action) {
            (Some(t), Action::Alloc | Action::FreeRequested) => phase_walk.event(t, e.stack),
            _ => Place::UNKNOWN,
        };
        let judge = |made: Place, freed: Option<Place>| {
            phases.as_ref().map(|_| Judgement::new(made, freed))
        };
        match pairing.event(i, e, x, tag.unwrap_or(0), place) {
            Paired::Alloc(displaced) => {
                if let Some(o) = displaced {
                    close(o.id, Some(o), o.size, None, judge(o.made, None));
                }
            }
            Paired::Free(id, open) => {
                if open.is_none() {
                    unpaired_frees.push(i);
                }
                let size = open.map_or(e.size, |o| o.size);
                let made = open.map_or(Place::BEFORE_TRACE, |o| o.made);
                close(id, open, size, Some((e.stack, x)), judge(made, Some(place)));
            }
            Paired::Neither => {
                if e.action == Action::Annotate {
                    if let (Some(tag), Some(o)) = (tag, pairing.open.get_mut(e.addr)) {
                        o.extra = tag;
                    }
                }
            }
        }
    };
    let mut pending: VecDeque<(usize, TraceEvent, Option<u32>)> =
        VecDeque::with_capacity(LOOKAHEAD + 1);
    events.visit(device, &mut |i, e, _, aux| {
        let tag = match e.action {
            Action::Alloc => Some(tagger.tag(e, aux)),
            Action::Annotate => tagger.retag(aux),
            _ => None,
        };
        pairing.open.prefetch(e.addr);
        pending.push_back((i, *e, tag));
        if pending.len() > LOOKAHEAD {
            let (i, e, tag) = pending.pop_front().expect("not empty");
            take(&mut pairing, i, &e, tag);
        }
        Ok(())
    })?;
    for (i, e, tag) in pending.drain(..) {
        take(&mut pairing, i, &e, tag);
    }
    for k in annotation_order.iter().skip(placed) {
        tl.annotations[*k].x = event_count as f64;
    }
    // still live at the end
    let mut still_open: Vec<Open> = pairing.open.values().copied().collect();
    still_open.sort_unstable_by_key(|o| o.id);
    for o in still_open {
        let judged = phases.as_ref().map(|_| Judgement::new(o.made, None));
        close(o.id, Some(o), o.size, None, judged);
    }
    let intervals = pairing.next as usize;
    let picks = picks.finish();

    let mut sites = Sites::new(snap);
    let mut bands: Vec<Band> = Vec::new();
    // the band of each allocation: by id (allocations), or by origin (sites)
    let mut band_of_id: FxHashMap<u32, u32> = FxHashMap::default();
    let mut band_of_origin: Vec<u32> = Vec::new();
    match by {
        BandBy::Allocation => {
            let mut order: Vec<(u32, Chosen)> = chosen.into_iter().collect();
            // stacked in order of allocation, the oldest at the bottom
            order.sort_by_key(|(k, c)| (c.start.map_or(0, |s| s + 1), *k));
            for (k, c) in order {
                band_of_id.insert(k, bands.len() as u32);
                let site = sites.site(c.stack);
                bands.push(Band {
                    site: sites.label(site, false),
                    bytes: c.size,
                    allocations: 1,
                    stack: sites.frames(c.stack),
                    alloc_x: c.alloc_x,
                    free_x: c.free_x,
                });
            }
        }
        BandBy::Site => {
            grouper.set_strings(tagger.into_strings());
            let mut labels: Vec<String> = Vec::new();
            let mut label_id: FxHashMap<String, u32> = FxHashMap::default();
            let origins = origins.origins;
            let site_of_origin: Vec<u32> = (origins.iter())
                .map(|&(stack, extra, judged)| {
                    let origin = Origin {
                        stack,
                        extra,
                        judged,
                    };
                    let (key, site) = grouper.label(origin);
                    *label_id.entry(key).or_insert_with(|| {
                        labels.push(match site {
                            Some(k) => grouper.site_label(k, false),
                            None => grouper.label(origin).0,
                        });
                        labels.len() as u32 - 1
                    })
                })
                .collect();
            // ranked as allocations are: by the area they cover (bytes times the x span each
            // allocation stays live), so the bands are the sites one can see and the grey rest
            // is as small as n bands can make it (the most held at once would pick a site
            // whose one large temporary is a hairline); the most each band held at once is
            // found by the last pass
            let mut per_site: Vec<OriginStats> = vec![OriginStats::default(); labels.len()];
            for (origin, st) in origin_stats.iter().enumerate() {
                let t = &mut per_site[site_of_origin[origin] as usize];
                t.area += st.area;
                t.count += st.count;
                t.first = t.first.min(st.first);
            }
            let mut ranked: Vec<(u32, OriginStats)> = (per_site.into_iter().enumerate())
                .filter(|(_, st)| st.count > 0)
                .map(|(k, st)| (k as u32, st))
                .collect();
            ranked.sort_by(|(_, a), (_, b)| {
                b.area
                    .partial_cmp(&a.area)
                    .unwrap_or(std::cmp::Ordering::Equal)
                    .then(a.first.cmp(&b.first))
            });
            ranked.truncate(n);
            // stacked in order of their first allocation, the oldest at the bottom
            ranked.sort_by_key(|(_, st)| st.first);
            let mut band_of_site: FxHashMap<u32, u32> = FxHashMap::default();
            for (key, st) in ranked {
                band_of_site.insert(key, bands.len() as u32);
                let stack = origins[origin_of[st.first as usize] as usize].0;
                bands.push(Band {
                    site: labels[key as usize].clone(),
                    bytes: 0,
                    allocations: st.count,
                    stack: sites.frames(stack),
                    alloc_x: None,
                    free_x: None,
                });
            }
            band_of_origin = (site_of_origin.iter())
                .map(|s| band_of_site.get(s).copied().unwrap_or(u32::MAX))
                .collect();
        }
    }
    let band_of = |id: u32| -> u32 {
        match by {
            BandBy::Allocation => band_of_id.get(&id).copied().unwrap_or(u32::MAX),
            BandBy::Site => band_of_origin[origin_of[id as usize] as usize],
        }
    };

    // the last pass: the composition at each picked event
    let mut samples = Vec::with_capacity(picks.len());
    let mut level = vec![0i64; bands.len()];
    let mut banded = 0usize;
    for &(k, size) in &before {
        let b = band_of(k);
        if b != u32::MAX {
            level[b as usize] += size as i64;
        }
    }
    let mut most = level.clone();
    // the allocations in a band still open, by address: (band, bytes). The others need no
    // pairing: allocations are numbered in order of their `alloc`s and of the frees the first
    // pass found unpaired, and an `alloc` at an address displaces what was open there (live
    // to the end) whether banded or not
    let mut open_banded: AddressMap<(u32, u64)> = AddressMap::new();
    let mut unpaired = unpaired_frees.iter().peekable();
    let mut next_id = 0u32;
    let mut walk = Walk::new(&tl, x_is_time);
    let mut next = picks.iter().peekable();
    let mut take = |open_banded: &mut AddressMap<(u32, u64)>, i: usize, e: &TraceEvent| {
        let (x, allocated) = walk.step(i, e);
        match e.action {
            Action::Alloc => {
                let b = band_of(next_id);
                next_id += 1;
                if b != u32::MAX {
                    banded += 1;
                    level[b as usize] += e.size as i64;
                    most[b as usize] = most[b as usize].max(level[b as usize]);
                    open_banded.insert(e.addr, (b, e.size));
                } else if !open_banded.is_empty() {
                    open_banded.remove(e.addr);
                }
            }
            Action::FreeRequested => {
                if unpaired.next_if(|&&k| k == i).is_some() {
                    let b = band_of(next_id);
                    next_id += 1;
                    if b != u32::MAX {
                        banded += 1;
                        level[b as usize] -= e.size as i64;
                    }
                } else if let Some((b, size)) = open_banded.remove(e.addr) {
                    level[b as usize] -= size as i64;
                }
            }
            _ => {}
        }
        if next.peek() == Some(&&i) {
            next.next();
            samples.push(Sample {
                index: i,
                x,
                total: allocated,
                bands: level.clone(),
            });
        }
    };
    let mut pending: VecDeque<(usize, TraceEvent)> = VecDeque::with_capacity(LOOKAHEAD + 1);
    events.visit(device, &mut |i, e, _, _| {
        open_banded.prefetch(e.addr);
        pending.push_back((i, *e));
        if pending.len() > LOOKAHEAD {
            let (i, e) = pending.pop_front().expect("not empty");
            take(&mut open_banded, i, &e);
        }
        Ok(())
    })?;
    for (i, e) in pending.drain(..) {
        take(&mut open_banded, i, &e);
    }
    if matches!(by, BandBy::Site) {
        // a site's band says the most it held at once
        for (band, most) in bands.iter_mut().zip(most) {
            band.bytes = most.max(0) as u64;
        }
    }
    let moment = moment
        .zip(moment_label)
        .map(|((i, x, bytes), label)| MomentMark {
            label,
            index: i,
            x,
            bytes,
        });
    Ok(Stacked {
        group_by,
        moment,
        device,
        events: event_count,
        by,
        x_is_time: tl.x_is_time,
        has_time,
        t0_us: tl.t0_us,
        x_range,
        initial_bytes: tl.initial_allocated_bytes,
        allocations: intervals,
        other_allocations: intervals - banded,
        bands,
        samples,
        peak: tl.peak_allocated,
        ooms: tl.ooms,
        annotations: tl.annotations,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::timeline::timeline;
    use crate::formats::snapshot_fixture as fixture;

    #[test]
    fn top_edge_is_allocated_and_bands_fit_under_it() {
        let snap = fixture("cs336_medium_512_training.pickle");
        let tl = timeline(&snap, 0, true);
        let allocated: Vec<i64> = tl.points().map(|p| p.allocated).collect();
        for by in [BandBy::Allocation, BandBy::Site] {
            for by_event in [false, true] {
                let series = timeline(&snap, 0, false);
                let s = stacked(
                    &snap,
                    20,
                    by,
                    Grouping::sites(),
                    400,
                    by_event,
                    series,
                    &mut &snap,
                )
                .unwrap();
                assert!(!s.bands.is_empty() && s.bands.len() <= 20);
                assert!(s.samples.len() <= 4 * 400 && s.samples.len() > 100);
                for sm in &s.samples {
                    assert_eq!(sm.total, allocated[sm.index]);
                    assert!(sm.bands.iter().all(|&b| b >= 0));
                    assert!(sm.bands.iter().sum::<i64>() <= sm.total, "{by:?}");
                }
                // the peak sample is among the picks: the top edge reaches the true peak
                let peak = tl.peak_allocated.unwrap();
                assert_eq!(s.samples.iter().map(|m| m.total).max(), Some(peak.bytes));
                assert_eq!(s.x_is_time, !by_event && tl.x_is_time);
            }
        }
        // allocation bands: the final composition adds up with what is still live
        let tl = timeline(&snap, 0, true);
        let s = stacked(
            &snap,
            5,
            BandBy::Allocation,
            Grouping::sites(),
            100,
            true,
            tl,
            &mut &snap,
        )
        .unwrap();
        let last = s.samples.last().unwrap();
        for (b, &bytes) in s.bands.iter().zip(&last.bands) {
            assert_eq!(bytes != 0, b.free_x.is_none(), "{}", b.site);
        }
    }

    /// A snapshot of one device whose trace is `events` (action, address, size), on stream 0.
    fn one_trace(events: &[(Action, u64, u64)]) -> Snapshot {
        use crate::model::snapshot::{DeviceTrace, TraceEvent};
        let mut t = DeviceTrace::default();
        t.stream_index(0).unwrap();
        for &(action, addr, size) in events {
            t.events.push(TraceEvent {
                addr,
                size,
                action,
                ..TraceEvent::default()
            });
        }
        let mut snap = Snapshot::default();
        snap.traces.push(t);
        snap
    }

    /// An address allocated twice without a free between (a file that contradicts itself):
    /// the first allocation is never freed, live to the end, in both kinds of bands.
    #[test]
    fn an_allocation_displaced_at_its_address_stays_live() {
        let snap = one_trace(&[
            (Action::Alloc, 0x1000, 512),
            (Action::Alloc, 0x1000, 1024),
            (Action::FreeRequested, 0x1000, 1024),
            (Action::Alloc, 0x2000, 2048),
        ]);
        for by in [BandBy::Allocation, BandBy::Site] {
            let tl = timeline(&snap, 0, false);
            let s = stacked(&snap, 5, by, Grouping::sites(), 10, true, tl, &mut &snap).unwrap();
            assert_eq!(s.allocations, 3, "{by:?}");
            let last = s.samples.last().unwrap();
            assert_eq!(last.total - s.initial_bytes, 512 + 2048, "{by:?}");
            assert_eq!(last.bands.iter().sum::<i64>(), 512 + 2048, "{by:?}");
        }
    }

    /// The last pass pairs only the allocations in a band: each band holds its bytes exactly
    /// from its alloc to its free, whichever allocations are banded, with an allocation from
    /// before the trace and one displaced at its address by another (banded or not).
    #[test]
    fn each_band_holds_its_bytes_from_alloc_to_free_whatever_else_is_banded() {
        let snap = one_trace(&[
            (Action::FreeRequested, 0x3000, 4096),
            (Action::Alloc, 0x1000, 512),
            (Action::Alloc, 0x1000, 1024),
            (Action::FreeRequested, 0x1000, 1024),
            (Action::Alloc, 0x2000, 2048),
            (Action::Alloc, 0x1000, 256),
            (Action::FreeRequested, 0x1000, 256),
        ]);
        for n in 1..=5 {
            let tl = timeline(&snap, 0, false);
            let by = BandBy::Allocation;
            let s = stacked(&snap, n, by, Grouping::sites(), 20, true, tl, &mut &snap).unwrap();
            assert_eq!(s.bands.len(), n, "{n}");
            assert_eq!(s.samples.len(), 7, "{n}");
            for sm in &s.samples {
                for (b, &bytes) in s.bands.iter().zip(&sm.bands) {
                    let live =
                        b.alloc_x.is_none_or(|a| a <= sm.x) && b.free_x.is_none_or(|f| f > sm.x);
                    let want = if live { b.bytes as i64 } else { 0 };
                    assert_eq!(
                        bytes, want,
                        "{n} bands, event {}, {:?}",
                        sm.index, b.alloc_x
                    );
                }
            }
            assert_eq!(s.other_allocations, 5 - n, "{n}");
        }
    }

    #[test]
    fn column_picks_keep_a_one_event_spike() {
        let x: Vec<f64> = (0..1000).map(|i| i as f64).collect();
        let mut y = vec![10i64; 1000];
        y[501] = 1_000_000;
        let picks = column_picks(&x, &y, 10);
        assert!(picks.contains(&501));
        assert!(picks.len() <= 40);
        assert!(picks.windows(2).all(|w| w[0] < w[1]));
    }
}

/// An interval by area (f64 in total order), the earlier one greater among equals.
#[derive(Clone, Copy, PartialEq)]
struct Largest(f64, u32);

impl Eq for Largest {}

impl PartialOrd for Largest {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Largest {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0).then(other.1.cmp(&self.1))
    }
}
