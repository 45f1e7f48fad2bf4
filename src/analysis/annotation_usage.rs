//! Allocated bytes at each annotation's start and end (Mosaic's "usage by annotation stage"):
//! what a `record_function` range, an optimizer step or a profiler step began and ended with.
//!
//! `external_annotations` come after the trace in a snapshot file, so their times are known
//! only once the events have streamed by: the summary replays the events it kept through
//! [`UsageAtTimes`], which walks each device's running allocated total (requested bytes, as
//! the timeline counts them, from the bytes the trace implies before its first event) past
//! the annotations' times. An annotation at `t` sees every event stamped at or before `t`.

use serde::Serialize;

use crate::model::snapshot::{TraceEvent, NO_TIME};
use crate::model::trace::TraceSink;

use super::timeline::allocated_delta;

/// One annotation boundary and what was allocated then.
#[derive(Clone, Debug, Serialize)]
pub struct AnnotationUsage {
    /// The range's name (`Optimizer.step#AdamW.step`, a `record_function` label).
    pub name: String,
    /// `START` or `END`.
    pub stage: String,
    /// The annotation's `time_us`, in microseconds.
    pub time_us: i64,
    /// Seconds since the trace's first event.
    pub seconds: f64,
    /// Requested bytes allocated on the device at that moment; None until measured (and when
    /// the trace does not add up to the final segments, so no start is known).
    pub allocated_bytes: Option<i64>,
}

/// What to measure on one device: its annotations' times (in the order their results are
/// wanted) and the bytes allocated before its first event.
#[derive(Clone, Debug)]
pub struct DeviceTimes {
    pub times: Vec<i64>,
    pub initial: i64,
}

/// A device's annotations to measure: their times, in order, with where each goes.
struct Pending {
    /// (time_us, index into the device's usage list), sorted by time.
    times: Vec<(i64, usize)>,
    next: usize,
    initial: i64,
    running: i64,
    at: Vec<Option<i64>>,
}

/// The running allocated total of each device as its events go by, read at the times asked.
pub struct UsageAtTimes {
    devices: Vec<Option<Pending>>,
}

impl UsageAtTimes {
    /// For each device (by index) what to measure; None for a device with nothing to.
    pub fn new(devices: Vec<Option<DeviceTimes>>) -> UsageAtTimes {
        let devices = devices
            .into_iter()
            .map(|d| {
                d.map(|DeviceTimes { times, initial }| {
                    let mut order: Vec<(i64, usize)> = times
                        .iter()
                        .copied()
                        .enumerate()
                        .map(|(i, t)| (t, i))
                        .collect();
                    order.sort();
                    Pending {
                        at: vec![None; order.len()],
                        times: order,
                        next: 0,
                        initial,
                        running: initial,
                    }
                })
            })
            .collect();
        UsageAtTimes { devices }
    }

    /// Each device's allocated bytes at its times, in the order they were given; the times
    /// past the last event see the total after it.
    pub fn finish(self) -> Vec<Vec<i64>> {
        self.devices
            .into_iter()
            .map(|d| match d {
                None => Vec::new(),
                Some(mut p) => {
                    while p.next < p.times.len() {
                        p.at[p.times[p.next].1] = Some(p.running);
                        p.next += 1;
                    }
                    p.at.into_iter().map(|v| v.unwrap_or(p.running)).collect()
                }
            })
            .collect()
    }
}

impl TraceSink for UsageAtTimes {
    fn event(
        &mut self,
        device: u32,
        e: &TraceEvent,
        _stream: i64,
        _aux: Option<&crate::model::snapshot::EventAux>,
    ) {
        let Some(Some(p)) = self.devices.get_mut(device as usize) else {
            return;
        };
        if e.time_us != NO_TIME {
            while p.next < p.times.len() && p.times[p.next].0 < e.time_us {
                p.at[p.times[p.next].1] = Some(p.running);
                p.next += 1;
            }
        }
        p.running += allocated_delta(e);
    }

    fn restart(&mut self) {
        for p in self.devices.iter_mut().flatten() {
            p.next = 0;
            p.running = p.initial;
            p.at.iter_mut().for_each(|v| *v = None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::snapshot::Action;

    fn event(action: Action, size: u64, time_us: i64) -> TraceEvent {
        TraceEvent {
            action,
            size,
            time_us,
            ..TraceEvent::default()
        }
    }

    #[test]
    fn an_annotation_sees_every_event_at_or_before_its_time() {
        let mut u = UsageAtTimes::new(vec![
            Some(DeviceTimes {
                times: vec![25, 5, 10, 99],
                initial: 100,
            }),
            None,
        ]);
        for e in [
            event(Action::Alloc, 10, 10),
            event(Action::Alloc, 20, 20),
            event(Action::FreeRequested, 10, 30),
        ] {
            u.event(0, &e, 0, None);
        }
        u.event(1, &event(Action::Alloc, 7, 1), 0, None);
        // before any event: the initial bytes; at 10: the first alloc; at 25: both; past the
        // end: after the free
        assert_eq!(u.finish(), vec![vec![130, 100, 110, 120], vec![]]);
    }
}
