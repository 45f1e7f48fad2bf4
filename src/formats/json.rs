//! `export --format json`: the whole model as JSON (layout in docs/export.md).

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
