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

use crate::model::snapshot::{Action, Snapshot, TraceEvent, NO_TIME};

#[derive(Debug, Serialize)]
pub struct Timeline {
    pub device: u32,
    pub events: usize,
    /// Whether x is `time_us` (seconds since the first event) or the event index.
    pub x_is_time: bool,
    /// `time_us` of the first event, when x is time.
    pub t0_us: Option<i64>,
    #[serde(skip)]
    pub x: Vec<f64>,
    #[serde(skip)]
    pub allocated: Vec<i64>,
    #[serde(skip)]
    pub reserved: Vec<i64>,
    /// Bytes before the first event, as the anchor implies.
    pub initial_allocated_bytes: i64,
    pub initial_reserved_bytes: i64,
    pub final_allocated_bytes: i64,
    pub final_reserved_bytes: i64,
    pub peak_allocated: Option<Point>,
    pub peak_reserved: Option<Point>,
    pub ooms: Vec<OomMark>,
    pub annotations: Vec<AnnotationMark>,
}

#[derive(Clone, Copy, Debug, Serialize)]
pub struct Point {
    pub index: usize,
    pub x: f64,
    pub time_us: Option<i64>,
    pub bytes: i64,
}

#[derive(Clone, Debug, Serialize)]
pub struct OomMark {
    pub index: usize,
    pub x: f64,
    pub time_us: Option<i64>,
    pub requested_bytes: u64,
    pub device_free_bytes: Option<u64>,
    /// Allocated and reserved just before the failed request.
    pub allocated_bytes: i64,
    pub reserved_bytes: i64,
}

#[derive(Clone, Debug, Serialize)]
pub struct AnnotationMark {
    pub x: f64,
    pub time_us: i64,
    pub stage: String,
    pub name: String,
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

pub fn timeline(snap: &Snapshot, device: u32, with_series: bool) -> Timeline {
    let events: &[TraceEvent] = snap.trace(device).map_or(&[], |t| &t.events[..]);
    let trace = snap.trace(device);
    let (final_alloc, final_reserved) = final_state(snap, device);
    // One pass over the events, relative to the (yet unknown) start: peaks do not move when
    // the whole series shifts by the anchor, which is known only at the end.
    let (mut a, mut r) = (0i64, 0i64);
    let mut pa: Option<(usize, i64)> = None;
    let mut pr: Option<(usize, i64)> = None;
    let mut ooms: Vec<(usize, i64, i64)> = Vec::new();
    let (mut monotonic, mut any_time, mut last_t) = (true, false, i64::MIN);
    let mut allocated = Vec::new();
    let mut reserved = Vec::new();
    if with_series {
        allocated.reserve(events.len());
        reserved.reserve(events.len());
    }
    for (i, e) in events.iter().enumerate() {
        // an entry without time (e.g. `snapshot`) takes its neighbour's
        if e.time_us != NO_TIME {
            monotonic &= e.time_us >= last_t;
            last_t = e.time_us;
            any_time = true;
        }
        if e.action == Action::Oom {
            ooms.push((i, a, r));
        }
        a += allocated_delta(e);
        r += reserved_delta(e);
        if pa.is_none_or(|p| a > p.1) {
            pa = Some((i, a));
        }
        if pr.is_none_or(|p| r > p.1) {
            pr = Some((i, r));
        }
        if with_series {
            allocated.push(a);
            reserved.push(r);
        }
    }
    let init_a = final_alloc - a;
    let init_r = final_reserved - r;
    let x_is_time = any_time && monotonic;
    let t0 = if x_is_time {
        events.iter().find_map(|e| e.time())
    } else {
        None
    };
    // x of event i: seconds since t0 (carrying the last time over entries without one), or i
    let x_at = |i: usize| -> f64 {
        match t0 {
            Some(t0) => {
                let t = events[..=i]
                    .iter()
                    .rev()
                    .find_map(|e| e.time())
                    .unwrap_or(t0);
                (t - t0) as f64 / 1e6
            }
            None => i as f64,
        }
    };
    let point = |p: Option<(usize, i64)>, init: i64| {
        p.map(|(i, b)| Point {
            index: i,
            x: x_at(i),
            time_us: events[i].time(),
            bytes: b + init,
        })
    };
    let mut tl = Timeline {
        device,
        events: events.len(),
        x_is_time,
        t0_us: t0,
        x: Vec::new(),
        allocated,
        reserved,
        initial_allocated_bytes: init_a,
        initial_reserved_bytes: init_r,
        final_allocated_bytes: final_alloc,
        final_reserved_bytes: final_reserved,
        peak_allocated: point(pa, init_a),
        peak_reserved: point(pr, init_r),
        ooms: ooms
            .into_iter()
            .map(|(i, a, r)| {
                let e = &events[i];
                OomMark {
                    index: i,
                    x: x_at(i),
                    time_us: e.time(),
                    requested_bytes: e.size,
                    device_free_bytes: trace.and_then(|t| t.aux(i)).and_then(|x| x.device_free),
                    allocated_bytes: a + init_a,
                    reserved_bytes: r + init_r,
                }
            })
            .collect(),
        annotations: Vec::new(),
    };
    if with_series {
        tl.allocated.iter_mut().for_each(|v| *v += init_a);
        tl.reserved.iter_mut().for_each(|v| *v += init_r);
        tl.x.reserve(events.len());
        match t0 {
            Some(t0) => {
                let mut t = t0;
                for e in events {
                    if e.time_us != NO_TIME {
                        t = e.time_us;
                    }
                    tl.x.push((t - t0) as f64 / 1e6);
                }
            }
            None => tl.x.extend((0..events.len()).map(|i| i as f64)),
        }
    }
    if let Some(t0) = t0 {
        let last = events.iter().rev().find_map(|e| e.time()).unwrap_or(t0);
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
        assert_eq!(t.allocated, vec![-30, 0, 0]);
        assert_eq!(t.peak_allocated.unwrap().index, 1);
        assert!(!t.x_is_time);
    }
}
