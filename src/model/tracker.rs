//! Per-operator memory traces: what PyTorch's `MemoryTracker` records, and what `memtrack
//! record` adds to it.

use std::collections::BTreeMap;

use serde::Serialize;

use super::cycles::Cycle;
use super::estimate::EstimateFacts;
use super::modules::{IterationModules, ModuleSnapshot};

/// The three series MemoryTracker samples after every operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Series {
    /// Bytes of live tensors' blocks (`memory_allocated()`, MemoryTracker's `memories_allocated`).
    Allocated,
    /// Allocated plus blocks awaiting their free (`active_bytes.all.current`).
    Active,
    /// Bytes held in the allocator's segments (`memory_reserved()`).
    Reserved,
}

impl Series {
    /// The three, in MemoryTracker's order.
    pub const ALL: [Series; 3] = [Series::Allocated, Series::Active, Series::Reserved];

    /// The lower-case name (`allocated`, …), as in JSON and MemoryTracker's keys.
    pub fn name(self) -> &'static str {
        match self {
            Series::Allocated => "allocated",
            Series::Active => "active",
            Series::Reserved => "reserved",
        }
    }

    /// The stats-file key that holds this series.
    pub fn stats_key(self) -> &'static str {
        match self {
            Series::Allocated => "memories_allocated",
            Series::Active => "memories_active",
            Series::Reserved => "memories_reserved",
        }
    }
}

/// Operator names by op index, as ranges of one text buffer (1M names would otherwise be 1M
/// allocations). The buffer may hold other text too: a reader can hand over its own string
/// arena instead of copying every name out of it.
#[derive(Clone, Debug, Default)]
pub struct OpNames {
    text: String,
    spans: Vec<(u32, u32)>,
}

impl OpNames {
    /// Names given as byte ranges of `text`. None when a range is out of bounds, not on a char
    /// boundary, or beyond 4 GiB.
    pub fn from_ranges(text: String, ranges: &[std::ops::Range<usize>]) -> Option<OpNames> {
        let mut spans = Vec::with_capacity(ranges.len());
        for r in ranges {
            text.get(r.clone())?;
            spans.push((u32::try_from(r.start).ok()?, u32::try_from(r.len()).ok()?));
        }
        Some(OpNames { text, spans })
    }

    /// An empty list, with room for `ops` names of `bytes` bytes in all.
    pub fn with_capacity(ops: usize, bytes: usize) -> OpNames {
        OpNames {
            text: String::with_capacity(bytes),
            spans: Vec::with_capacity(ops),
        }
    }

    /// Names given as (start, len) byte spans of `text`; None when one is out of bounds or
    /// not on char boundaries.
    pub fn from_spans(text: String, spans: Vec<(u32, u32)>) -> Option<OpNames> {
        for &(start, len) in &spans {
            text.get(start as usize..start as usize + len as usize)?;
        }
        Some(OpNames { text, spans })
    }

    /// Add the next op's name.
    pub fn push(&mut self, name: &str) {
        // op names total far less than 4 GiB; an oversized name is stored empty, not wrapped
        match (u32::try_from(self.text.len()), u32::try_from(name.len())) {
            (Ok(start), Ok(len)) if u32::try_from(self.text.len() + name.len()).is_ok() => {
                self.text.push_str(name);
                self.spans.push((start, len));
            }
            _ => self.spans.push((0, 0)),
        }
    }

    /// How many names (ops) there are.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// Whether there are no names.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// The name of op `i` (0-based).
    pub fn get(&self, i: usize) -> &str {
        let (start, len) = self.spans[i];
        self.text
            .get(start as usize..(start + len) as usize)
            .unwrap_or("")
    }

    /// The names in op order.
    pub fn iter(&self) -> impl Iterator<Item = &str> + '_ {
        (0..self.len()).map(move |i| self.get(i))
    }
}

/// A named position in the op sequence (`fw_start`, `fw_bw_boundary`): the index of the first
/// op after the marker, as MemoryTracker stores it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Marker {
    /// `fw_start`, `fw_bw_boundary`, ….
    pub name: String,
    /// The index of the op after the marker.
    pub op_index: i64,
}

/// The module an op ran in, from MemoryTracker's op names, `{module}.{forward|backward}.{op}_{n}`
/// (`layers.0.attn.forward.view.default_1` → `layers.0.attn`); `memtrack record` names ops the
/// same way, a forward recomputed in backward (activation checkpointing)
/// `{module}.recompute.{op}_{n}`, and an optimizer's ops `{optimizer}.step.{op}_{n}`
/// (`Adam.step.add.Tensor_3` → `Adam`). The root module of PyTorch's tracker is named ""
/// (`.forward.mm.default_0`). None
/// for an op recorded outside every module (`.mm.default_0`: no phase).
pub fn op_module(name: &str) -> Option<&str> {
    let first = |phases: &[&str]| phases.iter().filter_map(|p| name.find(p)).min();
    // a submodule may be called `step` (`net.step.forward.mm_0`): forward/backward decide first
    let phase =
        first(&[".forward.", ".backward.", ".recompute."]).or_else(|| first(&[".step."]))?;
    Some(&name[..phase])
}

/// A MemoryTracker stats file, with memtrack's own extension when `record` wrote it.
#[derive(Clone, Debug, Default)]
pub struct TrackerStats {
    /// Op names, by op index.
    pub names: OpNames,
    /// Bytes after each op (MemoryTracker stores MiB floats; bytes = MiB * 2^20, exact in f64).
    pub allocated: Vec<f64>,
    /// `active_bytes.all.current` after each op, in bytes.
    pub active: Vec<f64>,
    /// `reserved_bytes.all.current` after each op, in bytes.
    pub reserved: Vec<f64>,
    /// `markers` as the file has them: the last occurrence of each.
    pub markers: Vec<Marker>,
    /// The allocator's `num_alloc_retries` at stop.
    pub num_alloc_retries: i64,
    /// `op_index` when the file has it (older PyTorch releases did not write it).
    pub op_index: Option<i64>,
    /// memtrack's extension (the `memtrack` key), when `record` wrote the file.
    pub record: Option<RecordInfo>,
}

impl TrackerStats {
    /// The bytes after each op of series `s`.
    pub fn series(&self, s: Series) -> &[f64] {
        match s {
            Series::Allocated => &self.allocated,
            Series::Active => &self.active,
            Series::Reserved => &self.reserved,
        }
    }

    /// How many ops the file has.
    pub fn op_count(&self) -> usize {
        self.names.len()
    }

    /// The op index of marker `name` (its last occurrence), if the file has it.
    pub fn marker(&self, name: &str) -> Option<i64> {
        self.markers
            .iter()
            .find(|m| m.name == name)
            .map(|m| m.op_index)
    }

    /// Every marker occurrence: the full list `record` keeps, or the file's last occurrences.
    pub fn marker_events(&self) -> Vec<Marker> {
        match &self.record {
            Some(r) if !r.marker_events.is_empty() => r.marker_events.clone(),
            _ => self.markers.clone(),
        }
    }
}

/// The `memtrack` key of a stats file written by `memtrack record` (docs/format.md).
#[derive(Clone, Debug, Default, Serialize)]
pub struct RecordInfo {
    /// The memtrack version that recorded it.
    pub version: String,
    /// `cuda` or `cpu`: the allocator's counters, or storage accounting of live tensors.
    pub backend: String,
    /// The CUDA device's name (`torch.cuda.get_device_properties().name`); None on CPU.
    pub device_name: Option<String>,
    /// The device's memory, in bytes.
    pub device_total_bytes: Option<u64>,
    /// The recorded program's command line.
    pub argv: Vec<String>,
    /// `RANK` of a torchrun job.
    pub rank: Option<i64>,
    /// `WORLD_SIZE` of a torchrun job.
    pub world_size: Option<i64>,
    /// Every marker occurrence, in order (MemoryTracker's `markers` keeps the last of each).
    pub marker_events: Vec<Marker>,
    /// The op index where each iteration began (docs/record.md, "Iterations and phases");
    /// empty in files recorded before memtrack kept them.
    pub iteration_starts: Vec<i64>,
    /// How the program ended.
    pub exit: Option<ExitInfo>,
    /// Allocator snapshots the run wrote, as paths.
    pub snapshot_paths: Vec<String>,
    /// The recorded process.
    pub pid: Option<i64>,
    /// `torch.__version__` in the recorded process.
    pub torch_version: Option<String>,
    /// What saw each op: `python` (the agent's TorchDispatchMode) or `compiled` (its
    /// RecordFunction observer, `record --observer compiled`); None in older files.
    pub observer: Option<String>,
    /// MemTracker's module breakdown, one entry per iteration.
    pub modules: Vec<IterationModules>,
    /// Memory by category at the run's highest total (MemTracker's `get_tracker_snapshot("peak")`).
    pub peak: Option<ModuleSnapshot>,
    /// The CUDA allocator's `memory_stats()` when the program stopped (empty on CPU).
    pub memory_stats: BTreeMap<String, i64>,
    /// Problems the agent hit inside the program (it never stops the program for them).
    pub agent_errors: Vec<String>,
    /// The CUDA device (the process's index) the allocator counters are for.
    pub device_index: Option<i64>,
    /// That device's UUID (`GPU-…`, as NVML and nvidia-smi give it), when torch says.
    pub device_uuid: Option<String>,
    /// The allocator's `memory_stats()` when it reported running out of memory.
    pub memory_stats_oom: BTreeMap<String, i64>,
    /// The process's GPU memory as the driver (NVML) counts it, sampled during the run: one
    /// series per GPU it used. Empty where NVML was absent.
    pub device_memory: Vec<DeviceSeries>,
    /// Reference cycles holding tensors that the garbage collector freed (`record --cycles`).
    pub cycles: Vec<Cycle>,
    /// Whether the recording watched for cycles (an empty `cycles` then means none were found).
    pub cycles_watched: bool,
    /// What torch.compile did, where the program used it.
    pub compile: Option<CompileInfo>,
    /// Tensors the agent met that are not one dense storage (sparse, meta, wrappers without
    /// storage), counted by reason and category: how, or whether, their memory was measured.
    pub unmeasured: Vec<Unmeasured>,
    /// Storages made in an iteration after warm-up and still alive two iterations later, by the
    /// op that made them (`record::replay::retained`); None in files written before it.
    pub retained: Option<Retained>,
    /// The threads that ran ops, the main one (id 0) first, when any other did; empty when
    /// the main thread ran every op.
    pub threads: Vec<ThreadInfo>,
    /// Which thread ran each op, as runs: (first op, thread id), each run up to the next.
    pub thread_runs: Vec<(i64, i64)>,
    /// Threads already running when recording began: their ops are not in the file.
    pub threads_unrecorded: Vec<String>,
    /// Recorded by `memtrack attach` from the middle of a run: when, and what was held then.
    /// The ops before the first iteration start belong to an iteration already under way.
    pub attached: Option<Attached>,
    /// `memtrack estimate`'s facts about the run (backend `estimate` only).
    pub estimate: Option<EstimateFacts>,
}

/// One thread of a recorded process (docs/format.md, `threads`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ThreadInfo {
    /// 0 for the main thread (and threads Python did not start), then 1, 2, … as started.
    pub id: i64,
    /// `threading.Thread.name`.
    pub name: String,
    /// Ops it ran.
    pub ops: i64,
    /// Forward calls of a module while no other module ran in it (top-level calls).
    pub forward_calls: i64,
}

/// When `memtrack attach` began recording, and what the process held then.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Attached {
    /// Seconds since the Unix epoch.
    pub unix_time: f64,
    /// Bytes held at the attach, where live objects tell it: `parameters`, `gradients`,
    /// `optimizer_state` (each storage once).
    pub held: BTreeMap<String, i64>,
}

/// What stayed alive across iterations, by the op that allocated it: an iteration `k` (from
/// the second) is checked at the start of iteration `k + 2`, so what the next iteration still
/// uses and then frees (its input batch) is not counted.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Retained {
    /// Iterations checked.
    pub iterations: i64,
    /// One entry per op (its name without the `_N` count): those that retained in more than
    /// one iteration checked first, then the others, each most bytes first.
    pub ops: Vec<RetainedOp>,
}

/// The storages one op made that stayed alive, over the iterations checked.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RetainedOp {
    /// The op's name without its count: `Net.blocks.0.forward.clone.default`.
    pub op: String,
    /// The module it ran in (`Global` outside any), as the op's name says.
    pub module: String,
    /// The MemTracker category the storages had when checked (the first's, if several).
    pub category: String,
    /// Bytes, summed over the iterations checked.
    pub bytes: i64,
    /// Storages, summed over the iterations checked.
    pub tensors: i64,
    /// In how many of the iterations checked it retained any.
    pub iterations: i64,
}

/// Tensors of one kind and category that were not measured as one dense storage.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Unmeasured {
    /// Why: `sparse`, `nested`, `meta`, `no_storage`, `error` or `host`
    /// ([`Unmeasured::REASONS`]).
    pub reason: String,
    /// The MemTracker category they had when last seen (`Gradient`, `Activation`, …).
    pub category: String,
    /// How many distinct tensors.
    pub tensors: i64,
}

impl Unmeasured {
    /// Every reason, in the agent's code order (`WHY_*`), with what was measured for it.
    pub const REASONS: [(&'static str, &'static str); 6] = [
        (
            "sparse",
            "of sparse layout: sized by their indices and values",
        ),
        ("nested", "nested: sized by their buffer"),
        (
            "meta",
            "on the meta device or fake: they hold no memory, not counted",
        ),
        (
            "no_storage",
            "without a storage (wrapper subclasses without __tensor_flatten__): not counted",
        ),
        (
            "error",
            "whose storages could not be read: not counted (see agent_errors)",
        ),
        (
            "host",
            "on the host (CPU tensors of an estimate): not the device's memory, not counted",
        ),
    ];

    /// What was measured for tensors of this reason (the reason itself if unknown).
    pub fn how(&self) -> &str {
        Self::REASONS
            .iter()
            .find(|(r, _)| *r == self.reason)
            .map_or(self.reason.as_str(), |(_, how)| how)
    }
}

/// torch.compile in a recorded process: dynamo's counters and the regions that ran compiled.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CompileInfo {
    /// Frames dynamo compiled (`counters["frames"]["ok"]`) of those it saw (`"total"`).
    pub frames_ok: i64,
    /// Frames dynamo saw (`counters["frames"]["total"]`).
    pub frames_total: i64,
    /// Graph breaks dynamo counted.
    pub graph_breaks: i64,
    /// The first line of each distinct graph-break reason (at most 10).
    pub graph_break_reasons: Vec<String>,
    /// Where compiled graphs ran (`{module}.{forward|backward|step}`, `Global` outside any
    /// module), in first-run order. Each call is one sample (`compiled_graph_{n}`) taken
    /// when it returned; inside it only the ops compiled code still dispatches are seen.
    pub regions: Vec<CompiledRegion>,
}

/// A compiled region and how often its graph ran.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CompiledRegion {
    /// The module or function compiled.
    pub region: String,
    /// Calls of its compiled graph.
    pub graph_calls: i64,
}

/// One GPU's driver-level memory for the recorded process.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct DeviceSeries {
    /// NVML's index (PCI bus order, as nvidia-smi numbers GPUs).
    pub nvml_index: i64,
    /// The GPU's name as NVML reports it, when it does.
    pub name: Option<String>,
    /// The GPU's UUID (`GPU-…`) as NVML reports it, when it does.
    pub uuid: Option<String>,
    /// In time order.
    pub samples: Vec<DeviceSample>,
}

/// The recorded process's memory on one GPU at one moment, as the driver counts it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct DeviceSample {
    /// The number of ops recorded before the sample (as markers count).
    pub op_index: i64,
    /// Seconds since the first sample.
    pub time_s: f64,
    /// Bytes the process held on the GPU, as the driver counts them.
    pub bytes: i64,
}

impl DeviceSeries {
    /// `GPU 0 (NVIDIA H100 …)`.
    pub fn title(&self) -> String {
        match &self.name {
            Some(n) => format!("GPU {} ({n})", self.nvml_index),
            None => format!("GPU {}", self.nvml_index),
        }
    }
}

impl RecordInfo {
    /// The driver-level series of the device the allocator counters are for: the one whose
    /// UUID matches, else the only one.
    pub fn allocator_device_series(&self) -> Option<&DeviceSeries> {
        let norm = |u: &str| u.trim_start_matches("GPU-").to_ascii_lowercase();
        if let Some(u) = &self.device_uuid {
            if let Some(s) = self
                .device_memory
                .iter()
                .find(|s| s.uuid.as_deref().is_some_and(|x| norm(x) == norm(u)))
            {
                return Some(s);
            }
        }
        match self.device_memory.as_slice() {
            [one] => Some(one),
            _ => None,
        }
    }
}

/// How the recorded program ended.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ExitInfo {
    /// The exit code, when memtrack started the process itself.
    pub code: Option<i64>,
    /// The signal that killed it, when memtrack started the process itself; the signal its
    /// parent sent it, where that ended it (`terminated`).
    pub signal: Option<i64>,
    /// The program ran out of memory.
    pub oom: bool,
    /// The uncaught exception's traceback.
    pub exception: Option<String>,
    /// Where it was raised: the innermost frame outside torch (the program's line, or its
    /// library's), as (file, line).
    pub exception_at: Option<(String, i64)>,
    /// `exit` (normal interpreter exit), `exception`, `signal` (SIGTERM, handled),
    /// `terminated` (its parent ended it, multiprocessing's `terminate()` or `kill()`: a
    /// DataLoader's worker slow to leave, whose own SIGTERM handler leaves without a word),
    /// `stopped` (`memtrack estimate` stopped it: `RecordInfo::estimate`) or `disconnected`
    /// (the process vanished without a word: SIGKILL, a crash, the OOM killer).
    pub ended: Option<String>,
    /// The op count when the CUDA allocator reported running out of memory.
    pub oom_op_index: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::op_module;

    #[test]
    fn op_names_say_their_module() {
        assert_eq!(
            op_module("layers.0.attn.forward.view.default_1"),
            Some("layers.0.attn")
        );
        assert_eq!(op_module("Net.fc.backward.mm.default_3"), Some("Net.fc"));
        assert_eq!(op_module("Net.b.recompute.tanh.default_7"), Some("Net.b"));
        assert_eq!(op_module(".forward.mm.default_0"), Some(""));
        assert_eq!(op_module(".mm.default_0"), None);
        // an op whose own name has a dot after the phase
        assert_eq!(op_module("2.0.forward.add.Tensor_4"), Some("2.0"));
        // memtrack record: an optimizer's step; a submodule that happens to be called `step`
        assert_eq!(op_module("Adam.step.zeros_like.default_0"), Some("Adam"));
        assert_eq!(op_module("net.step.forward.mm.default_0"), Some("net.step"));
    }
}
