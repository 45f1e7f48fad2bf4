//! The module tables: per iteration, each module's first call (parameters, buffers, inputs,
//! outputs) and its snapshots per MemTracker state; iterations closed into the model's
//! `IterationModules`.

use crate::model::modules::StateSnapshots;
use crate::model::{IterationModules, ModState, ModuleStats};

use super::fields::{snapshot, Iter, ModB, TOTAL};
use super::state::Replay;

impl Replay {
    pub(super) fn iter_mut(&mut self) -> &mut Iter {
        if self.iter.is_none() {
            self.iter = Some(Iter::new(0, &self.curr));
        }
        self.iter.as_mut().unwrap()
    }

    pub(super) fn module(&mut self, mk: i64) -> Option<&mut ModB> {
        let it = self.iter.as_mut()?;
        let &k = it.by_mk.get(&mk)?;
        it.modules.get_mut(k)
    }

    pub(super) fn new_module(&mut self, mk: i64, name: u32, params: i64, buffers: i64, input: i64) {
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

    pub(super) fn input(&mut self, mk: i64, name: u32, bytes: i64) {
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

    pub(super) fn snap(&mut self, mk: i64, state: i64) {
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

    pub(super) fn next_iteration(&mut self) {
        let first_op = self.ops.len();
        if let Some(it) = self.iter.take() {
            self.close(it);
        }
        self.iter = Some(Iter::new(first_op, &self.curr));
    }

    pub(super) fn close(&mut self, it: Iter) {
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
}
