//! `export --format json`: the whole model as JSON (layout in docs/export.md).

use std::io::{self, Write};

use crate::format_thread::{write_formatted, Handover};

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

use crate::model::snapshot::{EventAux, Snapshot, StackId, TraceEvent};
use crate::model::trace::TraceEvents;

/// A snapshot as one JSON document (docs/snapshots.md, "export"): segments with their blocks,
/// traces, and the interned `frames` and `stacks` tables that `stack` fields index
/// (`null` where the file had no `frames` key). The trace events come from `events` (a kept
/// trace, or where a reading put them aside) as they are written.
///
/// Written a part at a time as serde_json writes it (compact), the trace events by hand: there
/// are millions, and serde's way (a call through the writer per token, every key escaped) was
/// most of the time `export` took.
pub fn write_snapshot(
    w: &mut dyn Write,
    snap: &Snapshot,
    events: &mut dyn TraceEvents,
) -> io::Result<()> {
    let part = |w: &mut dyn Write, key: &str, value: &dyn erased::Part| -> io::Result<()> {
        w.write_all(b",")?;
        serde_json::to_writer(&mut *w, key)?;
        w.write_all(b":")?;
        value.write(w)
    };
    w.write_all(br#"{"kind":"allocator_snapshot","format_version":1"#)?;
    part(w, "layout", &erased::Ser(&snap.layout))?;
    part(w, "devices", &erased::Ser(&snap.devices()))?;
    let settings: Option<serde_json::Map<String, serde_json::Value>> = snap
        .allocator_settings
        .as_ref()
        .map(|v| v.iter().cloned().collect());
    part(w, "allocator_settings", &erased::Ser(&settings))?;
    part(w, "segments", &erased::Ser(&Segs(snap)))?;
    w.write_all(br#","device_traces":["#)?;
    for d in 0..snap.traces.len() {
        if d > 0 {
            w.write_all(b",")?;
        }
        write!(w, r#"{{"device":{d},"events":["#)?;
        write_events(w, events, d as u32)?;
        w.write_all(b"]}")?;
    }
    w.write_all(b"]")?;
    part(w, "external_annotations", &erased::Ser(&snap.annotations))?;
    let st = &snap.stacks;
    let frames = Seq(st.frame_count(), || {
        (0..st.frame_count()).map(|i| {
            let f = st.frame(crate::model::snapshot::FrameId(i as u32));
            FrameOut {
                filename: st.str(f.filename),
                name: st.str(f.name),
                line: f.line,
            }
        })
    });
    part(w, "frames", &erased::Ser(&frames))?;
    let stacks = Seq(st.stack_count(), || {
        (0..st.stack_count()).map(|i| {
            st.stack(StackId(i as u32))
                .iter()
                .map(|f| f.0)
                .collect::<Vec<u32>>()
        })
    });
    part(w, "stacks", &erased::Ser(&stacks))?;
    w.write_all(b"}")
}

/// A batch of events on their way to be written as JSON: each with its stream, and what the
/// few that carry something carry (by index in the batch).
#[derive(Default)]
struct EventBatch {
    events: Vec<(TraceEvent, i64)>,
    aux: Vec<(usize, EventAux)>,
    /// Whether it starts the device's list (no comma before its first event).
    first: bool,
}

/// A device's events, comma-separated: read back here while a second thread writes them as
/// JSON, in batches handed over in order (and handed back, to be used again).
fn write_events(w: &mut dyn Write, events: &mut dyn TraceEvents, device: u32) -> io::Result<()> {
    const BATCH: usize = 8192;
    let format = |batch: &EventBatch, out: &mut Vec<u8>| {
        out.clear();
        let mut aux = batch.aux.iter().peekable();
        for (i, (e, stream)) in batch.events.iter().enumerate() {
            if i > 0 || !batch.first {
                out.push(b',');
            }
            let a = aux.next_if(|(at, _)| *at == i).map(|(_, a)| a);
            push_event(out, e, *stream, a);
        }
    };
    write_formatted(w, format, |handover| {
        let mut batch = EventBatch {
            first: true,
            ..EventBatch::default()
        };
        let hand_over = |batch: &mut EventBatch, h: &mut Handover<'_, EventBatch, Vec<u8>>| {
            let mut next = h.batch();
            next.events.clear();
            next.aux.clear();
            next.first = false;
            h.send(std::mem::replace(batch, next))
        };
        events.visit(device, &mut |_, e, stream, aux| {
            if let Some(a) = aux {
                batch.aux.push((batch.events.len(), a.clone()));
            }
            batch.events.push((*e, stream));
            if batch.events.len() == BATCH {
                hand_over(&mut batch, handover)?;
            }
            Ok(())
        })?;
        hand_over(&mut batch, handover)
    })
}

/// (a value serde_json writes, behind one type for `write_snapshot`'s parts)
mod erased {
    use std::io::{self, Write};

    pub trait Part {
        fn write(&self, w: &mut dyn Write) -> io::Result<()>;
    }

    pub struct Ser<'a, T: serde::Serialize>(pub &'a T);

    impl<T: serde::Serialize> Part for Ser<'_, T> {
        fn write(&self, w: &mut dyn Write) -> io::Result<()> {
            Ok(serde_json::to_writer(w, self.0)?)
        }
    }
}

/// One trace event as serde_json writes it: `{"action":…,"addr":…,"size":…,"time_us":…,
/// "stream":…,"stack":…}`, then what the event carries (`device_free`, `user_metadata`,
/// `compile_context`, `action_name`) where it carries it.
fn push_event(out: &mut Vec<u8>, e: &TraceEvent, stream: i64, aux: Option<&EventAux>) {
    let mut num = itoa::Buffer::new();
    out.extend_from_slice(br#"{"action":"#);
    match aux.and_then(|a| a.action_name.as_deref()) {
        Some(name) => push_str(out, name),
        None => {
            // (the names of actions are plain words: nothing in them to escape)
            out.push(b'"');
            out.extend_from_slice(e.action.name().as_bytes());
            out.push(b'"');
        }
    }
    out.extend_from_slice(br#","addr":"#);
    out.extend_from_slice(num.format(e.addr).as_bytes());
    out.extend_from_slice(br#","size":"#);
    out.extend_from_slice(num.format(e.size).as_bytes());
    out.extend_from_slice(br#","time_us":"#);
    match e.time() {
        Some(t) => out.extend_from_slice(num.format(t).as_bytes()),
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(br#","stream":"#);
    out.extend_from_slice(num.format(stream).as_bytes());
    out.extend_from_slice(br#","stack":"#);
    match stack_ref(e.stack) {
        Some(s) => out.extend_from_slice(num.format(s).as_bytes()),
        None => out.extend_from_slice(b"null"),
    }
    if let Some(a) = aux {
        if let Some(free) = a.device_free {
            out.extend_from_slice(br#","device_free":"#);
            out.extend_from_slice(num.format(free).as_bytes());
        }
        for (key, value) in [
            (&br#","user_metadata":"#[..], &a.user_metadata),
            (br#","compile_context":"#, &a.compile_context),
            (br#","action_name":"#, &a.action_name),
        ] {
            if let Some(v) = value {
                out.extend_from_slice(key);
                push_str(out, v);
            }
        }
    }
    out.push(b'}');
}

/// A JSON string, escaped as serde_json escapes it.
fn push_str(out: &mut Vec<u8>, s: &str) {
    serde_json::to_writer(&mut *out, s).expect("writing to memory does not fail");
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
struct FrameOut<'a> {
    filename: &'a str,
    name: &'a str,
    line: i64,
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::snapshot::{Action, NO_TIME};

    /// An event as serde_json writes it from a derived struct (as `export` once did).
    #[derive(Serialize)]
    struct EventOut<'a> {
        action: &'a str,
        addr: u64,
        size: u64,
        time_us: Option<i64>,
        stream: i64,
        stack: Option<u32>,
        #[serde(flatten)]
        aux: Option<&'a EventAux>,
    }

    /// The hand-written events are byte for byte serde_json's: every action, missing times and
    /// stacks, extreme numbers, and strings that need escaping (quotes, backslashes, control
    /// characters, non-ASCII).
    #[test]
    fn events_are_written_as_serde_json_writes_them() {
        let strings = [
            "",
            "step 7",
            "a \"quoted\" \\ path\n\t\r\u{8}\u{c}\u{1}\u{1f}\u{7f}",
            "héllo ✓ 🦀",
        ];
        let mut n = 0u64;
        for &action in Action::ALL.iter() {
            for (i, s) in strings.iter().enumerate() {
                n += 1;
                let e = TraceEvent {
                    addr: [0, u64::MAX, 140441613762560][i % 3],
                    size: n << (i * 20),
                    time_us: [NO_TIME, -5, i64::MAX, 1795372996501459][i],
                    stack: if i == 1 {
                        StackId::MISSING
                    } else {
                        StackId(i as u32)
                    },
                    stream_index: 0,
                    action,
                };
                let auxes = [
                    None,
                    Some(EventAux::default()),
                    Some(EventAux {
                        device_free: Some(u64::MAX - n),
                        user_metadata: Some(s.to_string()),
                        compile_context: Some(strings[3 - i].to_string()),
                        action_name: (i % 2 == 0).then(|| s.to_string()),
                    }),
                ];
                for (aux, stream) in auxes.iter().zip([0, -1, i64::MIN]) {
                    let mut got = Vec::new();
                    push_event(&mut got, &e, stream, aux.as_ref());
                    let want = serde_json::to_vec(&EventOut {
                        action: (aux.as_ref().and_then(|a| a.action_name.as_deref()))
                            .unwrap_or(e.action.name()),
                        addr: e.addr,
                        size: e.size,
                        time_us: e.time(),
                        stream,
                        stack: stack_ref(e.stack),
                        aux: aux.as_ref(),
                    })
                    .unwrap();
                    assert_eq!(
                        String::from_utf8(got).unwrap(),
                        String::from_utf8(want).unwrap()
                    );
                }
            }
        }
    }
}
