//! Allocated and reserved bytes over time, rebuilt from a device's trace.
//!
//! The trace is a ring buffer of the most recent events, so what was live when it starts is
//! unknown from the trace alone. The snapshot's final state is known, though: the series is
//! anchored there and run backwards, so it ends exactly at the segments' totals.
//!
//! - allocated: `+size` at `alloc`, `-size` at `free_requested` (the allocator's allocated
//!   counter drops when the program frees; `free_completed` only ends a stream wait). Trace
//!   sizes are the bytes requested, so the anchor is the requested bytes of `active_allocated`
//!   blocks (what `_memory_viz stats` calls allocated).
//! - reserved: `+size` at `segment_alloc`/`segment_map`, `-size` at
//!   `segment_free`/`segment_unmap`; anchored at the sum of segment sizes.

use serde::Serialize;

use crate::model::snapshot::{Action, EventAux, Snapshot, TraceEvent, NO_TIME};
use crate::model::trace::TraceSink;

/// A device's allocated and reserved bytes over a snapshot's trace, with their peaks and OOMs.
#[derive(Debug, Serialize)]
pub struct Timeline {
    /// Device index of the trace.
    pub device: u32,
    /// Number of trace events (every action, not only allocations).
    pub events: usize,
    /// Whether x is `time_us` (seconds since the first event) or the event index.
    pub x_is_time: bool,
    /// `time_us` of the first event, when x is time.
    pub t0_us: Option<i64>,
    /// The last `time_us` of the trace (what its last event's x is, when x is time).
    #[serde(skip)]
    pub last_time_us: Option<i64>,
    /// Per event: x, allocated and reserved after it (empty without series); read with
    /// [`Timeline::points`].
    #[serde(skip)]
    pub series: SeriesLog,
    /// Bytes before the first event, as the anchor implies.
    pub initial_allocated_bytes: i64,
    /// Bytes held in segments before the first event; negative if the file contradicts itself.
    pub initial_reserved_bytes: i64,
    /// Requested bytes of the `active_allocated` blocks in the final segments (the anchor).
    pub final_allocated_bytes: i64,
    /// Sum of the final segments' sizes in bytes (the anchor).
    pub final_reserved_bytes: i64,
    /// First point where allocated was highest; None without events.
    pub peak_allocated: Option<Point>,
    /// First point where reserved was highest; None without events.
    pub peak_reserved: Option<Point>,
    /// Bytes held in segments at `peak_allocated`: beyond the allocated bytes, cached free
    /// blocks and rounding then. None without events.
    pub reserved_at_peak_allocated_bytes: Option<i64>,
    /// Every `oom` event of the trace, in order.
    pub ooms: Vec<OomMark>,
    /// This device's `external_annotations` within the trace's time span (none unless x is time).
    pub annotations: Vec<AnnotationMark>,
}

/// A sample of the series: after trace event `index`.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Point {
    /// 0-based index of the trace event after which the sample is taken.
    pub index: usize,
    /// Seconds since `t0_us` (the last time so far), or the event index when x is not time.
    pub x: f64,
    /// The event's own `time_us` in microseconds; None when it has none.
    pub time_us: Option<i64>,
    /// The series' value after the event, in bytes (requested bytes for allocated).
    pub bytes: i64,
}

/// An OOM in the trace.
#[derive(Clone, Debug, Serialize)]
pub struct OomMark {
    /// 0-based index of the `oom` event in the trace.
    pub index: usize,
    /// Its x: seconds since the first event's time, or the index when x is not time.
    pub x: f64,
    /// The event's `time_us` in microseconds; None when it has none.
    pub time_us: Option<i64>,
    /// Bytes the failed allocation asked for.
    pub requested_bytes: u64,
    /// What CUDA reported free on the device then, when the file says.
    pub device_free_bytes: Option<u64>,
    /// Allocated and reserved just before the failed request.
    pub allocated_bytes: i64,
    /// Bytes held in segments just before the failed request.
    pub reserved_bytes: i64,
}

/// An `external_annotations` mark on the timeline.
#[derive(Clone, Debug, Serialize)]
pub struct AnnotationMark {
    /// Seconds since the trace's first event.
    pub x: f64,
    /// The annotation's `time_us` in microseconds.
    pub time_us: i64,
    /// `START` or `END` of the range.
    pub stage: String,
    /// The range's name (e.g. a `record_function` label).
    pub name: String,
}

impl Timeline {
    /// x, allocated and reserved after each event, in order (none without series).
    pub fn points(&self) -> impl Iterator<Item = SeriesPoint> + '_ {
        let clock = Clock::new(self.t0_us);
        let (init_a, init_r) = (self.initial_allocated_bytes, self.initial_reserved_bytes);
        self.series
            .iter()
            .enumerate()
            .map(move |(i, (time, a, r))| SeriesPoint {
                x: clock.x(i, time),
                allocated: a + init_a,
                reserved: r + init_r,
            })
    }
}

/// A point of a [`Timeline`]'s series: after one event.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SeriesPoint {
    /// Seconds since `t0_us` if x is time, else the event index.
    pub x: f64,
    /// Requested bytes allocated after the event.
    pub allocated: i64,
    /// Bytes held in segments after the event.
    pub reserved: i64,
}

/// An event's x from the time it carries (its own, or the last before it; `NO_TIME` before
/// the first): seconds since `t0` (events before the first time are at 0), or, without `t0`
/// (x is not time), the event index.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    t0: Option<i64>,
}

impl Clock {
    /// x relative to `t0`, or the index when None.
    pub fn new(t0: Option<i64>) -> Clock {
        Clock { t0 }
    }

    /// The x of event `index`, which carries time `carried` (`NO_TIME`: none yet).
    #[inline]
    pub fn x(&self, index: usize, carried: i64) -> f64 {
        match self.t0 {
            Some(_) if carried == NO_TIME => 0.0,
            Some(t0) => (carried - t0) as f64 / 1e6,
            None => index as f64,
        }
    }
}

/// The time each event carries and how it changed allocated and reserved bytes, a few bytes
/// an event (a 10 GB capture has ~55M events: 24 bytes each would be 1.3 GB): per event one
/// varint of the time's change (zigzag) times 4 plus which series changed (1: allocated,
/// 2: reserved), then each change (zigzag varint). Read back in order with [`SeriesLog::iter`].
#[derive(Debug, Default)]
pub struct SeriesLog {
    bytes: Vec<u8>,
    len: usize,
    last_time: i64,
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

fn push_varint(out: &mut Vec<u8>, mut v: u128) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

impl SeriesLog {
    /// The next event: the time it carries, its change of allocated and of reserved bytes
    /// (at most one of the two is not 0).
    pub fn push(&mut self, time: i64, allocated: i64, reserved: i64) {
        let dt = zigzag(time.wrapping_sub(self.last_time));
        self.last_time = time;
        let kind = (allocated != 0) as u128 | ((reserved != 0) as u128) << 1;
        push_varint(&mut self.bytes, (dt as u128) << 2 | kind);
        if allocated != 0 {
            push_varint(&mut self.bytes, zigzag(allocated) as u128);
        }
        if reserved != 0 {
            push_varint(&mut self.bytes, zigzag(reserved) as u128);
        }
        self.len += 1;
    }

    /// Events logged.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no event was logged.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// (time carried, allocated, reserved) after each event, allocated and reserved relative
    /// to before the first.
    pub fn iter(&self) -> impl Iterator<Item = (i64, i64, i64)> + '_ {
        let mut at = 0;
        let (mut time, mut allocated, mut reserved) = (0i64, 0i64, 0i64);
        let bytes = &self.bytes;
        let read = move |at: &mut usize| -> u128 {
            let mut v = 0u128;
            let mut shift = 0;
            loop {
                let b = bytes[*at];
                *at += 1;
                v |= ((b & 0x7f) as u128) << shift;
                if b < 0x80 {
                    return v;
                }
                shift += 7;
            }
        };
        (0..self.len).map(move |_| {
            let head = read(&mut at);
            time = time.wrapping_add(unzigzag((head >> 2) as u64));
            if head & 1 != 0 {
                allocated += unzigzag(read(&mut at) as u64);
            }
            if head & 2 != 0 {
                reserved += unzigzag(read(&mut at) as u64);
            }
            (time, allocated, reserved)
        })
    }
}

/// The allocated change of one event (requested bytes).
#[inline]
pub fn allocated_delta(e: &TraceEvent) -> i64 {
    match e.action {
        Action::Alloc => e.size as i64,
        Action::FreeRequested => -(e.size as i64),
        _ => 0,
    }
}

/// How much the event changes reserved bytes (segment allocs and maps add, frees and unmaps take).
#[inline]
pub fn reserved_delta(e: &TraceEvent) -> i64 {
    match e.action {
        Action::SegmentAlloc | Action::SegmentMap => e.size as i64,
        Action::SegmentFree | Action::SegmentUnmap => -(e.size as i64),
        _ => 0,
    }
}

/// Final allocated (requested bytes of `active_allocated` blocks) and reserved of a device.
pub fn final_state(snap: &Snapshot, device: u32) -> (i64, i64) {
    let mut alloc = 0i64;
    let mut reserved = 0i64;
    for s in snap.segments_on(device) {
        reserved += s.total_size as i64;
        for b in s.blocks(&snap.blocks) {
            if b.state.is_allocated() {
                alloc += b.requested(&snap.history) as i64;
            }
        }
    }
    (alloc, reserved)
}

/// A point of a trace as [`TraceRun`] saw it go by.
#[derive(Clone, Copy, Debug)]
struct RunPoint {
    index: usize,
    /// The event's own `time_us`.
    time_us: Option<i64>,
    /// The latest `time_us` up to it (what its x is).
    carried_time_us: Option<i64>,
    bytes: i64,
}

#[derive(Clone, Copy, Debug)]
struct RunOom {
    at: RunPoint,
    reserved: i64,
    requested_bytes: u64,
    device_free_bytes: Option<u64>,
}

/// Allocated and reserved bytes relative to a trace's start, with their peaks, the OOMs and
/// the count of each action, taken one event at a time (a [`TimelineBuilder`]'s). Peaks do
/// not move when the whole series shifts by the anchor, which is known only at the end
/// ([`TraceRun::finish`]).
#[derive(Clone, Debug)]
struct TraceRun {
    events: usize,
    /// Events of each action, indexed as `Action::ALL`.
    action_counts: [usize; Action::ALL.len()],
    allocated: i64,
    reserved: i64,
    peak_allocated: Option<RunPoint>,
    peak_reserved: Option<RunPoint>,
    /// Reserved (relative to the start) when allocated peaked.
    reserved_at_peak_allocated: i64,
    ooms: Vec<RunOom>,
    first_time_us: Option<i64>,
    last_time_us: Option<i64>,
    monotonic: bool,
}

impl Default for TraceRun {
    fn default() -> TraceRun {
        TraceRun {
            events: 0,
            action_counts: [0; Action::ALL.len()],
            allocated: 0,
            reserved: 0,
            peak_allocated: None,
            peak_reserved: None,
            reserved_at_peak_allocated: 0,
            ooms: Vec::new(),
            first_time_us: None,
            last_time_us: None,
            monotonic: true,
        }
    }
}

/// A run's totals, anchored at the final state.
struct RunTotals {
    x_is_time: bool,
    /// `time_us` of the first event, when x is time.
    t0_us: Option<i64>,
    /// The last `time_us` of the trace.
    last_time_us: Option<i64>,
    initial_allocated_bytes: i64,
    initial_reserved_bytes: i64,
    peak_allocated: Option<Point>,
    peak_reserved: Option<Point>,
    reserved_at_peak_allocated_bytes: Option<i64>,
    ooms: Vec<OomMark>,
}

impl TraceRun {
    /// The next event; `aux` is read for OOMs only.
    #[inline]
    fn push(&mut self, e: &TraceEvent, aux: Option<&EventAux>) {
        let index = self.events;
        self.events += 1;
        self.action_counts[e.action as usize] += 1;
        // an entry without time (e.g. `snapshot`) takes its neighbour's
        if e.time_us != NO_TIME {
            self.monotonic &= self.last_time_us.is_none_or(|t| e.time_us >= t);
            self.last_time_us = Some(e.time_us);
            self.first_time_us.get_or_insert(e.time_us);
        }
        let point = |bytes| RunPoint {
            index,
            time_us: e.time(),
            carried_time_us: self.last_time_us,
            bytes,
        };
        if e.action == Action::Oom {
            self.ooms.push(RunOom {
                at: point(self.allocated),
                reserved: self.reserved,
                requested_bytes: e.size,
                device_free_bytes: aux.and_then(|a| a.device_free),
            });
        }
        self.allocated += allocated_delta(e);
        self.reserved += reserved_delta(e);
        if self.peak_allocated.is_none_or(|p| self.allocated > p.bytes) {
            self.peak_allocated = Some(point(self.allocated));
            self.reserved_at_peak_allocated = self.reserved;
        }
        if self.peak_reserved.is_none_or(|p| self.reserved > p.bytes) {
            self.peak_reserved = Some(point(self.reserved));
        }
    }

    /// Anchored at the final allocated (requested bytes of `active_allocated` blocks) and
    /// reserved bytes.
    fn finish(&self, final_allocated: i64, final_reserved: i64) -> RunTotals {
        let init_a = final_allocated - self.allocated;
        let init_r = final_reserved - self.reserved;
        let x_is_time = self.first_time_us.is_some() && self.monotonic;
        let t0 = if x_is_time { self.first_time_us } else { None };
        // x: seconds since t0 (carrying the last time over entries without one), or the index
        let x = |p: &RunPoint| match t0 {
            Some(t0) => (p.carried_time_us.unwrap_or(t0) - t0) as f64 / 1e6,
            None => p.index as f64,
        };
        let point = |p: Option<RunPoint>, init: i64| {
            p.map(|p| Point {
                index: p.index,
                x: x(&p),
                time_us: p.time_us,
                bytes: p.bytes + init,
            })
        };
        RunTotals {
            x_is_time,
            t0_us: t0,
            last_time_us: self.last_time_us,
            initial_allocated_bytes: init_a,
            initial_reserved_bytes: init_r,
            peak_allocated: point(self.peak_allocated, init_a),
            peak_reserved: point(self.peak_reserved, init_r),
            reserved_at_peak_allocated_bytes: (self.peak_allocated)
                .map(|_| self.reserved_at_peak_allocated + init_r),
            ooms: (self.ooms.iter())
                .map(|o| OomMark {
                    index: o.at.index,
                    x: x(&o.at),
                    time_us: o.at.time_us,
                    requested_bytes: o.requested_bytes,
                    device_free_bytes: o.device_free_bytes,
                    allocated_bytes: o.at.bytes + init_a,
                    reserved_bytes: o.reserved + init_r,
                })
                .collect(),
        }
    }
}

/// A device's [`Timeline`], built one event at a time: from a kept trace (`timeline`) or as
/// the trace streams by ([`Timelines`]). With series, a [`SeriesLog`]: a few bytes an event.
pub struct TimelineBuilder {
    with_series: bool,
    run: TraceRun,
    series: SeriesLog,
    first: Option<TraceEvent>,
}

/// Without series.
impl Default for TimelineBuilder {
    fn default() -> TimelineBuilder {
        TimelineBuilder::new(false)
    }
}

impl TimelineBuilder {
    /// An empty builder; `with_series` keeps every point (for plots), not only totals and peaks.
    pub fn new(with_series: bool) -> TimelineBuilder {
        TimelineBuilder {
            with_series,
            run: TraceRun::default(),
            series: SeriesLog::default(),
            first: None,
        }
    }

    /// The next event; `aux` is read for OOMs only.
    #[inline]
    pub fn push(&mut self, e: &TraceEvent, aux: Option<&EventAux>) {
        self.first.get_or_insert(*e);
        self.run.push(e, aux);
        if self.with_series {
            let time = self.run.last_time_us.unwrap_or(NO_TIME);
            self.series
                .push(time, allocated_delta(e), reserved_delta(e));
        }
    }

    /// Events so far.
    pub fn events(&self) -> usize {
        self.run.events
    }

    /// The index of the event after which allocated bytes peaked so far.
    pub fn peak_allocated_index(&self) -> Option<usize> {
        self.run.peak_allocated.map(|p| p.index)
    }

    /// Events so far of each action, indexed as `Action::ALL`.
    pub fn action_counts(&self) -> [usize; Action::ALL.len()] {
        self.run.action_counts
    }

    /// The first event.
    pub fn first(&self) -> Option<&TraceEvent> {
        self.first.as_ref()
    }

    /// Anchored at device `device`'s final state in `snap`, with its annotations.
    pub fn finish(self, snap: &Snapshot, device: u32) -> Timeline {
        let (final_alloc, final_reserved) = final_state(snap, device);
        let totals = self.run.finish(final_alloc, final_reserved);
        let (init_a, init_r) = (
            totals.initial_allocated_bytes,
            totals.initial_reserved_bytes,
        );
        let t0 = totals.t0_us;
        let mut tl = Timeline {
            device,
            events: self.run.events,
            x_is_time: totals.x_is_time,
            t0_us: t0,
            last_time_us: totals.last_time_us,
            series: self.series,
            initial_allocated_bytes: init_a,
            initial_reserved_bytes: init_r,
            final_allocated_bytes: final_alloc,
            final_reserved_bytes: final_reserved,
            peak_allocated: totals.peak_allocated,
            peak_reserved: totals.peak_reserved,
            reserved_at_peak_allocated_bytes: totals.reserved_at_peak_allocated_bytes,
            ooms: totals.ooms,
            annotations: Vec::new(),
        };
        if let Some(t0) = t0 {
            let last = totals.last_time_us.unwrap_or(t0);
            for an in &snap.annotations {
                if an.device.is_some_and(|d| d != device) {
                    continue;
                }
                if let Some(t) = an.time_us {
                    if t >= t0 && t <= last {
                        tl.annotations.push(AnnotationMark {
                            x: (t - t0) as f64 / 1e6,
                            time_us: t,
                            stage: an.stage.clone(),
                            name: an.name.clone(),
                        });
                    }
                }
            }
        }
        tl
    }
}

/// A [`TimelineBuilder`] per device, fed as the reader streams the events by: `plot` keeps
/// only the series, `summary` (without series) only the running totals.
pub struct Timelines {
    with_series: bool,
    builders: Vec<TimelineBuilder>,
}

impl Timelines {
    /// Builders for every device, created as events name them; `with_series` as for
    /// `TimelineBuilder::new`.
    pub fn new(with_series: bool) -> Timelines {
        Timelines {
            with_series,
            builders: Vec::new(),
        }
    }

    /// Device `device`'s builder (empty if its trace had no events).
    pub fn take(&mut self, device: u32) -> TimelineBuilder {
        let empty = TimelineBuilder::new(self.with_series);
        match self.builders.get_mut(device as usize) {
            Some(b) => std::mem::replace(b, empty),
            None => empty,
        }
    }
}

impl TraceSink for Timelines {
    fn event(&mut self, device: u32, e: &TraceEvent, _stream: i64, aux: Option<&EventAux>) {
        let d = device as usize;
        if self.builders.len() <= d {
            let with_series = self.with_series;
            self.builders
                .resize_with(d + 1, || TimelineBuilder::new(with_series));
        }
        self.builders[d].push(e, aux);
    }

    fn restart(&mut self) {
        self.builders.clear();
    }
}

/// Device `device`'s timeline from its kept trace; `with_series`: with x, allocated and
/// reserved after each event (else peaks, OOMs and the anchor only).
pub fn timeline(snap: &Snapshot, device: u32, with_series: bool) -> Timeline {
    let trace = snap.trace(device);
    let events: &[TraceEvent] = trace.map_or(&[], |t| &t.events[..]);
    let mut b = TimelineBuilder::new(with_series);
    for (i, e) in events.iter().enumerate() {
        // (only an OOM's aux is read: the lookup is not free)
        let aux = (e.action == Action::Oom)
            .then(|| trace.and_then(|t| t.aux(i)))
            .flatten();
        b.push(e, aux);
    }
    b.finish(snap, device)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::snapshot::DeviceTrace;

    fn ev(action: Action, size: u64) -> TraceEvent {
        TraceEvent {
            size,
            action,
            ..TraceEvent::default()
        }
    }

    #[test]
    fn anchored_at_the_end() {
        let mut s = Snapshot::default();
        s.traces.push(DeviceTrace {
            events: vec![
                ev(Action::FreeRequested, 10),
                ev(Action::Alloc, 30),
                ev(Action::FreeCompleted, 10),
            ],
            streams: vec![0],
            ..DeviceTrace::default()
        });
        let t = timeline(&s, 0, true);
        // nothing live at the end: 0 = initial - 10 + 30 → initial = -20 (an inconsistent file)
        assert_eq!(t.initial_allocated_bytes, -20);
        let allocated: Vec<i64> = t.points().map(|p| p.allocated).collect();
        assert_eq!(allocated, vec![-30, 0, 0]);
        assert_eq!(t.peak_allocated.unwrap().index, 1);
        assert!(!t.x_is_time);
    }
}

#[cfg(test)]
mod series_log_tests {
    use super::*;

    #[test]
    fn reads_back_what_was_logged() {
        let logged = [
            (NO_TIME, 0, 0),
            (NO_TIME, 512, 0),
            (1_700_000_000_000_000, 0, 20 << 20),
            (1_700_000_000_000_007, -512, 0),
            (1_699_999_999_999_000, i64::MAX / 2, 0), // time going back
            (i64::MAX, i64::MIN / 2, -(20 << 20)),
            (i64::MAX, 3, -7), // both at once: no action does it, the log keeps it
        ];
        let mut log = SeriesLog::default();
        for &(t, a, r) in &logged {
            log.push(t, a, r);
        }
        assert_eq!(log.len(), logged.len());
        let (mut a_sum, mut r_sum) = (0i64, 0i64);
        let expected: Vec<(i64, i64, i64)> = (logged.iter())
            .map(|&(t, a, r)| {
                a_sum = a_sum.wrapping_add(a);
                r_sum += r;
                (t, a_sum, r_sum)
            })
            .collect();
        assert_eq!(log.iter().collect::<Vec<_>>(), expected);
        // a typical event takes a few bytes, not 24
        assert!(log.bytes.len() < 24 * logged.len());
    }
}
