//! The record stream (`i64` records, docs/record.md "Wire format") decoded into the replay's
//! steps.

use serde_json::Value as Json;

use crate::model::{Marker, Unmeasured, CATEGORIES};
use crate::record::protocol::{
    ADD, CYCLE, DEL, INPUT, ITER, JSON, MARK, MOD, NOTE, OPT_BEGIN, OPT_END, OUTPUT, POP, PUSH,
    REF, RESET, SIZE, SNAP, THREAD, TIME,
};

use super::fields::Pushed;
use super::state::Replay;

impl Replay {
    /// A tensor not measured as one dense storage (`why`, a `WHY_*` code), now in category
    /// `cat`; `was` its category when it was noted before (-1: first time).
    fn note_tensor(&mut self, why: i64, cat: i64, was: i64) {
        let n = Unmeasured::REASONS.len() as i64;
        let ncat = CATEGORIES.len() as i64;
        if !(0..n).contains(&why) || !(0..ncat).contains(&cat) {
            return;
        }
        if (0..ncat).contains(&was) {
            if let Some(c) = self.unmeasured.get_mut(&(why as usize, was as usize)) {
                *c = (*c - 1).max(0);
            }
        }
        *self
            .unmeasured
            .entry((why as usize, cat as usize))
            .or_insert(0) += 1;
    }

    pub(super) fn records(&mut self, v: &[i64]) {
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
                    // the agent names an op (a JSON message) before its first record
                    if fid as usize >= self.op_names.len() {
                        self.damaged(i, format!("an op never named (id {fid})"));
                        return;
                    }
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
                    if !(0..1 << 56).contains(&v[i + 4]) {
                        self.damaged(i, format!("a storage of {} bytes", v[i + 4]));
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
                    self.threads.pushed(self.parents.is_empty(), v[i + 2]);
                    self.parents
                        .push((v[i + 1] as u32, Pushed::from_code(v[i + 2])));
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
                    self.iteration_starts.push(self.ops.len() as i64);
                    self.iteration_started();
                    self.next_iteration();
                    i += 1;
                }
                MARK => {
                    if !need(1) {
                        return;
                    }
                    if v[i + 1] == 0 && self.iteration_starts.is_empty() {
                        // the first iteration begins at the first fw_start; each after it
                        // at an ITER (a step can mark several top-level forwards)
                        self.iteration_starts.push(self.ops.len() as i64);
                        self.iteration_started();
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
                JSON => {
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
                THREAD => {
                    if !need(1) {
                        return;
                    }
                    self.switch_thread(v[i + 1]);
                    i += 2;
                }
                NOTE => {
                    if !need(3) {
                        return;
                    }
                    self.note_tensor(v[i + 1], v[i + 2], v[i + 3]);
                    i += 4;
                }
                // unknown: the rest cannot be framed
                _ => {
                    self.damaged(i, format!("an unknown record code {code}"));
                    return;
                }
            }
        }
    }
}
