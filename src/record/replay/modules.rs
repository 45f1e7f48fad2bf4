//! The module tables: per iteration, each module's first call (parameters, buffers, inputs,
//! outputs) and its snapshots per MemTracker state; iterations closed into the model's
//! `IterationModules`.

use std::collections::HashMap;

use crate::model::modules::StateSnapshots;
use crate::model::{IterationModules, ModState, ModuleStats};

use super::bytes::{snapshot, Snap, TOTAL};
use super::Replay;

pub(super) struct ModB {
    pub(super) fqn: u32,
    pub(super) parameter_bytes: i64,
    pub(super) buffer_bytes: i64,
    pub(super) input_bytes: i64,
    pub(super) output_bytes: i64,
    pub(super) states: Vec<(ModState, Vec<Snap>)>,
    pub(super) local_peak: Vec<(i32, i64)>,
}

impl ModB {
    pub(super) fn push(&mut self, state: ModState, snap: Snap) {
        match self.states.iter_mut().find(|(s, _)| *s == state) {
            Some((_, calls)) => calls.push(snap),
            None => self.states.push((state, vec![snap])),
        }
    }
}

pub(super) struct Iter {
    pub(super) first_op: usize,
    pub(super) modules: Vec<ModB>,
    pub(super) by_mk: HashMap<i64, usize>,
    pub(super) by_name: HashMap<u32, Vec<usize>>,
    pub(super) peak: Snap,
}

impl Iter {
    pub(super) fn new(first_op: usize, curr: &Snap) -> Iter {
        Iter {
            first_op,
            modules: Vec::new(),
            by_mk: HashMap::new(),
            by_name: HashMap::new(),
            peak: curr.clone(),
        }
    }
}

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
        let first_op = self.op_count();
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
