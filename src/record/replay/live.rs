//! A recording replayed while the program writes it (`memtrack watch`): records go in as the
//! agent publishes them, and what they gave comes out once and is forgotten here (the ops'
//! samples, closed iterations, markers), so the replay holds the program's state now (live
//! storages, the module stack, the iteration under way) however long the run. MemTracker's
//! bookkeeping is the code `finalize` runs at the end, and ops are named as the file names them.

use std::collections::HashMap;

use serde_json::Value as Json;

use crate::model::{IterationModules, Marker, ModuleSnapshot};

use super::fields::{snapshot, Phase, Pushed};
use super::finish::write_op_name;
use super::messages::as_string;
use super::state::Replay;

/// One process's records, replayed as they come.
#[derive(Default)]
pub struct LiveReplay {
    r: Replay,
    /// Calls of each op so far (the `_n` of its name).
    counters: HashMap<u32, u64>,
    /// Iteration starts handed out.
    starts_taken: usize,
}

/// One op as it comes out: its index, its name (`MLP.fc1.forward.mm.default_3`) and its
/// allocated / active / reserved bytes after it.
pub struct LiveOp<'a> {
    /// 0-based, over the whole run.
    pub index: usize,
    /// As the stats file will name it.
    pub name: &'a str,
    /// Allocated, active, reserved.
    pub bytes: [f64; 3],
}

/// Where the program is now.
#[derive(Clone, Debug, Default)]
pub struct Now {
    /// Ops recorded.
    pub ops: usize,
    /// Iterations begun (the one under way is this one).
    pub iteration: usize,
    /// `forward`, `backward`, `optimizer step`, or `outside modules`.
    pub phase: &'static str,
    /// The innermost module running (the optimizer during its step).
    pub module: Option<String>,
    /// Bytes by category now, per device.
    pub memory: ModuleSnapshot,
    /// Bytes by category at the highest total so far.
    pub peak: ModuleSnapshot,
    /// How the process ended (`exit`, `exception`, `signal`), once it said.
    pub ended: Option<String>,
    /// A CUDA out-of-memory error was seen.
    pub oom: bool,
    /// The op index of the first out-of-memory error.
    pub oom_op: Option<i64>,
}

/// What the process said of itself (its `hello`).
#[derive(Clone, Debug, Default)]
pub struct Hello {
    /// Its pid.
    pub pid: Option<i64>,
    /// Its rank under torchrun.
    pub rank: Option<i64>,
    /// `cuda` or `cpu`.
    pub backend: String,
    /// Its command line.
    pub argv: Vec<String>,
    /// The GPU's name, on CUDA.
    pub device: Option<String>,
}

impl LiveReplay {
    /// A replay that has seen nothing yet.
    pub fn new() -> LiveReplay {
        LiveReplay::default()
    }

    /// Records the agent published, in order; the slots taken: up to the end of the last
    /// whole record (feed the rest again with what follows it).
    pub fn feed(&mut self, slots: &[i64]) -> usize {
        if self.r.damage.is_some() {
            return 0;
        }
        self.r.records(slots)
    }

    /// Where the records stopped making sense, if they did (nothing after is read).
    pub fn damage(&self) -> Option<&str> {
        self.r.damage.as_deref()
    }

    /// Whether the process said hello (it records).
    pub fn recording(&self) -> bool {
        self.r.hello.is_some()
    }

    /// The ops recorded since the last call, in order, named; they are forgotten here.
    pub fn take_ops(&mut self, mut f: impl FnMut(LiveOp<'_>)) {
        let mut buf = String::new();
        let ops = std::mem::take(&mut self.r.ops);
        for (k, op) in ops.iter().enumerate() {
            let count = self.counters.entry(op.fid).or_insert(0);
            buf.clear();
            let (ctx, label) = (self.r.context_name(op.ctx), self.r.op_label(op.fid));
            write_op_name(&mut buf, ctx, op.phase, label, *count);
            *count += 1;
            f(LiveOp {
                index: self.r.ops_base + k,
                name: &buf,
                bytes: [self.r.allocated[k], self.r.active[k], self.r.reserved[k]],
            });
        }
        self.r.ops_base += ops.len();
        self.r.allocated.clear();
        self.r.active.clear();
        self.r.reserved.clear();
        self.r.time_marks.clear();
        // the ops' vectors keep their capacity: the next batch fills them again
        let mut ops = ops;
        ops.clear();
        self.r.ops = ops;
    }

    /// The iterations whose module tables closed since the last call (MemTracker's tables,
    /// as the file will hold them).
    pub fn take_iterations(&mut self) -> Vec<IterationModules> {
        std::mem::take(&mut self.r.iterations)
    }

    /// The `fw_start` / `fw_bw_boundary` markers since the last call.
    pub fn take_markers(&mut self) -> Vec<Marker> {
        std::mem::take(&mut self.r.markers)
    }

    /// The op indices where iterations began, since the last call.
    pub fn take_iteration_starts(&mut self) -> Vec<i64> {
        let starts = &mut self.r.iteration_starts;
        // the replay keeps the last one handed out: whether there was one decides where the
        // first iteration begins
        let kept = (self.starts_taken > 0) as usize;
        let fresh = starts[kept..].to_vec();
        if starts.len() > 1 {
            starts.drain(..starts.len() - 1);
        }
        self.starts_taken += fresh.len();
        fresh
    }

    /// The program's state now.
    pub fn now(&self) -> Now {
        let r = &self.r;
        let running = (r.parents.iter().rev()).find(|(_, how)| *how != Pushed::PassThrough);
        let (phase, module) = match (r.optimizer, running) {
            (Some(o), _) => ("optimizer step", Some(o)),
            (None, Some(&(name, Pushed::Backward))) => {
                ("backward", Some(r.innermost_in_backward(name)))
            }
            (None, Some(&(name, _))) => (Phase::Forward.name(), Some(name)),
            (None, None) => ("outside modules", None),
        };
        let unseen = r.iteration_starts.len() - (self.starts_taken > 0) as usize;
        Now {
            ops: r.op_count(),
            iteration: self.starts_taken + unseen,
            phase,
            module: module.map(|m| r.context_name(m).to_string()),
            memory: snapshot(&r.curr),
            peak: snapshot(&r.peak),
            ended: r.ended.clone(),
            oom: r.oom,
            oom_op: r.oom_op_index,
        }
    }

    /// What the process said of itself.
    pub fn hello(&self) -> Hello {
        let h = self.r.hello.clone().unwrap_or(Json::Null);
        Hello {
            pid: h["pid"].as_i64(),
            rank: h["rank"].as_i64(),
            backend: h["backend"].as_str().unwrap_or("cpu").to_string(),
            argv: (h["argv"].as_array())
                .map(|a| a.iter().filter_map(as_string).collect())
                .unwrap_or_default(),
            device: self.r.device_name.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::protocol::*;

    /// The slots of a JSON message record.
    fn message(s: &str) -> Vec<i64> {
        let mut words = s.as_bytes().to_vec();
        words.resize(s.len().div_ceil(8) * 8, 0);
        let mut v = vec![JSON, s.len() as i64];
        v.extend(
            words
                .chunks(8)
                .map(|c| i64::from_le_bytes(c.try_into().unwrap())),
        );
        v
    }

    #[test]
    fn ops_and_iterations_come_out_once_with_the_files_names() {
        let mut slots = message(r#"{"t":"hello","backend":"cpu","pid":7,"argv":["x.py"]}"#);
        slots.extend(message(r#"{"t":"op","id":0,"name":"mm.default"}"#));
        slots.extend(message(r#"{"t":"name","id":0,"name":"Net"}"#));
        let step = [
            MOD, 1, 0, 0, 0, 0, SNAP, 1, 0, MARK, 0, PUSH, 0, 0, ADD, 100, 3, -1, 400, 0, POP, 0,
            DEL, 100, 0,
        ];
        slots.extend(step);
        let mut live = LiveReplay::new();
        // a batch may end anywhere: a record cut short is left for the next
        let (a, b) = slots.split_at(slots.len() - 2);
        assert_eq!(live.feed(a), a.len() - 1, "DEL without its key waits");
        let now = live.now();
        assert_eq!(
            (now.ops, now.iteration, now.phase),
            (1, 1, "outside modules")
        );
        assert_eq!(now.memory.total(), 400);
        live.feed(&[&a[a.len() - 1..], b].concat());
        assert_eq!(live.now().memory.total(), 0);
        let mut seen = Vec::new();
        live.take_ops(|op| seen.push((op.index, op.name.to_string(), op.bytes[0])));
        assert_eq!(
            seen,
            vec![
                (0, "Net.forward.mm.default_0".to_string(), 400.0),
                (1, "Global.forward.mm.default_1".to_string(), 0.0)
            ]
        );
        assert_eq!(live.take_iteration_starts(), vec![0]);
        assert_eq!(live.take_markers().len(), 1);
        // the next iteration: named on, counted on, its start handed out once
        live.feed(&[ITER, MOD, 2, 0, 0, 0, 0, 0]);
        live.take_ops(|op| seen.push((op.index, op.name.to_string(), op.bytes[0])));
        assert_eq!(seen[2], (2, "Global.forward.mm.default_2".to_string(), 0.0));
        assert_eq!(live.take_iteration_starts(), vec![2]);
        assert_eq!(live.take_iteration_starts(), Vec::<i64>::new());
        assert_eq!(live.now().iteration, 2);
        let closed = live.take_iterations();
        assert_eq!(closed.len(), 1);
        assert_eq!(closed[0].modules[0].fqn, "Net");
        assert!(live.take_iterations().is_empty());
        // a fw_start after the first start does not begin a first iteration again
        live.feed(&[MARK, 0, 0]);
        assert!(live.take_iteration_starts().is_empty());
        assert_eq!(live.now().ops, 4);
    }
}
