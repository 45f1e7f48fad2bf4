//! Every allocation of one device's events, indexed once when `memtrack view` starts, and the
//! tiles of the Active Memory Timeline cut from it for any window and pixel width.
//!
//! The index keeps per allocation its start and end event, size, origin and site (32 bytes),
//! and per event its x and the allocated bytes after it, in a temporary file
//! ([`EventSeries`]): never the decoded events. Its input is any run of allocs and frees
//! paired by address ([`Pairing`]): an allocator snapshot's trace (`snapshot_index::build`:
//! the device's `Timeline`; the events stay where the reading put them aside,
//! `formats::event_spool`) or a torch.profiler trace's `[memory]` events (`view::profile`). An allocation's origin is
//! what made it: a snapshot's stack, a profiler trace's op.
//!
//! A tile is what a view `width` pixels wide can show of `[x0, x1]`: one sample per pixel
//! column (its event of most allocated bytes, as `analysis::stacked` keeps a column's
//! extremes, so every peak shows); the allocations at least a pixel tall and live at a sample
//! are sent one by one (the largest by area when more than [`MAX_DRAWN`]); every other
//! allocation live at a sample is summed into its site's band, or the "other" band past
//! [`MAX_BANDS`] sites. Nothing is dropped: at each sample the drawn allocations, the bands and
//! the rest (allocations older than the trace that it never frees) add up to the timeline's
//! allocated bytes.

use rustc_hash::FxHashMap;
use serde::Serialize;

use super::event_series::EventSeries;
use super::ranges::{ranges, Range};
use crate::analysis::categories::{Category, Judgement, Place};
use crate::analysis::timeline::{AnnotationMark, OomMark, Point};

/// At most this many allocations are sent one by one in a tile.
pub const MAX_DRAWN: usize = 6000;
/// At most this many site bands in a tile; the rest of the small allocations is one band.
pub const MAX_BANDS: usize = 12;
/// The widest tile asked for, in pixels (a request's bound).
pub const MAX_WIDTH: usize = 8192;

/// One allocation as the trace shows it. `NONE`: before the trace began / still live at its end.
#[derive(Clone, Copy, Debug)]
pub struct Alloc {
    /// The event that allocated it.
    pub start: u32,
    /// The event that freed it (`free_requested`).
    pub end: u32,
    /// Bytes requested.
    pub size: u64,
    /// What allocated it: a snapshot's [`StackId`], a profiler trace's origin id
    /// (`view::profile`); [`Alloc::NONE`] before the trace.
    pub origin: u32,
    /// What freed it ([`Alloc::NONE`] while live at the end).
    pub free_origin: u32,
    /// Index into [`AllocIndex::sites`].
    pub site: u32,
    /// Index into [`CATEGORIES`] (`top --group-by category`'s rules); [`NO_CATEGORY`] for an
    /// input without stacks (a profiler trace). Fits the struct's padding: still 32 bytes.
    pub category: u8,
    /// How it was judged ([`Judgement::to_bytes`]: the rule the category came from); in the
    /// padding too.
    pub judged: [u8; 2],
}

/// The categories an allocation can have, in the order the page stacks its legend.
pub const CATEGORIES: [&str; 7] = {
    let mut names = [""; 7];
    let mut i = 0;
    while i < 7 {
        names[i] = Category::ALL[i].name();
        i += 1;
    }
    names
};

/// An allocation of an input that has no categories.
pub const NO_CATEGORY: u8 = u8::MAX;

/// What the page's x stands for: the timeline's own x (seconds, or the event index when the
/// capture has no times), or the event index whatever the capture has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Axis {
    /// Seconds since the first event (the event index without times).
    Own,
    /// The event index: every event one step, as `plot --stacked` spreads them.
    Event,
}

/// How a tile sums the allocations too small to draw: into a band per site, or per category.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BandBy {
    /// Bands by site (the op for a profiler trace).
    Site,
    /// Bands by category.
    Category,
}

impl Alloc {
    /// Neither started nor ended in the trace.
    pub const NONE: u32 = u32::MAX;

    /// The allocating event, if in the trace.
    pub fn start(&self) -> Option<usize> {
        (self.start != Alloc::NONE).then_some(self.start as usize)
    }

    /// The freeing event, if in the trace.
    pub fn end(&self) -> Option<usize> {
        (self.end != Alloc::NONE).then_some(self.end as usize)
    }
}

/// Every allocation of one device's trace, in stacking order (those older than the trace
/// first, then by allocating event), with the device's timeline.
pub struct AllocIndex {
    /// The device (a snapshot's device index; 0 for a profiler trace, which names it in
    /// `device_label`).
    pub device: u32,
    /// `cuda:0`, `cpu`, … as the page names the device.
    pub device_label: String,
    /// The allocations, in stacking order: an allocation's id is its place here.
    pub allocs: Vec<Alloc>,
    /// Site labels (`file:line:function`), as `_memory_viz` and `top` name sites.
    pub sites: Vec<String>,
    /// x of each event (seconds since the first, or the event index) and the allocated bytes
    /// after it.
    pub series: EventSeries,
    /// Peak, OOMs and annotations.
    pub marks: Marks,
}

/// What every allocation's details begin with, snapshot's or trace's alike.
#[derive(Debug, serde::Serialize)]
pub struct AllocSpan {
    /// Its id.
    pub id: u32,
    /// Bytes requested.
    pub size: u64,
    /// Its site (for a trace: the op it was made in).
    pub site: String,
    /// The event that allocated it; None: before the trace.
    pub start_event: Option<usize>,
    /// The event that freed it; None: live at the end.
    pub end_event: Option<usize>,
    /// x of both (seconds or event index, as the timeline's).
    pub start_x: Option<f64>,
    /// x of its free.
    pub end_x: Option<f64>,
    /// Whether x is seconds.
    pub x_is_time: bool,
}

impl AllocIndex {
    /// Allocation `id`'s span; None past the last.
    pub fn span(&self, id: usize) -> Option<AllocSpan> {
        let a = self.allocs.get(id)?;
        Some(AllocSpan {
            id: id as u32,
            size: a.size,
            site: self.sites[a.site as usize].clone(),
            start_event: a.start(),
            end_event: a.end(),
            start_x: a.start().map(|i| self.series.x(i)),
            end_x: a.end().map(|i| self.series.x(i)),
            x_is_time: self.marks.x_is_time,
        })
    }
}

/// What the timeline marks besides the allocations.
pub struct Marks {
    /// Whether x is seconds (else the event index).
    pub x_is_time: bool,
    /// The first event of most allocated bytes.
    pub peak_allocated: Option<Point>,
    /// Failed allocations.
    pub ooms: Vec<OomMark>,
    /// Annotation ranges' starts and ends, in time order.
    pub annotations: Vec<AnnotationMark>,
}

/// Allocs and frees of one device, in event order, paired by address into [`Alloc`]s; when
/// `judging`, each judged (its category) from where it was made and freed.
#[derive(Default)]
pub struct Pairing {
    allocs: Vec<Alloc>,
    /// The open allocations by address: id, and where it was made.
    open: FxHashMap<u64, (u32, Place)>,
    judging: bool,
}

impl Pairing {
    /// A pairing that judges each allocation.
    pub fn judging() -> Pairing {
        Pairing {
            judging: true,
            ..Pairing::default()
        }
    }

    /// Event `i` allocated `size` bytes at `addr`, made at `made`.
    pub fn alloc(&mut self, i: usize, addr: u64, size: u64, origin: u32, made: Place) {
        self.open.insert(addr, (self.allocs.len() as u32, made));
        self.allocs.push(Alloc {
            start: i as u32,
            end: Alloc::NONE,
            size,
            origin,
            free_origin: Alloc::NONE,
            site: 0,
            category: NO_CATEGORY,
            judged: [0; 2],
        });
    }

    /// Event `i`, at `freed`, freed the `size` bytes at `addr`.
    pub fn free(&mut self, i: usize, addr: u64, size: u64, origin: u32, freed: Place) {
        let (id, made) = match self.open.remove(&addr) {
            Some((id, made)) => {
                let a = &mut self.allocs[id as usize];
                a.end = i as u32;
                a.free_origin = origin;
                (id, made)
            }
            // allocated before the trace began: its free says where, not what made it
            None => {
                self.allocs.push(Alloc {
                    start: Alloc::NONE,
                    end: i as u32,
                    size,
                    origin: Alloc::NONE,
                    free_origin: origin,
                    site: 0,
                    category: NO_CATEGORY,
                    judged: [0; 2],
                });
                (self.allocs.len() as u32 - 1, Place::BEFORE_TRACE)
            }
        };
        self.judge(id, made, Some(freed));
    }

    fn judge(&mut self, id: u32, made: Place, freed: Option<Place>) {
        if self.judging {
            let j = Judgement::new(made, freed);
            let a = &mut self.allocs[id as usize];
            a.category = j.category().index();
            a.judged = j.to_bytes();
        }
    }

    /// The allocations in stacking order, each given the site `label` names for its origin
    /// (the freeing one for an allocation older than the trace, said so); the site labels.
    pub fn finish(mut self, mut label: impl FnMut(u32) -> String) -> (Vec<Alloc>, Vec<String>) {
        // still live at the end
        let open: Vec<(u32, Place)> = self.open.drain().map(|(_, v)| v).collect();
        for (id, made) in open {
            self.judge(id, made, None);
        }
        let mut allocs = self.allocs;
        // older than the trace at the bottom, as `_memory_viz` stacks them; the sort is stable
        allocs.sort_by_key(|a| a.start().map_or(0, |s| s as u64 + 1));
        let mut labels: Vec<String> = Vec::new();
        let mut label_id: FxHashMap<String, u32> = FxHashMap::default();
        let mut by_origin: FxHashMap<(u32, bool), u32> = FxHashMap::default();
        for a in &mut allocs {
            let before = a.start().is_none();
            let origin = if before { a.free_origin } else { a.origin };
            a.site = *by_origin.entry((origin, before)).or_insert_with(|| {
                let mut text = label(origin);
                if before {
                    text = format!("freed at {text} (allocated before the trace)");
                }
                *label_id.entry(text.clone()).or_insert_with(|| {
                    labels.push(text);
                    labels.len() as u32 - 1
                })
            });
        }
        (allocs, labels)
    }
}

/// The samples of a tile: one event per pixel column that has any.
#[derive(Debug, Default, Serialize)]
pub struct Samples {
    /// x of each sample's event.
    pub x: Vec<f64>,
    /// The event index.
    pub event: Vec<u32>,
    /// Allocated bytes right after it (the top edge).
    pub total: Vec<i64>,
}

/// An allocation drawn on its own: its id, and the samples it is live at.
#[derive(Debug, Serialize)]
pub struct Drawn {
    /// Its id (place in the index: the stacking order).
    pub id: u32,
    /// Bytes requested.
    pub size: u64,
    /// Index into the tile's `sites`.
    pub site: u32,
    /// Its origin: the stack id, or a profiler trace's origin id (searches name them).
    pub stack: u32,
    /// Index into [`CATEGORIES`]; None for an input without categories.
    pub category: Option<u8>,
    /// x of its allocation; None: before the trace.
    pub t0: Option<f64>,
    /// x of its free; None: live at the end.
    pub t1: Option<f64>,
    /// The first sample it is live at.
    pub j0: u32,
    /// The sample after the last it is live at.
    pub j1: u32,
}

/// Small allocations of one site (or of many: `site` None) summed, at each sample.
#[derive(Debug, Serialize)]
pub struct Band {
    /// Index into the tile's `sites`; None for the band of every other small allocation, and
    /// for every band of a tile banded by category.
    pub site: Option<u32>,
    /// Index into [`CATEGORIES`] for a tile banded by category.
    pub category: Option<u8>,
    /// Allocations it sums over the window.
    pub allocations: u64,
    /// Bytes at each sample.
    pub bytes: Vec<i64>,
}

/// What a view of `[x0, x1]` at `width` pixels shows.
#[derive(Debug, Serialize)]
pub struct Tile {
    /// The window asked for.
    pub x0: f64,
    /// Its end.
    pub x1: f64,
    /// Events in the window.
    pub events: usize,
    /// The samples.
    pub samples: Samples,
    /// Bytes an allocation needs to be drawn on its own (a pixel at the tile's height).
    pub min_bytes: u64,
    /// Allocations live at a sample, in all.
    pub live_allocations: usize,
    /// The drawn allocations, in stacking order (bottom first).
    pub drawn: Vec<Drawn>,
    /// The bands over the drawn ones, bottom first; the last is every other small allocation.
    pub bands: Vec<Band>,
    /// Bytes at each sample that no allocation of the trace accounts for (older than the
    /// trace and never freed in it), drawn at the top.
    pub untracked: Vec<i64>,
    /// Site labels the tile uses.
    pub sites: Vec<String>,
}

impl AllocIndex {
    /// The events of the trace.
    pub fn events(&self) -> usize {
        self.series.len()
    }

    /// The event range whose x falls in `[x0, x1]`, widened by the event before (the state
    /// the window starts in).
    fn event_range(&self, x0: f64, x1: f64, axis: Axis) -> (usize, usize) {
        let x = &self.series;
        let (lo, hi) = match axis {
            Axis::Own => (
                x.partition_point(|v| v < x0),
                x.partition_point(|v| v <= x1),
            ),
            Axis::Event => (
                (x0.max(0.0).ceil() as usize).min(x.len()),
                ((x1.max(-1.0).floor() + 1.0) as usize).min(x.len()),
            ),
        };
        let lo = lo.saturating_sub(1);
        (lo, hi.max(lo + 1).min(x.len()))
    }

    /// x of event `i` on `axis`.
    pub fn x_on(&self, axis: Axis, i: usize) -> f64 {
        match axis {
            Axis::Own => self.series.x(i),
            Axis::Event => i as f64,
        }
    }

    /// The tile of `[x0, x1]` at `width` pixel columns and `height` pixels, x on the
    /// timeline's own axis, bands by site.
    pub fn tile(&self, x0: f64, x1: f64, width: usize, height: usize) -> Tile {
        self.tile_on(x0, x1, width, height, Axis::Own, BandBy::Site)
    }

    /// The tile of `[x0, x1]` on `axis`, small allocations banded `by`.
    pub fn tile_on(
        &self,
        x0: f64,
        x1: f64,
        width: usize,
        height: usize,
        axis: Axis,
        by: BandBy,
    ) -> Tile {
        let tile = self.cut_tile(x0, x1, width, height, axis, by);
        self.series.release_all();
        tile
    }

    fn cut_tile(
        &self,
        x0: f64,
        x1: f64,
        width: usize,
        height: usize,
        axis: Axis,
        by: BandBy,
    ) -> Tile {
        let width = width.clamp(1, MAX_WIDTH);
        let height = height.clamp(1, MAX_WIDTH);
        let (x0, x1) = if x1 > x0 { (x0, x1) } else { (x0, x0 + 1e-9) };
        let mut samples = Samples::default();
        if self.series.is_empty() {
            return self.empty_tile(x0, x1, samples);
        }
        let (lo, hi) = self.event_range(x0, x1, axis);
        // one sample per column: its event of most allocated bytes
        let col = |v: f64| {
            let c = ((v - x0) / (x1 - x0) * width as f64).floor();
            c.clamp(-1.0, width as f64) as i64
        };
        let mut sample = |(_, event, x, allocated): (i64, usize, f64, i64)| {
            samples.x.push(x);
            samples.event.push(event as u32);
            samples.total.push(allocated);
        };
        // (column, event, x, allocated) of the column's first event of most bytes so far
        let mut best: Option<(i64, usize, f64, i64)> = None;
        self.series.each(lo, hi, |i, x, allocated| {
            let x = match axis {
                Axis::Own => x,
                Axis::Event => i as f64,
            };
            let c = col(x);
            match &mut best {
                Some(b) if b.0 == c => {
                    if allocated > b.3 {
                        *b = (c, i, x, allocated);
                    }
                }
                _ => {
                    if let Some(b) = best.replace((c, i, x, allocated)) {
                        sample(b);
                    }
                }
            }
        });
        if let Some(b) = best {
            sample(b);
        }
        let n = samples.event.len();
        let top = samples.total.iter().copied().max().unwrap_or(0).max(1) as u64;
        let min_bytes = top.div_ceil(height as u64).max(1);
        // the samples each allocation is live at: from its first sample at or after its
        // allocating event to the first at or after its free
        let first_at = |e: Option<usize>, none: usize| {
            e.map_or(none, |e| {
                samples.event.partition_point(|&s| (s as usize) < e)
            })
        };
        let mut candidates: Vec<(f64, u32, u32, u32)> = Vec::new();
        let mut small: Vec<(u32, u32, u32)> = Vec::new();
        let mut live_allocations = 0;
        for (id, a) in self.allocs.iter().enumerate() {
            let j0 = first_at(a.start(), 0);
            let j1 = first_at(a.end(), n);
            if j0 >= j1 {
                continue;
            }
            live_allocations += 1;
            if a.size >= min_bytes {
                let area = a.size as f64 * (j1 - j0) as f64;
                candidates.push((area, id as u32, j0 as u32, j1 as u32));
            } else {
                small.push((id as u32, j0 as u32, j1 as u32));
            }
        }
        if candidates.len() > MAX_DRAWN {
            candidates.select_nth_unstable_by(MAX_DRAWN, |a, b| b.0.total_cmp(&a.0));
            for &(_, id, j0, j1) in &candidates[MAX_DRAWN..] {
                small.push((id, j0, j1));
            }
            candidates.truncate(MAX_DRAWN);
        }
        candidates.sort_unstable_by_key(|c| c.1);
        let mut tile_site: FxHashMap<u32, u32> = FxHashMap::default();
        let mut sites: Vec<String> = Vec::new();
        let mut site_in_tile = |s: u32| {
            *tile_site.entry(s).or_insert_with(|| {
                sites.push(self.sites[s as usize].clone());
                sites.len() as u32 - 1
            })
        };
        let drawn: Vec<Drawn> = candidates
            .iter()
            .map(|&(_, id, j0, j1)| {
                let a = &self.allocs[id as usize];
                Drawn {
                    id,
                    size: a.size,
                    site: site_in_tile(a.site),
                    stack: a.origin,
                    category: (a.category != NO_CATEGORY).then_some(a.category),
                    t0: a.start().map(|i| self.x_on(axis, i)),
                    t1: a.end().map(|i| self.x_on(axis, i)),
                    j0,
                    j1,
                }
            })
            .collect();
        // the band of an allocation: its site's, or its category's
        let key = |a: &Alloc| match by {
            BandBy::Site => a.site,
            BandBy::Category => a.category as u32,
        };
        // the sites of the small allocations that cover the most (bytes x samples) get bands
        let mut area: FxHashMap<u32, (f64, u64)> = FxHashMap::default();
        for &(id, j0, j1) in &small {
            let a = &self.allocs[id as usize];
            let e = area.entry(key(a)).or_default();
            e.0 += a.size as f64 * (j1 - j0) as f64;
            e.1 += 1;
        }
        let mut ranked: Vec<(u32, f64, u64)> =
            area.into_iter().map(|(s, (a, c))| (s, a, c)).collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let banded = ranked.len().min(if ranked.len() > MAX_BANDS {
            MAX_BANDS - 1
        } else {
            MAX_BANDS
        });
        let mut band_of: FxHashMap<u32, usize> = FxHashMap::default();
        let mut bands: Vec<Band> = Vec::new();
        for &(s, _, count) in &ranked[..banded] {
            band_of.insert(s, bands.len());
            let (site, category) = match by {
                BandBy::Site => (Some(site_in_tile(s)), None),
                BandBy::Category => (None, (s != NO_CATEGORY as u32).then_some(s as u8)),
            };
            bands.push(Band {
                site,
                category,
                allocations: count,
                bytes: vec![0; n + 1],
            });
        }
        if ranked.len() > banded {
            bands.push(Band {
                site: None,
                category: None,
                allocations: ranked[banded..].iter().map(|r| r.2).sum(),
                bytes: vec![0; n + 1],
            });
        }
        let rest = bands.len().saturating_sub(1);
        for &(id, j0, j1) in &small {
            let a = &self.allocs[id as usize];
            let b = band_of.get(&key(a)).copied().unwrap_or(rest);
            bands[b].bytes[j0 as usize] += a.size as i64;
            bands[b].bytes[j1 as usize] -= a.size as i64;
        }
        let mut accounted = vec![0i64; n + 1];
        for d in &drawn {
            accounted[d.j0 as usize] += d.size as i64;
            accounted[d.j1 as usize] -= d.size as i64;
        }
        for b in &mut bands {
            let mut level = 0;
            for v in b.bytes.iter_mut() {
                level += *v;
                *v = level;
            }
            b.bytes.truncate(n);
        }
        let mut level = 0;
        let untracked: Vec<i64> = (0..n)
            .map(|j| {
                level += accounted[j];
                let banded: i64 = bands.iter().map(|b| b.bytes[j]).sum();
                (samples.total[j] - level - banded).max(0)
            })
            .collect();
        Tile {
            x0,
            x1,
            events: hi - lo,
            samples,
            min_bytes,
            live_allocations,
            drawn,
            bands,
            untracked,
            sites,
        }
    }

    fn empty_tile(&self, x0: f64, x1: f64, samples: Samples) -> Tile {
        Tile {
            x0,
            x1,
            events: 0,
            samples,
            min_bytes: 1,
            live_allocations: 0,
            drawn: Vec::new(),
            bands: Vec::new(),
            untracked: Vec::new(),
            sites: Vec::new(),
        }
    }
}

/// What the page needs first: the device, the x range, the peak and the marks.
#[derive(Debug, Serialize)]
pub struct Overview<'a> {
    /// The device.
    pub device: u32,
    /// `cuda:0`, `cpu`, …
    pub device_label: &'a str,
    /// Trace events.
    pub events: usize,
    /// Allocations the trace shows.
    pub allocations: usize,
    /// Whether x is seconds (else the event index).
    pub x_is_time: bool,
    /// x of the first and last event.
    pub x_range: (f64, f64),
    /// The peak of allocated bytes.
    pub peak: Option<&'a Point>,
    /// OOM events.
    pub ooms: &'a [OomMark],
    /// Annotation marks (at most the first 2000).
    pub annotations: &'a [AnnotationMark],
    /// The annotation ranges, paired and placed on both axes (at most [`super::ranges::MAX_RANGES`]).
    pub ranges: Vec<Range>,
    /// The names of the categories the tiles' `category` fields index; empty for an input
    /// without categories.
    pub categories: &'static [&'static str],
}

impl AllocIndex {
    /// The page's first facts.
    pub fn overview(&self) -> Overview<'_> {
        let tl = &self.marks;
        Overview {
            device: self.device,
            device_label: &self.device_label,
            events: self.series.len(),
            allocations: self.allocs.len(),
            x_is_time: tl.x_is_time,
            x_range: self.series.x_range().unwrap_or((0.0, 0.0)),
            peak: tl.peak_allocated.as_ref(),
            ooms: &tl.ooms,
            annotations: &tl.annotations[..tl.annotations.len().min(2000)],
            ranges: if tl.x_is_time {
                ranges(&tl.annotations, &self.series)
            } else {
                Vec::new()
            },
            categories: if self.allocs.iter().any(|a| a.category != NO_CATEGORY) {
                &CATEGORIES
            } else {
                &[]
            },
        }
    }
}
