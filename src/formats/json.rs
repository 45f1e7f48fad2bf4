//! `export --format json`: the whole model as JSON (layout in docs/export.md).

use std::cell::RefCell;

use serde::ser::{SerializeMap, SerializeSeq, Serializer};
use serde::Serialize;

use crate::model::TrackerStats;

/// Tracker stats as one JSON document: `{"kind": "tracker_stats", "ops": [...], ...}`.
pub struct TrackerJson<'a>(pub &'a TrackerStats);

struct Ops<'a>(&'a TrackerStats);

#[derive(Serialize)]
struct Op<'a> {
    index: usize,
    name: &'a str,
    allocated_bytes: Option<f64>,
    active_bytes: Option<f64>,
    reserved_bytes: Option<f64>,
}

fn finite(v: f64) -> Option<f64> {
    v.is_finite().then_some(v)
}

impl Serialize for Ops<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let t = self.0;
        let mut seq = s.serialize_seq(Some(t.op_count()))?;
        for i in 0..t.op_count() {
            seq.serialize_element(&Op {
                index: i,
                name: t.names.get(i),
                allocated_bytes: finite(t.allocated[i]),
                active_bytes: finite(t.active[i]),
                reserved_bytes: finite(t.reserved[i]),
            })?;
        }
        seq.end()
    }
}

impl Serialize for TrackerJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let t = self.0;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("kind", "tracker_stats")?;
        m.serialize_entry("format_version", &1)?;
        m.serialize_entry("op_count", &t.op_count())?;
        m.serialize_entry("op_index", &t.op_index)?;
        m.serialize_entry("num_alloc_retries", &t.num_alloc_retries)?;
        m.serialize_entry("markers", &t.markers)?;
        m.serialize_entry("memtrack", &t.record)?;
        m.serialize_entry("ops", &Ops(t))?;
        m.end()
    }
}

// ---- allocator snapshots ----

use crate::model::snapshot::{Snapshot, StackId};
use crate::model::trace::{serialize_events, TraceEvents};

/// A snapshot as one JSON document (docs/snapshots.md, "export"): segments with their blocks,
/// traces, and the interned `frames` and `stacks` tables that `stack` fields index
/// (`null` where the file had no `frames` key). The trace events come from `events` (a kept
/// trace, or where a reading put them aside) as they are written.
pub struct SnapshotJson<'a, 'e> {
    snap: &'a Snapshot,
    events: RefCell<&'e mut dyn TraceEvents>,
}

impl<'a, 'e> SnapshotJson<'a, 'e> {
    pub fn new(snap: &'a Snapshot, events: &'e mut dyn TraceEvents) -> Self {
        SnapshotJson {
            snap,
            events: RefCell::new(events),
        }
    }
}

fn stack_ref(s: StackId) -> Option<u32> {
    (!s.is_missing()).then_some(s.0)
}

struct Seq<F>(usize, F);

impl<F, I, T> Serialize for Seq<F>
where
    F: Fn() -> I,
    I: Iterator<Item = T>,
    T: Serialize,
{
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0))?;
        for item in (self.1)() {
            seq.serialize_element(&item)?;
        }
        seq.end()
    }
}

#[derive(Serialize)]
struct SegmentOut<'a, B: Serialize> {
    device: u32,
    address: u64,
    total_size: u64,
    stream: i64,
    size_class: &'static str,
    size_class_derived: bool,
    pool_id: Option<(i64, i64)>,
    is_expandable: Option<bool>,
    allocated_size: Option<u64>,
    active_size: Option<u64>,
    requested_size: Option<u64>,
    stack: Option<u32>,
    blocks: &'a B,
}

#[derive(Serialize)]
struct BlockOut<H: Serialize> {
    address: u64,
    size: u64,
    requested_size: Option<u64>,
    state: &'static str,
    stack: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    history: Option<H>,
}

#[derive(Serialize)]
struct HistoryOut {
    addr: u64,
    real_size: u64,
    stack: Option<u32>,
}

#[derive(Serialize)]
struct EventOut<'a> {
    action: &'a str,
    addr: u64,
    size: u64,
    time_us: Option<i64>,
    stream: i64,
    stack: Option<u32>,
    #[serde(flatten)]
    aux: Option<&'a crate::model::snapshot::EventAux>,
}

/// A device's events, as they are read from where they are.
struct TraceEventsOut<'a, 'e>(u32, &'a RefCell<&'e mut dyn TraceEvents>);

impl Serialize for TraceEventsOut<'_, '_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut events = self.1.borrow_mut();
        serialize_events(s, *events, self.0, |seq, _, e, stream, aux| {
            seq.serialize_element(&EventOut {
                action: (aux.and_then(|a| a.action_name.as_deref())).unwrap_or(e.action.name()),
                addr: e.addr,
                size: e.size,
                time_us: e.time(),
                stream,
                stack: stack_ref(e.stack),
                aux,
            })
        })
    }
}

#[derive(Serialize)]
struct FrameOut<'a> {
    filename: &'a str,
    name: &'a str,
    line: i64,
}

impl Serialize for SnapshotJson<'_, '_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let snap = self.snap;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("kind", "allocator_snapshot")?;
        m.serialize_entry("format_version", &1)?;
        m.serialize_entry("layout", &snap.layout)?;
        m.serialize_entry("devices", &snap.devices())?;
        let settings: Option<serde_json::Map<String, serde_json::Value>> = snap
            .allocator_settings
            .as_ref()
            .map(|v| v.iter().cloned().collect());
        m.serialize_entry("allocator_settings", &settings)?;
        struct Segs<'a>(&'a Snapshot);
        impl Serialize for Segs<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let snap = self.0;
                let mut seq = s.serialize_seq(Some(snap.segments.len()))?;
                for g in &snap.segments {
                    let blocks = Seq(g.block_len as usize, || {
                        g.blocks(&snap.blocks).iter().map(|b| BlockOut {
                            address: b.address,
                            size: b.size,
                            requested_size: b.requested_size,
                            state: b.state.name(),
                            stack: stack_ref(b.stack),
                            history: (b.history_len > 0).then_some({
                                Seq(b.history_len as usize, move || {
                                    b.history(&snap.history).iter().map(|h| HistoryOut {
                                        addr: h.addr,
                                        real_size: h.real_size,
                                        stack: stack_ref(h.stack),
                                    })
                                })
                            }),
                        })
                    });
                    seq.serialize_element(&SegmentOut {
                        device: g.device,
                        address: g.address,
                        total_size: g.total_size,
                        stream: g.stream,
                        size_class: g.size_class.name(),
                        size_class_derived: g.size_class_derived,
                        pool_id: g.pool_id,
                        is_expandable: g.is_expandable,
                        allocated_size: g.allocated_size,
                        active_size: g.active_size,
                        requested_size: g.requested_size,
                        stack: stack_ref(g.stack),
                        blocks: &blocks,
                    })?;
                }
                seq.end()
            }
        }
        m.serialize_entry("segments", &Segs(snap))?;
        #[derive(Serialize)]
        struct TraceOut<'a, 'e> {
            device: usize,
            events: TraceEventsOut<'a, 'e>,
        }
        let traces_out = Seq(snap.traces.len(), || {
            (0..snap.traces.len()).map(|d| TraceOut {
                device: d,
                events: TraceEventsOut(d as u32, &self.events),
            })
        });
        m.serialize_entry("device_traces", &traces_out)?;
        m.serialize_entry("external_annotations", &snap.annotations)?;
        let st = &snap.stacks;
        m.serialize_entry(
            "frames",
            &Seq(st.frame_count(), || {
                (0..st.frame_count()).map(|i| {
                    let f = st.frame(crate::model::snapshot::FrameId(i as u32));
                    FrameOut {
                        filename: st.str(f.filename),
                        name: st.str(f.name),
                        line: f.line,
                    }
                })
            }),
        )?;
        m.serialize_entry(
            "stacks",
            &Seq(st.stack_count(), || {
                (0..st.stack_count()).map(|i| {
                    st.stack(StackId(i as u32))
                        .iter()
                        .map(|f| f.0)
                        .collect::<Vec<u32>>()
                })
            }),
        )?;
        m.end()
    }
}
