//! Threads: the agent writes a THREAD record where the thread writing changes (docs/record.md,
//! "Threads"). Each thread has its own module stack (ModTracker's `parents`): the current
//! thread's is `Replay::parents`, the others wait in `fields::Threads`; ops are counted per
//! thread and their runs kept for the file.

use super::state::Replay;

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
