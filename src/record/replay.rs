//! The agent's stream (docs/record.md, "Wire format") → one recorded process's stats.
//!
//! The agent sends facts: ops (func id, backward flag, and on CUDA the allocator's counters),
//! storages appearing, changing category or size and dying, module hook events. Everything
//! MemoryTracker and MemTracker compute from those facts is computed here: op names, the
//! current module, bytes by category per device, module snapshots per state and iteration, and
//! the peaks, following `torch/distributed/_tools/mem_tracker.py` step by step (`_update_snap`,
//! `_update_peak_stats`, the pre/post forward/backward hooks).

use std::collections::{BTreeMap, HashMap};

use serde_json::Value as Json;

use crate::analysis::cycles::split_into_cycles;
use crate::model::modules::StateSnapshots;
use crate::model::{
    CompileInfo, CompiledRegion, Cycle, CycleEdge, CycleNode, CycleTensor, DeviceBytes, ExitInfo,
    IterationModules, Marker, ModState, ModuleSnapshot, ModuleStats, OpNames, RecordInfo,
    TrackerStats,
};

// record codes, as in _memtrack_agent.py
const ADD: i64 = -1;
const DEL: i64 = -2;
const REF: i64 = -3;
const SIZE: i64 = -4;
const PUSH: i64 = -5;
const POP: i64 = -6;
const RESET: i64 = -7;
const MOD: i64 = -8;
const SNAP: i64 = -9;
const INPUT: i64 = -10;
const OUTPUT: i64 = -11;
const ITER: i64 = -12;
const MARK: i64 = -13;
const OPT_BEGIN: i64 = -14;
const OPT_END: i64 = -15;
const CYCLE: i64 = -16;
const TIME: i64 = -17;
const JSON_MSG: i64 = -18;

pub const FRAME_JSON: u8 = 1;
pub const FRAME_RECORDS: u8 = 2;

/// Bytes by category (7) and total, on one device; devices are -1 (CPU) or a CUDA index.
type Row = [i64; 8];
const TOTAL: usize = 7;
/// MemTracker's `Dict[device, Dict[str, int]]`, devices in order.
type Snap = Vec<(i32, Row)>;

const NO_NAME: u32 = u32::MAX;

#[derive(Clone, Copy)]
struct Op {
    fid: u32,
    ctx: u32,
    phase: Phase,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Forward,
    Backward,
    Step,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Forward => "forward",
            Phase::Backward => "backward",
            Phase::Step => "step",
        }
    }
}

struct Storage {
    cat: usize,
    dev: i32,
    bytes: i64,
}

struct ModB {
    fqn: u32,
    parameter_bytes: i64,
    buffer_bytes: i64,
    input_bytes: i64,
    output_bytes: i64,
    states: Vec<(ModState, Vec<Snap>)>,
    local_peak: Vec<(i32, i64)>,
}

impl ModB {
    fn push(&mut self, state: ModState, snap: Snap) {
        match self.states.iter_mut().find(|(s, _)| *s == state) {
            Some((_, calls)) => calls.push(snap),
            None => self.states.push((state, vec![snap])),
        }
    }
}

struct Iter {
    first_op: usize,
    modules: Vec<ModB>,
    by_mk: HashMap<i64, usize>,
    by_name: HashMap<u32, Vec<usize>>,
    peak: Snap,
}

impl Iter {
    fn new(first_op: usize, curr: &Snap) -> Iter {
        Iter {
            first_op,
            modules: Vec::new(),
            by_mk: HashMap::new(),
            by_name: HashMap::new(),
            peak: curr.clone(),
        }
    }
}

/// Something a process said that is not a recording: why it did not record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Note {
    /// The interpreter has no torch to import.
    NoTorch { python: String },
    /// torch is installed but the program never imported it.
    TorchNotImported { argv: Vec<String> },
    /// `--backend cuda` where torch sees no CUDA: the agent stopped the program (exit 2).
    CudaUnavailable,
}

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
}

/// Decode one process's spool: its segment files in order (the agent's shared memory-mapped
/// record stream, docs/record.md). Each segment's slot 0 says how many slots hold records;
/// a segment shorter than it says (a file cut short) gives what it holds.
pub fn replay_spool(segments: &[Vec<u8>]) -> Session {
    let mut r = Replay::default();
    for seg in segments {
        let slots: Vec<i64> = seg
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        let Some(&end) = slots.first() else { continue };
        let end = (end.max(1) as usize).min(slots.len());
        r.records(&slots[1..end]);
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

#[derive(Default)]
struct Replay {
    hello: Option<Json>,
    cuda: bool,
    op_names: Vec<Option<String>>,
    names: Vec<Option<String>>,
    ops: Vec<Op>,
    allocated: Vec<f64>,
    active: Vec<f64>,
    reserved: Vec<f64>,
    storages: HashMap<i64, Storage>,
    curr: Snap,
    /// A total grew since the last op: peaks may need updating.
    dirty: bool,
    /// ModTracker's `parents` (without "Global"): name id, pushed by a backward hook.
    parents: Vec<(u32, bool)>,
    optimizer: Option<u32>,
    iter: Option<Iter>,
    iterations: Vec<IterationModules>,
    peak: Snap,
    markers: Vec<Marker>,
    device_name: Option<String>,
    device_total: Option<u64>,
    exception: Option<String>,
    oom: bool,
    oom_op_index: Option<i64>,
    ended: Option<String>,
    said_bye: bool,
    memory_stats: BTreeMap<String, i64>,
    snapshot_paths: Vec<String>,
    agent_errors: Vec<String>,
    note: Option<Note>,
    device_index: Option<i64>,
    device_uuid: Option<String>,
    memory_stats_oom: BTreeMap<String, i64>,
    /// Collections that found cycles, by the agent's id: (ops when reported, the graph).
    cycles: Vec<(i64, usize, Cycle)>,
    time_marks: Vec<(u64, usize)>,
    /// The `compile` part of `bye`: dynamo's counters.
    compile: Option<Json>,
}

fn as_string(v: &Json) -> Option<String> {
    v.as_str().map(str::to_string)
}

fn set_name(names: &mut Vec<Option<String>>, id: &Json, name: &Json) {
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
    fn message(&mut self, m: &Json) {
        match m["t"].as_str().unwrap_or("") {
            "hello" => {
                self.cuda = m["backend"].as_str() == Some("cuda");
                self.hello = Some(m.clone());
            }
            "op" => set_name(&mut self.op_names, &m["id"], &m["name"]),
            "name" => set_name(&mut self.names, &m["id"], &m["name"]),
            "device" => {
                self.device_name = as_string(&m["name"]);
                self.device_total = m["total_bytes"].as_u64();
                self.device_index = m["index"].as_i64();
                if let Some(u) = as_string(&m["uuid"]) {
                    self.device_uuid = Some(u);
                }
            }
            "cycles" => {
                let id = m["id"].as_i64().unwrap_or(-1);
                let ops = self.ops.len();
                self.cycles.push((id, ops, cycle_graph(m)));
            }
            "exception" => {
                self.exception = as_string(&m["text"]);
                self.oom |= m["oom"].as_bool().unwrap_or(false);
                self.ended = Some("exception".into());
            }
            "signal" => self.ended = Some("signal".into()),
            "oom" => {
                self.oom = true;
                self.oom_op_index.get_or_insert(self.ops.len() as i64);
                if self.memory_stats_oom.is_empty() {
                    self.memory_stats_oom = int_map(&m["memory_stats"]);
                }
            }
            "snapshot" => {
                if let Some(p) = as_string(&m["path"]) {
                    self.snapshot_paths.push(p);
                }
            }
            "agent_error" => {
                if let Some(t) = as_string(&m["text"]) {
                    self.agent_errors.push(t);
                }
            }
            "bye" => {
                self.said_bye = true;
                if self.ended.is_none() {
                    self.ended = as_string(&m["how"]);
                }
                self.memory_stats.extend(int_map(&m["memory_stats"]));
                if m["compile"].is_object() {
                    self.compile = Some(m["compile"].clone());
                }
            }
            "no_torch" => {
                self.note = Some(Note::NoTorch {
                    python: as_string(&m["python"]).unwrap_or_default(),
                })
            }
            "cuda_unavailable" => self.note = Some(Note::CudaUnavailable),
            "torch_not_imported" => {
                self.note = Some(Note::TorchNotImported {
                    argv: m["argv"]
                        .as_array()
                        .map(|a| a.iter().filter_map(as_string).collect())
                        .unwrap_or_default(),
                })
            }
            _ => {}
        }
    }

    fn records(&mut self, v: &[i64]) {
        let mut i = 0;
        // each arm checks it has its arguments; a short record ends the frame
        let n = v.len();
        while i < n {
            let code = v[i];
            let need = |k: usize| i + k < n;
            match code {
                c if c >= 0 => {
                    let bw = c & 1 == 1;
                    let fid = (c >> 2) as u32;
                    if self.cuda {
                        if !need(3) {
                            return;
                        }
                        self.op(fid, bw, Some([v[i + 1], v[i + 2], v[i + 3]]));
                        i += 4;
                    } else {
                        self.op(fid, bw, None);
                        i += 1;
                    }
                }
                ADD => {
                    if !need(4) {
                        return;
                    }
                    self.add(v[i + 1], v[i + 2], v[i + 3], v[i + 4]);
                    i += 5;
                }
                DEL => {
                    if !need(1) {
                        return;
                    }
                    self.del(v[i + 1]);
                    i += 2;
                }
                REF => {
                    if !need(2) {
                        return;
                    }
                    self.recategorize(v[i + 1], v[i + 2]);
                    i += 3;
                }
                SIZE => {
                    if !need(2) {
                        return;
                    }
                    self.resize(v[i + 1], v[i + 2]);
                    i += 3;
                }
                PUSH => {
                    if !need(2) {
                        return;
                    }
                    self.parents.push((v[i + 1] as u32, v[i + 2] == 1));
                    i += 3;
                }
                POP => {
                    if !need(1) {
                        return;
                    }
                    let id = v[i + 1] as u32;
                    if let Some(k) = self.parents.iter().rposition(|(n, _)| *n == id) {
                        self.parents.remove(k);
                    }
                    i += 2;
                }
                RESET => {
                    self.parents.clear();
                    i += 1;
                }
                MOD => {
                    if !need(5) {
                        return;
                    }
                    self.new_module(v[i + 1], v[i + 2] as u32, v[i + 3], v[i + 4], v[i + 5]);
                    i += 6;
                }
                SNAP => {
                    if !need(2) {
                        return;
                    }
                    self.snap(v[i + 1], v[i + 2]);
                    i += 3;
                }
                INPUT => {
                    if !need(3) {
                        return;
                    }
                    self.input(v[i + 1], v[i + 2] as u32, v[i + 3]);
                    i += 4;
                }
                OUTPUT => {
                    if !need(2) {
                        return;
                    }
                    if let Some(m) = self.module(v[i + 1]) {
                        m.output_bytes = v[i + 2];
                    }
                    i += 3;
                }
                ITER => {
                    self.next_iteration();
                    i += 1;
                }
                MARK => {
                    if !need(1) {
                        return;
                    }
                    let name = if v[i + 1] == 0 {
                        "fw_start"
                    } else {
                        "fw_bw_boundary"
                    };
                    self.markers.push(Marker {
                        name: name.into(),
                        op_index: self.ops.len() as i64,
                    });
                    i += 2;
                }
                OPT_BEGIN => {
                    if !need(1) {
                        return;
                    }
                    self.optimizer = Some(v[i + 1] as u32);
                    i += 2;
                }
                OPT_END => {
                    self.optimizer = None;
                    i += 1;
                }
                CYCLE => {
                    if !need(1) {
                        return;
                    }
                    let (id, ops) = (v[i + 1], self.ops.len());
                    if let Some(c) = self.cycles.iter_mut().find(|c| c.0 == id) {
                        c.1 = ops;
                    }
                    i += 2;
                }
                JSON_MSG => {
                    if !need(1) {
                        return;
                    }
                    let len = v[i + 1].max(0) as usize;
                    let words = len.div_ceil(8);
                    if i + 2 + words > n {
                        return;
                    }
                    let bytes: Vec<u8> = v[i + 2..i + 2 + words]
                        .iter()
                        .flat_map(|w| w.to_le_bytes())
                        .take(len)
                        .collect();
                    if let Ok(msg) = serde_json::from_slice::<Json>(&bytes) {
                        self.message(&msg);
                    }
                    i += 2 + words;
                }
                TIME => {
                    if !need(1) {
                        return;
                    }
                    self.time_marks
                        .push((v[i + 1].max(0) as u64, self.ops.len()));
                    i += 2;
                }
                _ => return, // unknown: the rest of the frame cannot be framed
            }
        }
    }

    fn op(&mut self, fid: u32, bw: bool, cuda: Option<[i64; 3]>) {
        let (ctx, phase) = if let Some(o) = self.optimizer {
            (o, Phase::Step)
        } else if let Some(&(name, pushed_in_bw)) = self.parents.last() {
            if pushed_in_bw {
                (self.innermost_in_backward(name), Phase::Backward)
            } else {
                (name, Phase::Forward)
            }
        } else {
            (NO_NAME, if bw { Phase::Backward } else { Phase::Forward })
        };
        self.ops.push(Op { fid, ctx, phase });
        match cuda {
            Some([a, b, c]) => {
                self.allocated.push(a as f64);
                self.active.push(b as f64);
                self.reserved.push(c as f64);
            }
            None => {
                let total: i64 = self.curr.iter().map(|(_, r)| r[TOTAL]).sum();
                self.allocated.push(total as f64);
                self.active.push(total as f64);
                self.reserved.push(total as f64);
            }
        }
        if self.dirty {
            self.dirty = false;
            self.update_peaks(bw);
        }
    }

    /// The module whose backward is running. Several modules' backward hooks fire on the same
    /// gradient (a leaf whose output is its parent's output: ResNet's `fc`, a block's last
    /// ReLU), the outermost last; the op belongs to the innermost of them: the deepest name
    /// pushed in backward, the latest among equals.
    fn innermost_in_backward(&self, last: u32) -> u32 {
        let depth = |id: u32| {
            self.names
                .get(id as usize)
                .and_then(|n| n.as_deref())
                .map_or(0, |n| n.matches('.').count())
        };
        let mut best = (depth(last), last);
        for &(name, bw) in self.parents.iter().rev() {
            if bw && depth(name) > best.0 {
                best = (depth(name), name);
            }
        }
        best.1
    }

    /// MemTracker's `_update_peak_stats`, run after each op (only when a total grew: otherwise
    /// no peak can be exceeded).
    fn update_peaks(&mut self, bw: bool) {
        let state = if bw {
            ModState::PeakBackward
        } else {
            ModState::PeakForward
        };
        if let Some(it) = self.iter.as_mut() {
            for &(name, _) in &self.parents {
                let Some(idxs) = it.by_name.get(&name) else {
                    continue;
                };
                for &mi in idxs {
                    let m = &mut it.modules[mi];
                    let Some(k) = m.states.iter().position(|(s, _)| *s == state) else {
                        continue;
                    };
                    for &(dev, row) in &self.curr {
                        let lp = m.local_peak.iter_mut().find(|(d, _)| *d == dev);
                        let higher = match lp {
                            Some((_, p)) if *p < row[TOTAL] => {
                                *p = row[TOTAL];
                                true
                            }
                            Some(_) => false,
                            None if row[TOTAL] > 0 => {
                                m.local_peak.push((dev, row[TOTAL]));
                                true
                            }
                            None => false,
                        };
                        if higher {
                            if let Some(last) = m.states[k].1.last_mut() {
                                set_dev(last, dev, row);
                            }
                        }
                    }
                }
            }
            raise_peak(&mut it.peak, &self.curr);
        }
        raise_peak(&mut self.peak, &self.curr);
    }

    fn row(&mut self, dev: i32) -> &mut Row {
        let k = match self.curr.binary_search_by_key(&dev, |(d, _)| *d) {
            Ok(k) => k,
            Err(k) => {
                self.curr.insert(k, (dev, [0; 8]));
                k
            }
        };
        &mut self.curr[k].1
    }

    fn drop_if_zero(&mut self, dev: i32) {
        if let Ok(k) = self.curr.binary_search_by_key(&dev, |(d, _)| *d) {
            if self.curr[k].1[TOTAL] == 0 {
                self.curr.remove(k);
            }
        }
    }

    fn add(&mut self, key: i64, cat: i64, dev: i64, bytes: i64) {
        // a key seen again without its death reported: count the old one as gone
        if self.storages.contains_key(&key) {
            self.del(key);
        }
        let cat = (cat.clamp(0, 6)) as usize;
        let dev = dev.clamp(-1, i32::MAX as i64) as i32;
        self.storages.insert(key, Storage { cat, dev, bytes });
        if bytes > 0 {
            let r = self.row(dev);
            r[cat] += bytes;
            r[TOTAL] += bytes;
            self.dirty = true;
        }
    }

    fn del(&mut self, key: i64) {
        if let Some(s) = self.storages.remove(&key) {
            if s.bytes > 0 {
                let r = self.row(s.dev);
                r[s.cat] -= s.bytes;
                r[TOTAL] -= s.bytes;
                self.drop_if_zero(s.dev);
            }
        }
    }

    fn recategorize(&mut self, key: i64, cat: i64) {
        let cat = (cat.clamp(0, 6)) as usize;
        let Some(s) = self.storages.get_mut(&key) else {
            return;
        };
        if s.cat == cat {
            return;
        }
        let (old, dev, bytes) = (s.cat, s.dev, s.bytes);
        s.cat = cat;
        let r = self.row(dev);
        r[old] -= bytes;
        r[cat] += bytes;
    }

    fn resize(&mut self, key: i64, bytes: i64) {
        let Some(s) = self.storages.get_mut(&key) else {
            return;
        };
        let change = bytes - s.bytes;
        s.bytes = bytes;
        let (cat, dev) = (s.cat, s.dev);
        let r = self.row(dev);
        r[cat] += change;
        r[TOTAL] += change;
        if change > 0 {
            self.dirty = true;
        }
        self.drop_if_zero(dev);
    }

    fn iter_mut(&mut self) -> &mut Iter {
        if self.iter.is_none() {
            self.iter = Some(Iter::new(0, &self.curr));
        }
        self.iter.as_mut().unwrap()
    }

    fn module(&mut self, mk: i64) -> Option<&mut ModB> {
        let it = self.iter.as_mut()?;
        let &k = it.by_mk.get(&mk)?;
        it.modules.get_mut(k)
    }

    fn new_module(&mut self, mk: i64, name: u32, params: i64, buffers: i64, input: i64) {
        let it = self.iter_mut();
        let k = it.modules.len();
        it.modules.push(ModB {
            fqn: name,
            parameter_bytes: params,
            buffer_bytes: buffers,
            input_bytes: input,
            output_bytes: 0,
            states: Vec::new(),
            local_peak: Vec::new(),
        });
        it.by_mk.insert(mk, k);
        it.by_name.entry(name).or_default().push(k);
    }

    fn input(&mut self, mk: i64, name: u32, bytes: i64) {
        let Some(it) = self.iter.as_mut() else {
            return;
        };
        let Some(&k) = it.by_mk.get(&mk) else {
            return;
        };
        let m = &mut it.modules[k];
        m.input_bytes = bytes;
        if m.fqn != name {
            let old = m.fqn;
            m.fqn = name;
            if let Some(v) = it.by_name.get_mut(&old) {
                v.retain(|&x| x != k);
            }
            it.by_name.entry(name).or_default().push(k);
        }
    }

    fn snap(&mut self, mk: i64, state: i64) {
        let Some(state) = ModState::from_code(state) else {
            return;
        };
        let curr = self.curr.clone();
        let Some(m) = self.module(mk) else {
            return;
        };
        let peak = match state {
            ModState::PreForward => Some(ModState::PeakForward),
            ModState::PreBackward => Some(ModState::PeakBackward),
            _ => None,
        };
        if let Some(p) = peak {
            m.local_peak = curr.iter().map(|(d, r)| (*d, r[TOTAL])).collect();
            m.push(p, curr.clone());
        }
        m.push(state, curr);
    }

    fn next_iteration(&mut self) {
        let first_op = self.ops.len();
        if let Some(it) = self.iter.take() {
            self.close(it);
        }
        self.iter = Some(Iter::new(first_op, &self.curr));
    }

    fn close(&mut self, it: Iter) {
        if it.modules.is_empty() {
            return;
        }
        let names = &self.names;
        let fqn = |id: u32| {
            names
                .get(id as usize)
                .and_then(|n| n.clone())
                .unwrap_or_else(|| format!("<module {id}>"))
        };
        let modules = it
            .modules
            .into_iter()
            .map(|m| ModuleStats {
                fqn: fqn(m.fqn),
                parameter_bytes: m.parameter_bytes,
                buffer_bytes: m.buffer_bytes,
                input_bytes: m.input_bytes,
                output_bytes: m.output_bytes,
                states: m
                    .states
                    .into_iter()
                    .map(|(state, calls)| StateSnapshots {
                        state,
                        calls: calls.iter().map(snapshot).collect(),
                    })
                    .collect(),
            })
            .collect();
        self.iterations.push(IterationModules {
            iteration: self.iterations.len() + 1,
            first_op: it.first_op,
            modules,
            peak: snapshot(&it.peak),
        });
    }

    fn finish(mut self) -> Session {
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
            exit: Some(ExitInfo {
                code: None,
                signal: None,
                oom: self.oom,
                exception: self.exception.clone(),
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
        }
    }
}

/// The agent's pseudo-op after each compiled graph call (`COMPILED_GRAPH` in the agent).
const COMPILED_GRAPH: &str = "compiled_graph";

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

/// `{"key": int}` from a JSON object; other values are skipped.
fn int_map(v: &Json) -> BTreeMap<String, i64> {
    v.as_object()
        .map(|o| {
            o.iter()
                .filter_map(|(k, v)| v.as_i64().map(|v| (k.clone(), v)))
                .collect()
        })
        .unwrap_or_default()
}

/// The agent's `cycles` message: every object of one collection that leads to a tensor.
fn cycle_graph(m: &Json) -> Cycle {
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

fn set_dev(s: &mut Snap, dev: i32, row: Row) {
    match s.binary_search_by_key(&dev, |(d, _)| *d) {
        Ok(k) => s[k].1 = row,
        Err(k) => s.insert(k, (dev, row)),
    }
}

/// MemTracker's global peak: per device, the snapshot at its highest total.
fn raise_peak(peak: &mut Snap, curr: &Snap) {
    for &(dev, row) in curr {
        let higher = match peak.iter().find(|(d, _)| *d == dev) {
            Some((_, p)) => p[TOTAL] < row[TOTAL],
            None => row[TOTAL] > 0,
        };
        if higher {
            set_dev(peak, dev, row);
        }
    }
}

pub fn device_name(dev: i32) -> String {
    if dev < 0 {
        "cpu".to_string()
    } else {
        format!("cuda:{dev}")
    }
}

fn snapshot(s: &Snap) -> ModuleSnapshot {
    ModuleSnapshot(
        s.iter()
            .map(|(dev, row)| {
                let mut by_category = [0i64; 7];
                by_category.copy_from_slice(&row[..7]);
                DeviceBytes {
                    device: device_name(*dev),
                    by_category,
                    total: row[TOTAL],
                }
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn cut_short_stream_keeps_what_arrived() {
        let mut j = json(r#"{"t":"hello","backend":"cpu"}"#);
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
