//! Threads: the agent writes a THREAD record where the thread writing changes (docs/record.md,
//! "Threads"). Each thread has its own module stack (ModTracker's `parents`): the current
//! thread's is `Replay::parents`, the others wait here; ops are counted per thread and their
//! runs kept for the file.

use std::collections::BTreeMap;

use crate::model::ThreadInfo;
use crate::record::protocol::PUSH_FORWARD;

use super::ops::Pushed;
use super::Replay;

#[derive(Default)]
pub(super) struct Threads {
    /// The thread whose records come now (0: the main thread).
    current: i64,
    /// The module stacks of the threads not current.
    stacks: BTreeMap<i64, Vec<(u32, Pushed)>>,
    /// Per thread: name (from its `thread` message), ops, top-level forward calls.
    counts: BTreeMap<i64, (Option<String>, i64, i64)>,
    /// (first op, thread) where the thread running ops changed.
    runs: Vec<(i64, i64)>,
    /// Names of the threads running before recording began (`threads_before`).
    pub(super) before: Vec<String>,
}

impl Threads {
    /// An op (the `index`th) of the current thread.
    pub(super) fn op(&mut self, index: usize) {
        let t = self.current;
        if self.runs.last().map(|r| r.1) != Some(t) {
            self.runs.push((index as i64, t));
        }
        self.counts.entry(t).or_default().1 += 1;
    }

    /// A PUSH of the current thread (`how`), onto an `empty` stack or not.
    pub(super) fn pushed(&mut self, empty: bool, how: i64) {
        if empty && how == PUSH_FORWARD {
            self.counts.entry(self.current).or_default().2 += 1;
        }
    }

    pub(super) fn named(&mut self, id: i64, name: String) {
        self.counts.entry(id).or_default().0 = Some(name);
    }

    /// The modules running in the threads not current.
    pub(super) fn other_stacks(&self) -> impl Iterator<Item = &(u32, Pushed)> {
        self.stacks.values().flatten()
    }

    /// The file's `threads` and `thread_runs`: empty when the main thread ran every op.
    pub(super) fn finish(&mut self) -> (Vec<ThreadInfo>, Vec<(i64, i64)>) {
        if self.counts.keys().all(|&t| t == 0) {
            return (Vec::new(), Vec::new());
        }
        let threads = std::mem::take(&mut self.counts)
            .into_iter()
            .map(|(id, (name, ops, forward_calls))| ThreadInfo {
                id,
                name: name.unwrap_or_else(|| if id == 0 { "MainThread" } else { "?" }.to_string()),
                ops,
                forward_calls,
            })
            .collect();
        (threads, std::mem::take(&mut self.runs))
    }
}

impl Replay {
    /// THREAD: the records after it are thread `t`'s; its module stack becomes the current.
    pub(super) fn switch_thread(&mut self, t: i64) {
        let th = &mut self.threads;
        if t == th.current || !(0..1 << 40).contains(&t) {
            return;
        }
        let mine = th.stacks.remove(&t).unwrap_or_default();
        let was = std::mem::replace(&mut self.parents, mine);
        if !was.is_empty() {
            th.stacks.insert(th.current, was);
        }
        th.current = t;
        th.counts.entry(t).or_default();
    }
}
