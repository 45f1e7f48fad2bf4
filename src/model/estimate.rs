//! What `memtrack estimate` could not know while the program ran, and what it did instead
//! (docs/estimate.md): values read that the device does not have, data-dependent sizes taken
//! at their upper bound, files not written, and a program stopped on a read that never
//! settled. docs/format.md, `estimate`.

use serde::{Deserialize, Serialize};

/// `memory_stats_oom` keys of an estimated file: where the device would have run out.
pub const OOM_OP_INDEX: &str = "estimate.oom_op_index";
pub const OOM_REQUESTED: &str = "estimate.oom_requested_bytes";
/// `memory_stats` key: the bytes the allocator could use (the device less its CUDA context).
pub const USABLE_BYTES: &str = "estimate.usable_bytes";
/// `memory_stats` key: the allowance for NCCL's buffers out of that (distributed estimates).
pub const NCCL_BYTES: &str = "estimate.nccl_bytes";

/// A place where the program read a value a device tensor does not have here (`.item()`,
/// `bool()`, `print(loss)`, `.cpu()`): it got zeros instead.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValueRead {
    pub file: String,
    pub line: u32,
    pub what: String,
    pub count: u64,
    /// The read decided a branch (`bool()` of a tensor, a comparison or truth test of a value
    /// read): the run followed the path zeros lead to.
    pub branch: bool,
}

/// An op whose output size depends on values (`nonzero`, `masked_select`, `unique`,
/// boolean-mask indexing), sized as if every element were selected.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpperBound {
    pub file: String,
    pub line: u32,
    pub op: String,
    pub count: u64,
}

/// A file the program saved (`torch.save`, safetensors) that the estimate did not write.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unwritten {
    pub file: String,
    pub line: u32,
    /// The function: `torch.save`, `safetensors save_file`, …
    pub what: String,
    /// The file it was asked to write.
    pub path: String,
    pub count: u64,
}

/// The program was stopped: one read deciding a branch repeated past the limit (a loop whose
/// end depends on a value the estimate does not have).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stopped {
    pub file: String,
    pub line: u32,
    pub what: String,
    pub count: u64,
    pub limit: u64,
}

/// A process group of a distributed estimate that communicated: NCCL's communicators and
/// their buffers on the device, which the allocator does not hold.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessGroup {
    pub name: String,
    pub size: u64,
}

/// Everything an estimate says of itself besides memory.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EstimateFacts {
    pub reads: Vec<ValueRead>,
    pub upper_bounds: Vec<UpperBound>,
    pub unwritten: Vec<Unwritten>,
    pub stopped: Option<Stopped>,
    /// The process groups that communicated, in the order they first did.
    pub process_groups: Vec<ProcessGroup>,
    /// What NCCL's buffers are allowed for each of them (`estimate --nccl-allowance`).
    pub nccl_allowance_bytes: u64,
}

impl EstimateFacts {
    /// What NCCL's buffers are allowed on the device in all.
    pub fn nccl_bytes(&self) -> u64 {
        self.nccl_allowance_bytes
            .saturating_mul(self.process_groups.len() as u64)
    }
}

impl EstimateFacts {
    /// The reads that decided a branch.
    pub fn branches(&self) -> impl Iterator<Item = &ValueRead> {
        self.reads.iter().filter(|r| r.branch)
    }
}
