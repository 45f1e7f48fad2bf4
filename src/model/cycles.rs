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
    /// The objects of the cycle (indexes of `edges` point into it).
    pub nodes: Vec<CycleNode>,
    /// The references between them.
    pub edges: Vec<CycleEdge>,
    /// Nodes the agent left out to keep the report small (0 normally).
    pub omitted_nodes: i64,
}

/// One object of a reference cycle.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CycleNode {
    /// A short description (`_cycles.object_annotation`): `dict[3]`, `function\nforward`,
    /// `Tensor float32[1024, 1024] cuda:0`.
    pub label: String,
    /// `module.qualname` of the object's type.
    pub type_name: String,
    /// The tensor it is, with its storage's bytes; None for an object that is no tensor.
    pub tensor: Option<CycleTensor>,
}

/// A tensor found in a cycle: what its storage holds and where it was made.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CycleTensor {
    /// The bytes of the tensor's storage (whole 512-byte blocks on CUDA, as the allocator
    /// hands them out).
    pub bytes: i64,
    /// Identifies the storage: tensors sharing one are counted once.
    pub storage: i64,
    /// Sizes of each dimension.
    pub shape: Vec<i64>,
    /// `torch.float32`, …
    pub dtype: String,
    /// `cuda:0`, `cpu`, …
    pub device: String,
    /// Where it was allocated, innermost frame first (`file:line:function`), when the
    /// allocator's history was on.
    pub stack: Vec<String>,
}

/// A reference from one object of a cycle to another.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CycleEdge {
    /// Index into `Cycle::nodes` of the referrer.
    pub from: usize,
    /// Index into `Cycle::nodes` of the object referred to.
    pub to: usize,
    /// How it refers (`_cycles`' edge annotation: an attribute name, a key, `[0]`).
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

    /// How many of the cycle's objects are tensors.
    pub fn tensors(&self) -> usize {
        self.nodes.iter().filter(|n| n.tensor.is_some()).count()
    }
}
