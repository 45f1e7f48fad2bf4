//! A torch.profiler trace (`profile(profile_memory=True)`, Chrome trace JSON) as memtrack keeps
//! it: the allocator's `[memory]` events, `[OutOfMemory]` events and the ranges that say what
//! ran (ops, Python functions, annotations), compact, with names interned.
//!
//! Times are nanoseconds as the file gives them (Kineto writes microseconds with three
//! decimals: nanoseconds exactly).

use serde::Serialize;

/// PyTorch's `c10::DeviceType` numbers the profiler writes as `Device Type`.
pub const DEVICE_TYPE_CPU: i64 = 0;
pub const DEVICE_TYPE_CUDA: i64 = 1;

/// A device as `Device Type` and `Device Id` name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct ProfileDevice {
    pub device_type: i64,
    pub index: i64,
}

impl ProfileDevice {
    /// `cpu`, `cuda:0`, or `type 13:0` for a type memtrack does not name.
    pub fn label(&self) -> String {
        let kind = match self.device_type {
            DEVICE_TYPE_CPU => return "cpu".into(),
            DEVICE_TYPE_CUDA => "cuda",
            2 => "mkldnn",
            3 => "opengl",
            4 => "opencl",
            5 => "ideep",
            6 => "hip",
            9 => "xla",
            12 => "xpu",
            13 => "mps",
            20 => "privateuseone",
            t => return format!("type {t}:{}", self.index),
        };
        format!("{kind}:{}", self.index)
    }
}

/// One `[memory]` event: an allocation (`bytes` > 0) or a free (< 0), and the allocator's
/// totals for its device after it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MemoryEvent {
    pub ts_ns: i64,
    pub bytes: i64,
    pub total_allocated: i64,
    pub total_reserved: i64,
    pub addr: u64,
    /// Index into `ProfileTrace::devices`.
    pub device: u16,
    /// Index into `ProfileTrace::threads`.
    pub thread: u32,
}

/// One `[OutOfMemory]` event: an allocation of `bytes` that failed.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct OomEvent {
    pub ts_ns: i64,
    pub bytes: i64,
    pub total_allocated: i64,
    pub total_reserved: i64,
    #[serde(skip)]
    pub device: u16,
    #[serde(skip)]
    pub thread: u32,
}

/// What a range is, by its category.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RangeKind {
    /// `cpu_op`: an operator (`aten::mm`), and the autograd nodes.
    Op,
    /// `python_function` (`with_stack=True`): a Python call or an `nn.Module`.
    Python,
    /// `user_annotation`: `record_function` ranges, `ProfilerStep#N`, optimizer steps.
    Annotation,
    /// `gpu_user_annotation`: the same ranges as the GPU ran them.
    GpuAnnotation,
    /// `kernel`: a GPU kernel.
    Kernel,
}

impl RangeKind {
    /// The category the file names it by.
    pub fn category(self) -> &'static str {
        match self {
            RangeKind::Op => "cpu_op",
            RangeKind::Python => "python_function",
            RangeKind::Annotation => "user_annotation",
            RangeKind::GpuAnnotation => "gpu_user_annotation",
            RangeKind::Kernel => "kernel",
        }
    }
}

/// A complete event (`"ph": "X"`) of one of the kinds memtrack keeps.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Range {
    pub start_ns: i64,
    pub dur_ns: i64,
    /// Index into `ProfileTrace::names`.
    pub name: u32,
    pub thread: u32,
    pub kind: RangeKind,
}

impl Range {
    pub fn end_ns(&self) -> i64 {
        self.start_ns + self.dur_ns
    }

    /// Whether `t` falls in the range, ends included (as torch's `key_averages` counts).
    pub fn contains(&self, t: i64) -> bool {
        self.start_ns <= t && t <= self.end_ns()
    }
}

/// A whole trace, as read.
#[derive(Debug, Default)]
pub struct ProfileTrace {
    /// In file order (the analysis sorts by time).
    pub memory: Vec<MemoryEvent>,
    pub ooms: Vec<OomEvent>,
    pub ranges: Vec<Range>,
    pub names: Vec<String>,
    pub devices: Vec<ProfileDevice>,
    /// `pid/tid` as the file writes them.
    pub threads: Vec<String>,
    /// Complete events of every category, kept or not.
    pub complete_events: u64,
    /// Every item of `traceEvents`.
    pub events: u64,
    /// The top-level `profile_memory` flag, where the file has one.
    pub profile_memory: Option<bool>,
    /// `baseTimeNanoseconds`: the wall clock of the trace's zero, where the file has it.
    pub base_time_ns: Option<i64>,
}

impl ProfileTrace {
    /// Takes out the Python ranges (`with_stack=True`) that `memtrack record` added to a
    /// program it recorded: the agent's functions; directly inside one, the op call it made
    /// (`torch/_ops.py`, or the built-in it calls); and `Module._call_impl`'s `inner`, which
    /// its global module hooks bring. Every other range stays, nested as it was; nothing is
    /// done where no name is the agent's.
    pub fn drop_agent_ranges(&mut self) {
        // a python_function range's name is `path(line): function`
        fn file(name: &str) -> &str {
            name.rsplit_once('(').map_or(name, |(f, _)| f)
        }
        let agent: Vec<bool> = (self.names.iter())
            .map(|n| super::is_agent_file(file(n)))
            .collect();
        if !(self.ranges.iter()).any(|r| r.kind == RangeKind::Python && agent[r.name as usize]) {
            return;
        }
        let op_call = |n: &str| {
            n.starts_with("<built-in method") || super::path_ends_with(file(n), "torch/_ops.py")
        };
        // the Python ranges of each thread, outermost first where two start together
        let mut order: Vec<usize> = (0..self.ranges.len())
            .filter(|&i| self.ranges[i].kind == RangeKind::Python)
            .collect();
        let r = &self.ranges;
        order.sort_by_key(|&i| (r[i].thread, r[i].start_ns, std::cmp::Reverse(r[i].dur_ns)));
        let mut drop = vec![false; r.len()];
        let mut open: Vec<usize> = Vec::new();
        let mut thread = None;
        for i in order {
            if thread != Some(r[i].thread) {
                open.clear();
                thread = Some(r[i].thread);
            }
            // (a range that ends before this one does cannot hold it)
            while open.last().is_some_and(|&o| r[o].end_ns() < r[i].end_ns()) {
                open.pop();
            }
            let name = &self.names[r[i].name as usize];
            let in_agent = open.last().is_some_and(|&o| agent[r[o].name as usize]);
            let hooks_inner = name
                .rsplit_once(": ")
                .is_some_and(|(f, func)| super::is_hooks_inner_frame(file(f), func));
            drop[i] = agent[r[i].name as usize] || hooks_inner || (in_agent && op_call(name));
            open.push(i);
        }
        let mut k = 0;
        self.ranges.retain(|_| {
            k += 1;
            !drop[k - 1]
        });
    }

    pub fn name(&self, id: u32) -> &str {
        &self.names[id as usize]
    }

    /// The first and last time any kept event covers (ranges' ends included).
    pub fn time_span(&self) -> Option<(i64, i64)> {
        let mem = self.memory.iter().map(|m| (m.ts_ns, m.ts_ns));
        let ranges = self.ranges.iter().map(|r| (r.start_ns, r.end_ns()));
        let ooms = self.ooms.iter().map(|o| (o.ts_ns, o.ts_ns));
        mem.chain(ranges)
            .chain(ooms)
            .fold(None, |acc, (a, b)| match acc {
                None => Some((a, b)),
                Some((lo, hi)) => Some((a.min(lo), b.max(hi))),
            })
    }
}

/// Whether a name is the step annotation `profile(schedule=...)` writes (`ProfilerStep#3`),
/// whatever its category (torch 1.x wrote it as a `cpu_op`).
pub fn is_step(name: &str) -> bool {
    name.starts_with("ProfilerStep#")
}
