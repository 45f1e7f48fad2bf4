//! The end of a replay: op names (`{module}.{phase}.{op}_{n}`), markers, the record's
//! extension (`RecordInfo`) and the process's `Session`.

use std::collections::HashMap;

use serde_json::Value as Json;

use crate::analysis::cycles::split_into_cycles;
use crate::model::{
    Attached, CompileInfo, CompiledRegion, ExitInfo, Marker, OpNames, RecordInfo, TrackerStats,
    Unmeasured, CATEGORIES,
};
use crate::record::protocol::COMPILED_GRAPH;

use super::fields::{snapshot, NO_NAME};
use super::messages::as_string;
use super::state::Replay;
use super::Session;

impl Replay {
    pub(super) fn finish(mut self) -> Session {
        if let Some(it) = self.iter.take() {
            self.close(it);
        }
        let n = self.ops.len();
        let mut names = OpNames::with_capacity(n, n * 40);
        let mut counters: HashMap<u32, u64> = HashMap::new();
        let mut buf = String::new();
        let mut regions: Vec<CompiledRegion> = Vec::new();
        for op in &self.ops {
            let count = counters.entry(op.fid).or_insert(0);
            buf.clear();
            let ctx = if op.ctx == NO_NAME {
                "Global"
            } else {
                self.names
                    .get(op.ctx as usize)
                    .and_then(|n| n.as_deref())
                    .unwrap_or("?")
            };
            let op_name = self
                .op_names
                .get(op.fid as usize)
                .and_then(|n| n.as_deref())
                .unwrap_or("?");
            use std::fmt::Write;
            let _ = write!(buf, "{ctx}.{}.{op_name}_{count}", op.phase.name());
            *count += 1;
            names.push(&buf);
            if op_name == COMPILED_GRAPH {
                let region = format!("{ctx}.{}", op.phase.name());
                match regions.iter_mut().find(|r| r.region == region) {
                    Some(r) => r.graph_calls += 1,
                    None => regions.push(CompiledRegion {
                        region,
                        graph_calls: 1,
                    }),
                }
            }
        }
        // `markers` keeps each name's last occurrence, in first-occurrence order (a dict)
        let mut last: Vec<Marker> = Vec::new();
        for m in &self.markers {
            match last.iter_mut().find(|x| x.name == m.name) {
                Some(x) => x.op_index = m.op_index,
                None => last.push(m.clone()),
            }
        }
        let hello = self.hello.clone().unwrap_or(Json::Null);
        let int = |k: &str| hello[k].as_i64();
        let (threads, thread_runs) = self.threads.finish();
        let (device_log, estimate) = match self.estimated.take() {
            Some(e) => {
                let (log, facts) = e.finish();
                (Some(log), Some(facts))
            }
            None => (None, None),
        };
        let record = RecordInfo {
            version: env!("CARGO_PKG_VERSION").to_string(),
            backend: hello["backend"].as_str().unwrap_or("cpu").to_string(),
            device_name: self.device_name.clone(),
            device_total_bytes: self.device_total,
            argv: hello["argv"]
                .as_array()
                .map(|a| a.iter().filter_map(as_string).collect())
                .unwrap_or_default(),
            rank: int("rank"),
            world_size: int("world_size"),
            marker_events: self.markers.clone(),
            iteration_starts: std::mem::take(&mut self.iteration_starts),
            exit: Some(ExitInfo {
                code: None,
                signal: None,
                oom: self.oom,
                exception: self.exception.clone(),
                exception_at: self.exception_at.clone(),
                ended: Some(
                    self.ended
                        .clone()
                        .unwrap_or_else(|| "disconnected".to_string()),
                ),
                oom_op_index: self.oom_op_index,
            }),
            snapshot_paths: self.snapshot_paths.clone(),
            pid: int("pid"),
            torch_version: as_string(&hello["torch"]),
            observer: as_string(&hello["observer"]),
            modules: std::mem::take(&mut self.iterations),
            peak: Some(snapshot(&self.peak)),
            memory_stats: std::mem::take(&mut self.memory_stats),
            agent_errors: std::mem::take(&mut self.agent_errors),
            device_index: self.device_index,
            device_uuid: self.device_uuid.clone(),
            memory_stats_oom: std::mem::take(&mut self.memory_stats_oom),
            device_memory: Vec::new(),
            cycles_watched: hello["cycles"].as_bool().unwrap_or(false),
            cycles: std::mem::take(&mut self.cycles)
                .into_iter()
                .flat_map(|(_, ops, mut c)| {
                    c.op_index = ops as i64;
                    split_into_cycles(c)
                })
                .collect(),
            compile: compile_info(self.compile.as_ref(), regions),
            unmeasured: self
                .unmeasured
                .iter()
                .filter(|(_, n)| **n > 0)
                .map(|(&(why, cat), &n)| Unmeasured {
                    reason: Unmeasured::REASONS[why].0.to_string(),
                    category: CATEGORIES[cat].to_string(),
                    tensors: n,
                })
                .collect(),
            retained: Some(self.retained_ops(&names)),
            threads,
            thread_runs,
            threads_unrecorded: std::mem::take(&mut self.threads.before),
            attached: attached(&hello["attached"]),
            estimate,
        };
        let stats = TrackerStats {
            names,
            allocated: std::mem::take(&mut self.allocated),
            active: std::mem::take(&mut self.active),
            reserved: std::mem::take(&mut self.reserved),
            markers: last,
            num_alloc_retries: record
                .memory_stats
                .get("num_alloc_retries")
                .copied()
                .unwrap_or(0),
            op_index: Some(n as i64),
            record: Some(record),
        };
        Session {
            recorded: self.hello.is_some(),
            pid: int("pid"),
            rank: int("rank"),
            world_size: int("world_size"),
            ppid: int("ppid"),
            note: self.note.clone(),
            said_bye: self.said_bye,
            stats,
            time_marks: std::mem::take(&mut self.time_marks),
            damage: self.damage.take(),
            image: 0,
            device_log,
        }
    }
}

/// dynamo's counters (from `bye`) and the regions whose compiled graphs ran; None when the
/// program never compiled anything.
fn compile_info(counters: Option<&Json>, regions: Vec<CompiledRegion>) -> Option<CompileInfo> {
    if counters.is_none() && regions.is_empty() {
        return None;
    }
    let c = counters.cloned().unwrap_or(Json::Null);
    Some(CompileInfo {
        frames_ok: c["frames_ok"].as_i64().unwrap_or(0),
        frames_total: c["frames_total"].as_i64().unwrap_or(0),
        graph_breaks: c["graph_breaks"].as_i64().unwrap_or(0),
        graph_break_reasons: c["graph_break_reasons"]
            .as_array()
            .map(|a| a.iter().filter_map(as_string).collect())
            .unwrap_or_default(),
        regions,
    })
}

/// `memtrack attach`'s facts from the hello: when, and what was held then.
fn attached(a: &Json) -> Option<Attached> {
    let unix_time = a["unix_time"].as_f64()?;
    let held = a["held"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_i64()?)))
                .collect()
        })
        .unwrap_or_default();
    Some(Attached { unix_time, held })
}
