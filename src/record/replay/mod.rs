//! The agent's stream (docs/record.md, "Wire format") → one recorded process's stats.
//!
//! The agent sends facts: ops (func id, backward flag, and on CUDA the allocator's counters),
//! storages appearing, changing category or size and dying, module hook events. Everything
//! MemoryTracker and MemTracker compute from those facts is computed here: op names, the
//! current module, bytes by category per device, module snapshots per state and iteration, and
//! the peaks, following `torch/distributed/_tools/mem_tracker.py` step by step (`_update_snap`,
//! `_update_peak_stats`, the pre/post forward/backward hooks).
//!
//! `records` decodes the record stream and `messages` the JSON messages into the steps below:
//! `bytes` (storages and bytes by category per device), `ops` (each sample in its context),
//! `modules` (the per-iteration module tables), `peaks`; `finish` turns it all into the
//! model. The wire's constants are `record::protocol`'s.

use serde_json::Value as Json;

use crate::model::TrackerStats;
use crate::record::protocol::{FRAME_JSON, FRAME_RECORDS};

mod bytes;
mod estimated;
mod fields;
mod finish;
mod messages;
mod modules;
mod ops;
mod peaks;
mod records;
mod retained;
mod state;
mod threads;

pub use estimated::{DeviceEvent, DeviceLog, DeviceModel};
pub use fields::device_name;
pub use state::Note;
use state::Replay;

/// One process's recording, decoded.
pub struct Session {
    /// The agent's `hello`: the process was recorded (even if it ran no op).
    pub recorded: bool,
    pub pid: Option<i64>,
    pub rank: Option<i64>,
    pub world_size: Option<i64>,
    /// The parent process's pid (a spawned worker's is the program's).
    pub ppid: Option<i64>,
    pub note: Option<Note>,
    /// Whether the agent said goodbye (otherwise the process vanished).
    pub said_bye: bool,
    pub stats: TrackerStats,
    /// (CLOCK_MONOTONIC ns, ops recorded by then): where the op stream was in time, for
    /// placing the collector's driver-level samples among the ops.
    pub time_marks: Vec<(u64, usize)>,
    /// What was damaged in the journal, if anything, and how much was kept.
    pub damage: Option<String>,
    /// Which image of its process this was: 0, then 1, 2, … for what it `exec`ed into.
    pub image: u32,
    /// An estimated run's device allocations, for the device model (`record::DeviceModel`).
    pub device_log: Option<DeviceLog>,
}

/// Decode one process's spool: its segment files in order (the agent's shared memory-mapped
/// record stream, docs/record.md). Each segment's slot 0 says how many slots hold records;
/// a segment shorter than it says (a file cut short) gives what it holds.
pub fn replay_spool(segments: &[Vec<u8>]) -> Session {
    let mut r = Replay::default();
    let mut slots_before = 0;
    for (k, seg) in segments.iter().enumerate() {
        if r.damage.is_some() {
            break;
        }
        let slots: Vec<i64> = seg
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        let Some(&end) = slots.first() else {
            r.damage = Some(format!(
                "segment {k} is empty (the file was cut short); the {} ops before it are kept",
                r.ops.len()
            ));
            break;
        };
        if end < 1 || end as usize > slots.len() {
            let says = end;
            let end = (end.max(1) as usize).min(slots.len());
            r.slot_base = slots_before + 1;
            r.records(&slots[1..end]);
            r.damage.get_or_insert(format!(
                "segment {k} says it holds {says} slots but has {} (the file was cut short or \
                 overwritten); the {} ops before its end are kept",
                slots.len(),
                r.ops.len()
            ));
            break;
        }
        r.slot_base = slots_before + 1;
        r.records(&slots[1..end as usize]);
        slots_before += end as usize;
    }
    r.finish()
}

/// Decode a whole journal (the bytes one connection sent). A frame cut short at the end (the
/// process died mid-send) is ignored.
pub fn replay(bytes: &[u8]) -> Session {
    let mut r = Replay::default();
    let mut at = 0;
    while at + 5 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        let kind = bytes[at + 4];
        let Some(payload) = bytes.get(at + 5..at + 5 + len) else {
            break;
        };
        at += 5 + len;
        match kind {
            FRAME_JSON => {
                if let Ok(msg) = serde_json::from_slice::<Json>(payload) {
                    r.message(&msg);
                }
            }
            FRAME_RECORDS => {
                let ints: Vec<i64> = payload
                    .chunks_exact(8)
                    .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
                    .collect();
                r.records(&ints);
            }
            _ => {}
        }
    }
    r.finish()
}

impl Replay {
    /// The records stop making sense at slot `i` of the current batch: keep what came before,
    /// read nothing more of this stream, and say so.
    fn damaged(&mut self, i: usize, what: String) {
        if self.damage.is_none() {
            self.damage = Some(format!(
                "{what} at record slot {}; the {} ops before it are kept",
                self.slot_base + i,
                self.ops.len()
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ModState;
    use crate::record::protocol::*;

    fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
        let mut v = (payload.len() as u32).to_le_bytes().to_vec();
        v.push(kind);
        v.extend_from_slice(payload);
        v
    }

    fn ints(v: &[i64]) -> Vec<u8> {
        frame(
            FRAME_RECORDS,
            &v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<_>>(),
        )
    }

    fn json(s: &str) -> Vec<u8> {
        frame(FRAME_JSON, s.as_bytes())
    }

    #[test]
    fn noted_tensors_are_counted_once_in_their_latest_category() {
        let mut j = json(r#"{"t":"hello","backend":"cpu","pid":7,"argv":["x.py"]}"#);
        #[rustfmt::skip]
        j.extend(ints(&[
            NOTE, WHY_SPARSE, 4, -1, // a sparse temporary...
            NOTE, WHY_SPARSE, 2, 4, // ...becomes a gradient
            NOTE, WHY_SPARSE, 2, -1, // another gradient
            NOTE, WHY_META, 0, -1, // a meta parameter
            NOTE, 99, 0, -1, // an unknown reason: ignored
        ]));
        let s = replay(&j);
        let u = &s.stats.record.as_ref().unwrap().unmeasured;
        let got: Vec<(&str, &str, i64)> = u
            .iter()
            .map(|x| (x.reason.as_str(), x.category.as_str(), x.tensors))
            .collect();
        assert_eq!(
            got,
            vec![("sparse", "Gradient", 2), ("meta", "Parameter", 1)]
        );
    }

    #[test]
    fn names_ops_and_accounts_storages() {
        let mut j = json(r#"{"t":"hello","backend":"cpu","pid":7,"argv":["x.py"]}"#);
        j.extend(json(r#"{"t":"op","id":0,"name":"mm.default"}"#));
        j.extend(json(r#"{"t":"name","id":0,"name":"Net"}"#));
        j.extend(json(r#"{"t":"name","id":1,"name":"Net.fc"}"#));
        #[rustfmt::skip]
        j.extend(ints(&[
            MOD, 1, 0, 0, 0, 0, SNAP, 1, 0, MARK, 0, PUSH, 0, 0,
            MOD, 2, 1, 64, 0, 0, SNAP, 2, 0, PUSH, 1, 0,
            ADD, 100, 3, -1, 400, 0, // activation, then op mm (fid 0, forward)
            POP, 1, SNAP, 2, 1, POP, 0,
            ADD, 101, 4, -1, 100, 1, // temp, op in backward, outside any module
            DEL, 100, 1,
        ]));
        let s = replay(&j);
        assert!(s.recorded);
        let t = &s.stats;
        assert_eq!(t.op_count(), 3);
        assert_eq!(t.names.get(0), "Net.fc.forward.mm.default_0");
        assert_eq!(t.names.get(1), "Global.backward.mm.default_1");
        assert_eq!(t.allocated, vec![400.0, 500.0, 100.0]);
        let r = t.record.as_ref().unwrap();
        assert_eq!(
            r.exit.as_ref().unwrap().ended.as_deref(),
            Some("disconnected")
        );
        let it = &r.modules[0];
        let fc = &it.modules[1];
        assert_eq!(fc.fqn, "Net.fc");
        assert_eq!(fc.parameter_bytes, 64);
        // Peak-Forward inserted with Pre-Forward, raised by the op inside fc
        let peak = fc.state(ModState::PeakForward).unwrap();
        assert_eq!(peak.calls[0].total(), 400);
        assert_eq!(
            fc.state(ModState::PostForward).unwrap().calls[0].0[0].by_category[3],
            400
        );
        assert_eq!(r.peak.as_ref().unwrap().total(), 500);
    }

    #[test]
    fn a_damaged_spool_keeps_the_ops_before_the_damage_and_says_where() {
        let slots = |v: &[i64]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let name = br#"{"t":"op","id":0,"name":"mm.default"}"#;
        let mut words = name.to_vec();
        words.resize(name.len().div_ceil(8) * 8, 0);
        let mut records = vec![JSON, name.len() as i64];
        records.extend(
            words
                .chunks(8)
                .map(|c| i64::from_le_bytes(c.try_into().unwrap())),
        );
        records.extend([0, 0, i64::MIN + 7, 0, 0]);
        let mut seg = vec![records.len() as i64 + 1];
        seg.extend(&records);
        let s = replay_spool(&[slots(&seg)]);
        assert_eq!(s.stats.op_count(), 2);
        let d = s.damage.expect("damage found");
        assert!(d.contains("unknown record code"), "{d}");
        assert!(d.contains(&format!("slot {}", records.len() - 2)), "{d}");
        // an op never named, and a segment that says it holds more than it has
        let s = replay_spool(&[slots(&[3, 4 << 2, 0])]);
        assert!(s.damage.unwrap().contains("an op never named"));
        let s = replay_spool(&[slots(&[100, RESET])]);
        assert!(s
            .damage
            .unwrap()
            .contains("says it holds 100 slots but has 2"));
    }

    #[test]
    fn cut_short_stream_keeps_what_arrived() {
        let mut j = json(r#"{"t":"hello","backend":"cpu"}"#);
        j.extend(json(r#"{"t":"op","id":0,"name":"mm.default"}"#));
        j.extend(ints(&[ADD, 1, 3, -1, 10, 0, 0]));
        let mut tail = ints(&[0, 0, 0]);
        tail.truncate(tail.len() - 3);
        j.extend(tail);
        let s = replay(&j);
        assert_eq!(s.stats.op_count(), 2);
    }

    #[test]
    fn cycles_and_time_marks_land_at_their_ops() {
        let mut j = json(r#"{"t":"hello","backend":"cpu","pid":7,"cycles":true}"#);
        j.extend(json(r#"{"t":"op","id":0,"name":"mm.default"}"#));
        j.extend(ints(&[TIME, 1_000, 0, 0, TIME, 2_000]));
        // the message comes before the record that places it (the agent flushes names first)
        j.extend(json(
            r#"{"t":"cycles","id":1,"generation":0,"nodes":[{"label":"list[2]","type":"list","tensor":null},{"label":"Tensor","type":"torch.Tensor","tensor":{"bytes":4000,"storage":9,"shape":[1000],"dtype":"float32","device":"cpu","stack":[]}},{"label":"dict[0]","type":"dict","tensor":null}],"edges":[[0,0,"[1]"],[0,1,"[0]"]]}"#,
        ));
        j.extend(ints(&[0, CYCLE, 1, 0]));
        j.extend(json(
            r#"{"t":"oom","device":0,"memory_stats":{"num_ooms":0,"x":"y"}}"#,
        ));
        let s = replay(&j);
        assert_eq!(s.time_marks, vec![(1_000, 0), (2_000, 2)]);
        let r = s.stats.record.as_ref().unwrap();
        assert!(r.cycles_watched);
        assert_eq!(
            r.cycles.len(),
            1,
            "the dict holds no tensor: not a cycle of its own"
        );
        assert_eq!(r.cycles[0].op_index, 3);
        assert_eq!(r.cycles[0].bytes(), 4000);
        assert_eq!(r.memory_stats_oom.len(), 1);
        assert_eq!(s.stats.op_count(), 4);
    }
}
