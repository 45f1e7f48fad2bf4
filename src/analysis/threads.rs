//! What a recording says of its threads (`memtrack.threads`, `threads_unrecorded`): which
//! threads ran ops beside the main one, and which could not be recorded. Iterations are the
//! main thread's; the other threads' top-level forward calls are counted here instead.

use crate::model::RecordInfo;

/// Sentences for `summary`: the other threads' ops and calls (at most 5 named), and the
/// threads running before recording began. Empty for a single-threaded recording.
pub fn thread_lines(r: &RecordInfo, ops: usize) -> Vec<String> {
    let mut out = Vec::new();
    // a thread that ran no op and no call is not worth a word
    let others: Vec<_> = (r.threads.iter())
        .filter(|t| t.id != 0 && (t.ops > 0 || t.forward_calls > 0))
        .collect();
    if !others.is_empty() {
        let their_ops: i64 = others.iter().map(|t| t.ops).sum();
        let calls: i64 = others.iter().map(|t| t.forward_calls).sum();
        let mut named: Vec<String> = others
            .iter()
            .take(5)
            .map(|t| {
                format!(
                    "{}: {} op{}, {} call{}",
                    t.name,
                    t.ops.max(0) as usize,
                    if t.ops == 1 { "" } else { "s" },
                    t.forward_calls.max(0) as usize,
                    if t.forward_calls == 1 { "" } else { "s" },
                )
            })
            .collect();
        if others.len() > 5 {
            named.push(format!("{} more", others.len() - 5));
        }
        out.push(format!(
            "{} other thread{} ran {} of the {} ops and {} top-level forward call{} ({}); \
             iterations are the main thread's",
            others.len(),
            if others.len() == 1 { "" } else { "s" },
            their_ops.max(0) as usize,
            ops,
            calls.max(0) as usize,
            if calls == 1 { "" } else { "s" },
            named.join("; "),
        ));
    }
    if !r.threads_unrecorded.is_empty() {
        let n = r.threads_unrecorded.len();
        out.push(format!(
            "{} thread{} already running when recording began ({}): {} ops are not recorded",
            n,
            if n == 1 { " was" } else { "s were" },
            r.threads_unrecorded.join(", "),
            if n == 1 { "its" } else { "their" },
        ));
    }
    out
}

/// The iterations a recording counts: the main thread's (its `iteration_starts`) where other
/// threads ran ops (their module calls then fill a table of their own without an iteration);
/// else one per module table.
pub fn iteration_count(r: &RecordInfo) -> usize {
    if r.threads.iter().any(|t| t.id != 0) {
        r.iteration_starts.len()
    } else {
        r.modules.len()
    }
}
