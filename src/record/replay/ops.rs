//! Ops: each sample placed in its context (the optimizer's step, the innermost running
//! module, forward or backward) with its allocated / active / reserved bytes.

use super::fields::{Op, Phase, Pushed, NO_NAME, TOTAL};
use super::state::Replay;

impl Replay {
    pub(super) fn op(&mut self, fid: u32, bw: bool, cuda: Option<[i64; 3]>) {
        let (ctx, phase) = if let Some(o) = self.optimizer {
            (o, Phase::Step)
        } else if let Some(&(name, how)) = self
            .parents
            .iter()
            .rev()
            .find(|(_, how)| *how != Pushed::PassThrough)
        {
            if how == Pushed::Backward {
                (self.innermost_in_backward(name), Phase::Backward)
            } else {
                (name, Phase::Forward)
            }
        } else {
            (NO_NAME, if bw { Phase::Backward } else { Phase::Forward })
        };
        self.threads.op(self.ops.len());
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
    /// pushed in backward, the latest among equals. A pass-through module (nn.Identity) is
    /// none of them: autograd runs no node of its.
    pub(super) fn innermost_in_backward(&self, last: u32) -> u32 {
        let depth = |id: u32| {
            self.names
                .get(id as usize)
                .and_then(|n| n.as_deref())
                .map_or(0, |n| n.matches('.').count())
        };
        let mut best = (depth(last), last);
        for &(name, how) in self.parents.iter().rev() {
            if how == Pushed::Backward && depth(name) > best.0 {
                best = (depth(name), name);
            }
        }
        best.1
    }
}
