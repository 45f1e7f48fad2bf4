//! Reference cycles that held tensors when the garbage collector found them (`record
//! --cycles`), as PyTorch's `torch.utils.viz._cycles` describes them: the objects, the
//! references between them with labels (`__dict__`, `['key']`, `[0]`, `local x`), and the
//! tensors with the bytes their storages hold.

use serde::Serialize;

/// One cycle: the garbage objects that form it or lead from it to a tensor.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Cycle {
    /// The op count when the collector found it: it was freed there.
    pub op_index: i64,
    /// The generation the collection that found it ran on (0, 1, 2).
    pub generation: i64,
    pub nodes: Vec<CycleNode>,
    pub edges: Vec<CycleEdge>,
    /// Nodes the agent left out to keep the report small (0 normally).
    pub omitted_nodes: i64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CycleNode {
    /// A short description (`_cycles.object_annotation`): `dict[3]`, `function\nforward`,
    /// `Tensor float32[1024, 1024] cuda:0`.
    pub label: String,
    /// `module.qualname` of the object's type.
    pub type_name: String,
    pub tensor: Option<CycleTensor>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CycleTensor {
    /// The bytes of the tensor's storage (whole 512-byte blocks on CUDA, as the allocator
    /// hands them out).
    pub bytes: i64,
    /// Identifies the storage: tensors sharing one are counted once.
    pub storage: i64,
    pub shape: Vec<i64>,
    pub dtype: String,
    pub device: String,
    /// Where it was allocated, innermost frame first (`file:line:function`), when the
    /// allocator's history was on.
    pub stack: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CycleEdge {
    pub from: usize,
    pub to: usize,
    pub label: String,
}

impl Cycle {
    /// Bytes the cycle kept alive: its tensors' storages, each counted once.
    pub fn bytes(&self) -> i64 {
        let mut seen: Vec<i64> = Vec::new();
        let mut total = 0;
        for t in self.nodes.iter().filter_map(|n| n.tensor.as_ref()) {
            if !seen.contains(&t.storage) {
                seen.push(t.storage);
                total += t.bytes;
            }
        }
        total
    }

    pub fn tensors(&self) -> usize {
        self.nodes.iter().filter(|n| n.tensor.is_some()).count()
    }
}
