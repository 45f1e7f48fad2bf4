//! The agent's JSON messages (hello, names, device, how the process ended, cycles, ...).

use std::collections::BTreeMap;

use serde_json::Value as Json;

use crate::model::{Cycle, CycleEdge, CycleNode, CycleTensor};
use crate::record::protocol::{
    MSG_AGENT_ERROR, MSG_BYE, MSG_CUDA_UNAVAILABLE, MSG_CYCLES, MSG_DEVICE, MSG_ESTIMATE_RANK,
    MSG_ESTIMATE_STOPPED, MSG_EXCEPTION, MSG_HELLO, MSG_NAME, MSG_NO_TORCH, MSG_OOM, MSG_OP,
    MSG_SIGNAL, MSG_SNAPSHOT, MSG_THREAD, MSG_THREADS_BEFORE, MSG_TORCH_NOT_IMPORTED,
    MSG_TORCH_UNSUPPORTED,
};

use super::state::{Note, Replay};

pub(super) fn as_string(v: &Json) -> Option<String> {
    v.as_str().map(str::to_string)
}

pub(super) fn set_name(names: &mut Vec<Option<String>>, id: &Json, name: &Json) {
    if let (Some(id), Some(name)) = (id.as_u64(), name.as_str()) {
        let id = id as usize;
        if id < 1 << 24 {
            if names.len() <= id {
                names.resize(id + 1, None);
            }
            names[id] = Some(name.to_string());
        }
    }
}

impl Replay {
    pub(super) fn message(&mut self, m: &Json) {
        match m["t"].as_str().unwrap_or("") {
            MSG_HELLO => {
                self.cuda = m["backend"].as_str() == Some("cuda");
                if m["backend"].as_str() == Some("estimate") {
                    self.estimated = Some(Default::default());
                }
                self.hello = Some(m.clone());
            }
            MSG_ESTIMATE_RANK => {
                // the program named its rank and world itself (mp.spawn's workers): the file
                // is that rank's, whatever the environment said at the hello
                if let Some(hello) = self.hello.as_mut().and_then(|h| h.as_object_mut()) {
                    for key in ["rank", "world_size"] {
                        if m[key].is_i64() {
                            hello.insert(key.into(), m[key].clone());
                        }
                    }
                }
            }
            MSG_OP => set_name(&mut self.op_names, &m["id"], &m["name"]),
            MSG_THREAD => {
                if let (Some(id), Some(name)) = (m["id"].as_i64(), as_string(&m["name"])) {
                    self.threads.named(id, name);
                }
            }
            MSG_THREADS_BEFORE => {
                if let Some(names) = m["names"].as_array() {
                    self.threads.before = names.iter().filter_map(as_string).collect();
                }
            }
            MSG_NAME => {
                // a name announced again is a rename (names.py: a second live top-level
                // module or optimizer of one class): iterations already closed follow it
                let id = m["id"].as_u64().map(|i| i as usize);
                let old = id.and_then(|i| self.names.get(i).cloned().flatten());
                set_name(&mut self.names, &m["id"], &m["name"]);
                if let (Some(old), Some(new)) = (old, m["name"].as_str()) {
                    for it in &mut self.iterations {
                        for md in it.modules.iter_mut().filter(|md| md.fqn == old) {
                            md.fqn = new.to_string();
                        }
                    }
                }
            }
            MSG_DEVICE => {
                self.device_name = as_string(&m["name"]);
                self.device_total = m["total_bytes"].as_u64();
                self.device_index = m["index"].as_i64();
                if let Some(e) = self.estimated.as_mut() {
                    e.device(m);
                }
                if let Some(u) = as_string(&m["uuid"]) {
                    self.device_uuid = Some(u);
                }
            }
            MSG_CYCLES => {
                let id = m["id"].as_i64().unwrap_or(-1);
                let ops = self.ops.len();
                self.cycles.push((id, ops, cycle_graph(m)));
            }
            MSG_EXCEPTION => {
                self.exception = as_string(&m["text"]);
                self.exception_at = m["file"]
                    .as_str()
                    .map(|f| (f.to_string(), m["line"].as_i64().unwrap_or(0)));
                self.oom |= m["oom"].as_bool().unwrap_or(false);
                self.ended = Some("exception".into());
            }
            MSG_SIGNAL => self.ended = Some("signal".into()),
            MSG_OOM => {
                self.oom = true;
                self.oom_op_index.get_or_insert(self.ops.len() as i64);
                if self.memory_stats_oom.is_empty() {
                    self.memory_stats_oom = int_map(&m["memory_stats"]);
                }
            }
            MSG_SNAPSHOT => {
                if let Some(p) = as_string(&m["path"]) {
                    self.snapshot_paths.push(p);
                }
            }
            MSG_AGENT_ERROR => {
                if let Some(t) = as_string(&m["text"]) {
                    self.agent_errors.push(t);
                }
            }
            MSG_BYE => {
                self.said_bye = true;
                if self.ended.is_none() {
                    self.ended = as_string(&m["how"]);
                }
                self.memory_stats.extend(int_map(&m["memory_stats"]));
                if m["compile"].is_object() {
                    self.compile = Some(m["compile"].clone());
                }
            }
            MSG_NO_TORCH => {
                self.note = Some(Note::NoTorch {
                    python: as_string(&m["python"]).unwrap_or_default(),
                })
            }
            MSG_CUDA_UNAVAILABLE => self.note = Some(Note::CudaUnavailable),
            MSG_TORCH_UNSUPPORTED => {
                self.note = Some(Note::TorchUnsupported {
                    torch: as_string(&m["torch"]).unwrap_or_default(),
                    supported: as_string(&m["supported"]).unwrap_or_default(),
                })
            }
            MSG_TORCH_NOT_IMPORTED => {
                self.note = Some(Note::TorchNotImported {
                    argv: m["argv"]
                        .as_array()
                        .map(|a| a.iter().filter_map(as_string).collect())
                        .unwrap_or_default(),
                })
            }
            kind => {
                if let Some(e) = self.estimated.as_mut() {
                    if e.message(kind, m) && kind == MSG_ESTIMATE_STOPPED {
                        self.ended = Some("stopped".into());
                    }
                }
            }
        }
    }
}

/// `{"key": int}` from a JSON object; other values are skipped.
pub(super) fn int_map(v: &Json) -> BTreeMap<String, i64> {
    v.as_object()
        .map(|o| {
            o.iter()
                .filter_map(|(k, v)| v.as_i64().map(|v| (k.clone(), v)))
                .collect()
        })
        .unwrap_or_default()
}

/// The agent's `cycles` message: every object of one collection that leads to a tensor.
pub(super) fn cycle_graph(m: &Json) -> Cycle {
    let empty = Vec::new();
    let nodes: Vec<CycleNode> = m["nodes"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .map(|n| {
            let t = &n["tensor"];
            CycleNode {
                label: n["label"].as_str().unwrap_or("?").to_string(),
                type_name: n["type"].as_str().unwrap_or("").to_string(),
                tensor: t.is_object().then(|| CycleTensor {
                    bytes: t["bytes"].as_i64().unwrap_or(0),
                    storage: t["storage"].as_i64().unwrap_or(0),
                    shape: t["shape"]
                        .as_array()
                        .map(|a| a.iter().filter_map(Json::as_i64).collect())
                        .unwrap_or_default(),
                    dtype: t["dtype"].as_str().unwrap_or("").to_string(),
                    device: t["device"].as_str().unwrap_or("").to_string(),
                    stack: t["stack"]
                        .as_array()
                        .map(|a| a.iter().filter_map(as_string).collect())
                        .unwrap_or_default(),
                }),
            }
        })
        .collect();
    let n = nodes.len();
    let edges = m["edges"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .filter_map(|e| {
            let (from, to) = (e[0].as_u64()? as usize, e[1].as_u64()? as usize);
            (from < n && to < n).then(|| CycleEdge {
                from,
                to,
                label: e[2].as_str().unwrap_or("?").to_string(),
            })
        })
        .collect();
    Cycle {
        op_index: 0,
        generation: m["generation"].as_i64().unwrap_or(0),
        nodes,
        edges,
        omitted_nodes: m["omitted"].as_i64().unwrap_or(0),
    }
}
