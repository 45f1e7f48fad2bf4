//! `export` of a torch.profiler trace: what memtrack read from it, as JSON (times in
//! microseconds as the trace gives them; devices and threads by name).

use serde::ser::{SerializeSeq, SerializeStruct};
use serde::{Serialize, Serializer};

use crate::model::profile::ProfileTrace;

pub struct ProfileJson<'a>(pub &'a ProfileTrace);

struct Memory<'a>(&'a ProfileTrace);
struct Ooms<'a>(&'a ProfileTrace);
struct Ranges<'a>(&'a ProfileTrace);

#[derive(Serialize)]
struct MemoryRow<'a> {
    ts_us: f64,
    device: String,
    thread: &'a str,
    addr: u64,
    bytes: i64,
    total_allocated: i64,
    total_reserved: i64,
}

#[derive(Serialize)]
struct RangeRow<'a> {
    kind: &'static str,
    name: &'a str,
    thread: &'a str,
    ts_us: f64,
    dur_us: f64,
}

impl Serialize for ProfileJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let t = self.0;
        let mut st = s.serialize_struct("ProfileTrace", 6)?;
        st.serialize_field("kind", "profiler_trace")?;
        st.serialize_field("trace_events", &t.events)?;
        st.serialize_field(
            "devices",
            &t.devices.iter().map(|d| d.label()).collect::<Vec<_>>(),
        )?;
        st.serialize_field("memory_events", &Memory(t))?;
        st.serialize_field("out_of_memory", &Ooms(t))?;
        st.serialize_field("ranges", &Ranges(t))?;
        st.end()
    }
}

impl Serialize for Memory<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let t = self.0;
        let mut seq = s.serialize_seq(Some(t.memory.len()))?;
        for m in &t.memory {
            seq.serialize_element(&MemoryRow {
                ts_us: m.ts_ns as f64 / 1e3,
                device: t.devices[m.device as usize].label(),
                thread: &t.threads[m.thread as usize],
                addr: m.addr,
                bytes: m.bytes,
                total_allocated: m.total_allocated,
                total_reserved: m.total_reserved,
            })?;
        }
        seq.end()
    }
}

impl Serialize for Ooms<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let t = self.0;
        let mut seq = s.serialize_seq(Some(t.ooms.len()))?;
        for o in &t.ooms {
            seq.serialize_element(&MemoryRow {
                ts_us: o.ts_ns as f64 / 1e3,
                device: t.devices[o.device as usize].label(),
                thread: &t.threads[o.thread as usize],
                addr: 0,
                bytes: o.bytes,
                total_allocated: o.total_allocated,
                total_reserved: o.total_reserved,
            })?;
        }
        seq.end()
    }
}

impl Serialize for Ranges<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let t = self.0;
        let mut seq = s.serialize_seq(Some(t.ranges.len()))?;
        for r in &t.ranges {
            seq.serialize_element(&RangeRow {
                kind: r.kind.category(),
                name: t.name(r.name),
                thread: &t.threads[r.thread as usize],
                ts_us: r.start_ns as f64 / 1e3,
                dur_us: r.dur_ns as f64 / 1e3,
            })?;
        }
        seq.end()
    }
}
