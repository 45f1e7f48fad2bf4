//! What stays alive across iterations, by the op that made it: at the start of each iteration
//! (its first `fw_start`), the storages made two iterations before that are still alive. An iteration's
//! input batch, made at the end of the one before and freed in the next, is not counted; what
//! a program keeps by mistake (a list of per-step tensors, a loss kept with its graph) is, at
//! the op that allocated it. The first iteration is warm-up (optimizer state, gradients).

use crate::model::{op_module, OpNames, Retained, RetainedOp, CATEGORIES};

use super::state::Replay;

/// Iterations left out at the start (as `analysis::growth`).
const WARMUP_ITERATIONS: usize = 1;

/// At most this many ops are kept, those that retained the most bytes.
const MAX_OPS: usize = 50;

impl Replay {
    /// An iteration starts: check the one two before it.
    pub(super) fn iteration_started(&mut self) {
        let r = &mut self.retained;
        r.starts.push(self.ops.len());
        let n = r.starts.len();
        // iteration k (1-based) ran from starts[k - 1] to starts[k]; now is the start of n
        if n < WARMUP_ITERATIONS + 3 {
            return;
        }
        let k = n - 2;
        let (from, to) = (r.starts[k - 1] as u32, r.starts[k] as u32);
        r.checked += 1;
        for s in self.storages.values() {
            if s.bytes > 0 && s.op >= from && s.op < to {
                r.found.push((k as u32, s.op, s.cat, s.bytes));
            }
        }
    }

    /// The storages found, by op name (without its `_N` count), most bytes first.
    pub(super) fn retained_ops(&mut self, names: &OpNames) -> Retained {
        let mut found = std::mem::take(&mut self.retained.found);
        found.sort_unstable();
        let mut ops: Vec<(RetainedOp, u32)> = Vec::new();
        let mut index: std::collections::HashMap<String, usize> = Default::default();
        for (k, op, cat, bytes) in found {
            let name = if (op as usize) < names.len() {
                names.get(op as usize)
            } else {
                "?"
            };
            // `Net.forward.mm.default_12` → `Net.forward.mm.default`
            let key = match name.rsplit_once('_') {
                Some((head, n)) if n.bytes().all(|b| b.is_ascii_digit()) => head,
                _ => name,
            };
            let entry = match index.get(key) {
                Some(&i) => &mut ops[i],
                None => {
                    index.insert(key.to_string(), ops.len());
                    ops.push((
                        RetainedOp {
                            op: key.to_string(),
                            module: op_module(name).unwrap_or("Global").to_string(),
                            category: CATEGORIES[cat.min(CATEGORIES.len() - 1)].to_string(),
                            ..Default::default()
                        },
                        0,
                    ));
                    ops.last_mut().expect("just pushed")
                }
            };
            entry.0.bytes += bytes;
            entry.0.tensors += 1;
            // `found` is sorted by iteration: a new one is a change of it
            if entry.1 != k {
                entry.1 = k;
                entry.0.iterations += 1;
            }
        }
        let mut ops: Vec<RetainedOp> = ops.into_iter().map(|(o, _)| o).collect();
        ops.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.op.cmp(&b.op)));
        ops.truncate(MAX_OPS);
        Retained {
            iterations: self.retained.checked,
            ops,
        }
    }
}
