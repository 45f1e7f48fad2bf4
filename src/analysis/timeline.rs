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

use crate::model::snapshot::{Action, Snapshot, TraceEvent};

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

/// Whether the device's events all carry `time_us`, never going backwards.
fn usable_times(events: &[TraceEvent]) -> bool {
    let mut last = i64::MIN;
    let mut any = false;
    for e in events {
        // an entry without time (e.g. `snapshot`) takes its neighbour's
        if let Some(t) = e.time() {
            if t < last {
                return false;
            }
            last = t;
            any = true;
        }
    }
    any
}

pub fn timeline(snap: &Snapshot, device: u32, with_series: bool) -> Timeline {
    let events: &[TraceEvent] = snap.trace(device).map_or(&[], |t| &t.events[..]);
    let (final_alloc, final_reserved) = final_state(snap, device);
    let (mut da, mut dr) = (0i64, 0i64);
    for e in events {
        da += allocated_delta(e);
        dr += reserved_delta(e);
    }
    let x_is_time = usable_times(events);
    let t0 = if x_is_time {
        events.iter().find_map(|e| e.time())
    } else {
        None
    };
    let mut tl = Timeline {
        device,
        events: events.len(),
        x_is_time,
        t0_us: t0,
        x: Vec::new(),
        allocated: Vec::new(),
        reserved: Vec::new(),
        initial_allocated_bytes: final_alloc - da,
        initial_reserved_bytes: final_reserved - dr,
        final_allocated_bytes: final_alloc,
        final_reserved_bytes: final_reserved,
        peak_allocated: None,
        peak_reserved: None,
        ooms: Vec::new(),
        annotations: Vec::new(),
    };
    if with_series {
        tl.x.reserve(events.len());
        tl.allocated.reserve(events.len());
        tl.reserved.reserve(events.len());
    }
    let mut a = tl.initial_allocated_bytes;
    let mut r = tl.initial_reserved_bytes;
    let mut last_t = t0.unwrap_or(0);
    let trace = snap.trace(device);
    for (i, e) in events.iter().enumerate() {
        let x = match (t0, e.time()) {
            (Some(t0), Some(t)) => {
                last_t = t;
                (t - t0) as f64 / 1e6
            }
            (Some(t0), None) => (last_t - t0) as f64 / 1e6,
            _ => i as f64,
        };
        if e.action == Action::Oom {
            tl.ooms.push(OomMark {
                index: i,
                x,
                time_us: e.time(),
                requested_bytes: e.size,
                device_free_bytes: trace.and_then(|t| t.aux(e)).and_then(|x| x.device_free),
                allocated_bytes: a,
                reserved_bytes: r,
            });
        }
        a += allocated_delta(e);
        r += reserved_delta(e);
        if tl.peak_allocated.is_none_or(|p| a > p.bytes) {
            tl.peak_allocated = Some(Point {
                index: i,
                x,
                time_us: e.time(),
                bytes: a,
            });
        }
        if tl.peak_reserved.is_none_or(|p| r > p.bytes) {
            tl.peak_reserved = Some(Point {
                index: i,
                x,
                time_us: e.time(),
                bytes: r,
            });
        }
        if with_series {
            tl.x.push(x);
            tl.allocated.push(a);
            tl.reserved.push(r);
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
    use crate::model::snapshot::{DeviceTrace, StackId, NO_AUX, NO_TIME};

    fn ev(action: Action, size: u64) -> TraceEvent {
        TraceEvent {
            addr: 0,
            size,
            time_us: NO_TIME,
            stream: 0,
            stack: StackId::MISSING,
            action,
            aux: NO_AUX,
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
            aux: vec![],
        });
        let t = timeline(&s, 0, true);
        // nothing live at the end: 0 = initial - 10 + 30 → initial = -20 (an inconsistent file)
        assert_eq!(t.initial_allocated_bytes, -20);
        assert_eq!(t.allocated, vec![-30, 0, 0]);
        assert_eq!(t.peak_allocated.unwrap().index, 1);
        assert!(!t.x_is_time);
    }
}
