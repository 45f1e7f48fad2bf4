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
//! It takes the device's timeline and reads the events once, from wherever they are (a kept
//! trace, or where the reading put them aside: `TraceEvents`), keeping the intervals, not
//! the events.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rustc_hash::FxHashMap;
use serde::Serialize;

use crate::model::snapshot::{Action, Snapshot, StackId};
use crate::model::trace::TraceEvents;

use super::groups::{GroupBy, Grouper};
use super::sites::{Capture, Extra, MomentFinder, Origin, Sites, Tagger};
use super::timeline::{AnnotationMark, OomMark, Point, Timeline};

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

/// One allocation as the trace shows it: the events that start and end it (`NONE`: before or
/// after the trace). 24 bytes: a long trace has millions.
struct Interval {
    start: u32,
    end: u32,
    size: u64,
    stack: StackId,
    /// What the grouping keeps of it (`Tagger`'s id).
    extra: u32,
    /// The stack of its `free_requested` (when `end` is an event).
    free_stack: StackId,
}

impl Interval {
    const NONE: u32 = u32::MAX;

    fn start(&self) -> Option<usize> {
        (self.start != Interval::NONE).then_some(self.start as usize)
    }

    fn end(&self) -> Option<usize> {
        (self.end != Interval::NONE).then_some(self.end as usize)
    }
}

/// The stacked timeline of a device with `n` bands over `columns` pixel columns, from its
/// timeline `tl` (with series) and its events in `events` (with the snapshot's stacks).
///
/// With `by_event` x is the event index (as `_memory_viz` draws it: idle stretches take no
/// room), else time when the trace has it.
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
    tl.reserved = Vec::new(); // the stacked picture draws allocated memory only
    let has_time = tl.x_is_time;
    let event_count = events.count(device);
    if by_event && tl.x_is_time {
        // annotations carry only a time: place each at the first event at or after it
        let times = std::mem::take(&mut tl.x);
        for an in &mut tl.annotations {
            an.x = times.partition_point(|&t| t < an.x) as f64;
        }
        tl.x = (0..event_count).map(|i| i as f64).collect();
        tl.x_is_time = false;
        for o in &mut tl.ooms {
            o.x = o.index as f64;
        }
        if let Some(p) = tl.peak_allocated.as_mut() {
            p.x = p.index as f64;
        }
    }

    // Pair each alloc with its free_requested by address; a free without an alloc was
    // allocated before the trace began.
    let mut intervals: Vec<Interval> = Vec::new();
    let mut interval_of_event: Vec<u32> = vec![u32::MAX; event_count];
    let mut open: FxHashMap<u64, u32> = FxHashMap::default();
    let mut tagger = Tagger::new(grouping.extra);
    let peak_index = tl.peak_allocated.as_ref().map(|p| p.index);
    let mut finder = grouping.moment.as_ref().map(|(_, c)| MomentFinder::new(*c));
    let mut moment_index = None;
    events.visit(device, &mut |i, e, _, aux| {
        if let Some(f) = finder.as_mut() {
            if f.at(i, e, peak_index) {
                moment_index = Some(i);
            }
        }
        match e.action {
            Action::Alloc => {
                let id = intervals.len() as u32;
                intervals.push(Interval {
                    start: i as u32,
                    end: Interval::NONE,
                    size: e.size,
                    stack: e.stack,
                    extra: tagger.tag(e, aux),
                    free_stack: StackId::MISSING,
                });
                open.insert(e.addr, id);
                interval_of_event[i] = id;
            }
            Action::FreeRequested => {
                let id = match open.remove(&e.addr) {
                    Some(id) => id,
                    None => {
                        intervals.push(Interval {
                            start: Interval::NONE,
                            end: Interval::NONE,
                            size: e.size,
                            stack: e.stack,
                            extra: 0,
                            free_stack: StackId::MISSING,
                        });
                        (intervals.len() - 1) as u32
                    }
                };
                intervals[id as usize].end = i as u32;
                intervals[id as usize].free_stack = e.stack;
                interval_of_event[i] = id;
            }
            Action::Annotate => {
                if let (Some(tag), Some(&id)) = (tagger.retag(aux), open.get(&e.addr)) {
                    intervals[id as usize].extra = tag;
                }
            }
            _ => {}
        }
        Ok(())
    })?;

    let mut sites = Sites::new(snap);
    let x_of = |i: Option<usize>| i.map(|i| tl.x[i]);
    // band of each interval, and the bands themselves
    let mut band_of: Vec<u32> = vec![u32::MAX; intervals.len()];
    let mut bands: Vec<Band> = Vec::new();
    // "largest" on the picture: bytes times the x span they stay live, so a band is
    // something one can see (the biggest allocations of a step are often its
    // shortest-lived temporaries, a hairline at any width)
    let area_of = |iv: &Interval| -> f64 {
        let x0 = iv
            .start()
            .map_or(tl.x.first().copied().unwrap_or(0.0), |i| tl.x[i]);
        let x1 = iv
            .end()
            .map_or(tl.x.last().copied().unwrap_or(0.0), |i| tl.x[i]);
        let span = if event_count > 1 {
            (x1 - x0).max(0.0)
        } else {
            1.0
        };
        iv.size as f64 * span.max(f64::MIN_POSITIVE)
    };
    match by {
        BandBy::Allocation => {
            let area = area_of;
            // the n largest (the earlier first among equals), kept in a heap whose top is
            // the least of them: millions of intervals, a few hundred bands
            let mut largest: BinaryHeap<Reverse<Largest>> = BinaryHeap::with_capacity(n + 1);
            for (k, iv) in intervals.iter().enumerate() {
                let candidate = Largest(area(iv), k as u32);
                match largest.peek() {
                    _ if largest.len() < n => largest.push(Reverse(candidate)),
                    Some(Reverse(least)) if candidate > *least => {
                        largest.pop();
                        largest.push(Reverse(candidate));
                    }
                    _ => {}
                }
            }
            let mut order: Vec<u32> = largest.into_iter().map(|Reverse(l)| l.1).collect();
            // stacked in order of allocation, the oldest at the bottom
            order.sort_by_key(|&k| (intervals[k as usize].start().map_or(0, |s| s + 1), k));
            for k in order.into_iter().map(|k| k as usize) {
                let iv = &intervals[k];
                band_of[k] = bands.len() as u32;
                let site = sites.site(iv.stack);
                bands.push(Band {
                    site: sites.label(site, false),
                    bytes: iv.size,
                    allocations: 1,
                    stack: sites.frames(iv.stack),
                    alloc_x: x_of(iv.start()),
                    free_x: x_of(iv.end()),
                });
            }
        }
        BandBy::Site => {
            // most bytes each group held at once, by replaying the intervals
            let mut grouper = Grouper::new(snap, device, grouping.by, tagger.into_strings());
            let mut labels: Vec<String> = Vec::new();
            let mut label_id: FxHashMap<String, u32> = FxHashMap::default();
            let site_of: Vec<u32> = (intervals.iter())
                .map(|iv| {
                    let origin = Origin {
                        stack: iv.stack,
                        extra: iv.extra,
                        freed_by: iv.end().map(|_| iv.free_stack),
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
            let mut live: FxHashMap<u32, (i64, i64, u64, usize)> = FxHashMap::default();
            for (k, iv) in intervals.iter().enumerate() {
                if iv.start().is_none() {
                    let e = live.entry(site_of[k]).or_insert((0, 0, 0, k));
                    e.0 += iv.size as i64;
                    e.1 = e.1.max(e.0);
                    e.2 += 1;
                }
            }
            for (i, &id) in interval_of_event.iter().enumerate() {
                if id == u32::MAX {
                    continue;
                }
                let iv = &intervals[id as usize];
                let e = live
                    .entry(site_of[id as usize])
                    .or_insert((0, 0, 0, id as usize));
                if iv.start() == Some(i) {
                    e.0 += iv.size as i64;
                    e.1 = e.1.max(e.0);
                    e.2 += 1;
                } else {
                    e.0 -= iv.size as i64;
                }
            }
            // ranked as allocations are: by the area they cover (bytes times the x span each
            // allocation stays live), so the bands are the sites one can see and the grey rest
            // is as small as n bands can make it (the most held at once would pick a site whose
            // one large temporary is a hairline)
            let mut area: FxHashMap<u32, f64> = FxHashMap::default();
            for (k, iv) in intervals.iter().enumerate() {
                *area.entry(site_of[k]).or_insert(0.0) += area_of(iv);
            }
            let mut ranked: Vec<(u32, (i64, i64, u64, usize))> = live.into_iter().collect();
            ranked.sort_by(|(a, va), (b, vb)| {
                let (a, b) = (area.get(a).copied(), area.get(b).copied());
                b.partial_cmp(&a)
                    .unwrap_or(std::cmp::Ordering::Equal)
                    .then(va.3.cmp(&vb.3))
            });
            ranked.truncate(n);
            ranked.sort_by_key(|(_, v)| v.3);
            let mut index: FxHashMap<u32, u32> = FxHashMap::default();
            for (key, (_, most, count, first)) in ranked {
                index.insert(key, bands.len() as u32);
                let iv = &intervals[first];
                bands.push(Band {
                    site: labels[key as usize].clone(),
                    bytes: most.max(0) as u64,
                    allocations: count,
                    stack: sites.frames(iv.stack),
                    alloc_x: None,
                    free_x: None,
                });
            }
            for (k, key) in site_of.iter().enumerate() {
                if let Some(&b) = index.get(key) {
                    band_of[k] = b;
                }
            }
        }
    }

    // which events to sample: first, min, max and last of each pixel column
    let picks = column_picks(&tl.x, &tl.allocated, columns.max(1));
    let mut samples = Vec::with_capacity(picks.len());
    let mut level = vec![0i64; bands.len()];
    for (k, iv) in intervals.iter().enumerate() {
        if iv.start().is_none() && band_of[k] != u32::MAX {
            level[band_of[k] as usize] += iv.size as i64;
        }
    }
    let mut next = picks.iter().peekable();
    for (i, &id) in interval_of_event.iter().enumerate() {
        if id != u32::MAX && band_of[id as usize] != u32::MAX {
            let iv = &intervals[id as usize];
            let b = band_of[id as usize] as usize;
            if iv.start() == Some(i) {
                level[b] += iv.size as i64;
            } else {
                level[b] -= iv.size as i64;
            }
        }
        if next.peek() == Some(&&i) {
            next.next();
            samples.push(Sample {
                index: i,
                x: tl.x[i],
                total: tl.allocated[i],
                bands: level.clone(),
            });
        }
    }
    let moment = moment_index.zip(moment_label).map(|(i, label)| MomentMark {
        label,
        index: i,
        x: tl.x[i],
        bytes: tl.allocated[i],
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
        x_range: (
            tl.x.first().copied().unwrap_or(0.0),
            tl.x.last().copied().unwrap_or(0.0),
        ),
        initial_bytes: tl.initial_allocated_bytes,
        allocations: intervals.len(),
        other_allocations: band_of.iter().filter(|&&b| b == u32::MAX).count(),
        bands,
        samples,
        peak: tl.peak_allocated,
        ooms: tl.ooms,
        annotations: tl.annotations,
    })
}

/// Indices of the first, lowest, highest and last value of each of `columns` equal x ranges,
/// ascending and distinct.
fn column_picks(x: &[f64], y: &[i64], columns: usize) -> Vec<usize> {
    let n = x.len();
    let mut picks = Vec::new();
    if n == 0 {
        return picks;
    }
    let (lo, hi) = (x[0], x[n - 1]);
    let width = (hi - lo).max(f64::MIN_POSITIVE);
    let column = |v: f64| (((v - lo) / width * columns as f64) as usize).min(columns - 1);
    let mut start = 0;
    while start < n {
        let c = column(x[start]);
        let mut end = start + 1;
        while end < n && column(x[end]) == c {
            end += 1;
        }
        let (mut min, mut max) = (start, start);
        for i in start..end {
            if y[i] < y[min] {
                min = i;
            }
            if y[i] > y[max] {
                max = i;
            }
        }
        let mut four = [start, min, max, end - 1];
        four.sort_unstable();
        for i in four {
            if picks.last() != Some(&i) {
                picks.push(i);
            }
        }
        start = end;
    }
    picks
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::timeline::timeline;

    fn fixture(name: &str) -> Snapshot {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/snapshots")
            .join(name);
        match crate::formats::load(&path).unwrap() {
            crate::formats::Input::Snapshot(s) => *s,
            _ => panic!("{name} is a snapshot"),
        }
    }

    #[test]
    fn top_edge_is_allocated_and_bands_fit_under_it() {
        let snap = fixture("cs336_medium_512_training.pickle");
        let tl = timeline(&snap, 0, true);
        for by in [BandBy::Allocation, BandBy::Site] {
            for by_event in [false, true] {
                let series = timeline(&snap, 0, true);
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
                    assert_eq!(sm.total, tl.allocated[sm.index]);
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
