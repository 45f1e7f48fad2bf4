//! The second core's first round, started with the file's reading instead of when the main
//! reading comes to the trace: the generic machine reads the segments before it at about
//! 150 MB/s (1.5–2.4 s at 10 GB, a seventh of `summary`'s time on gen_data's 1M-event
//! capture), and the second core would wait all that time. A skim of the opcodes before the
//! trace (no values made) finds where `device_traces` begins and the memo ids of the strings
//! its first events fetch; the round then goes as any other (`traces::TraceReader` takes it
//! over, and checks what the skim told the second core against its own memo).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::Scope;
use std::time::Instant;

use rustc_hash::FxHashMap;

use crate::model::snapshot::Parts;
use crate::pickle::{ops::Cursor, Op, Pages};

use super::rounds::{self, RoundRead, SCAN_BYTES};
use super::tail::{self, Known};

/// The generic machine's speed on the segments (bytes a second), for the head start the
/// second core has: on gen_data's captures 150–190 MB/s.
const MACHINE_SPEED: f64 = 150e6;

/// Where the early round reads from (an event), and what it was told: the main reading's
/// share of the round ends at `at`.
pub(super) struct Start {
    pub at: usize,
    pub known: Known,
}

/// The main reading's side of an early round: where it starts (None: no early round), then
/// its reading; `cancel` stops it and `done` says how far it got.
pub(super) struct Early {
    pub(super) start: Receiver<Option<Start>>,
    pub(super) result: Receiver<RoundRead>,
    pub(super) cancel: Arc<AtomicBool>,
    pub(super) done: Arc<AtomicUsize>,
}

/// What the early round reads: `parts` of the trace, in a round cut as `rounds` cuts them,
/// if the file still holds `min_bytes` from the trace on; `pages` get back the pages read.
#[derive(Clone, Copy)]
pub(super) struct Plan<'m> {
    pub parts: Parts,
    pub pages: Pages<'m>,
    pub min_bytes: usize,
    pub round_bytes: usize,
}

/// Start the early round of `data` on a thread of `scope`.
pub(super) fn start<'s, 'd: 's>(scope: &'s Scope<'s, '_>, data: &'d [u8], plan: Plan<'d>) -> Early {
    let (start_tx, start) = sync_channel(1);
    let (result_tx, result) = sync_channel(1);
    let (cancel, done) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicUsize::new(0)),
    );
    let (c, d) = (cancel.clone(), done.clone());
    scope.spawn(move || run(data, plan, &c, &d, start_tx, result_tx));
    Early {
        start,
        result,
        cancel,
        done,
    }
}

fn run(
    data: &[u8],
    plan: Plan<'_>,
    cancel: &AtomicBool,
    done: &AtomicUsize,
    start: SyncSender<Option<Start>>,
    result: SyncSender<RoundRead>,
) {
    // a bug here must not take the reading down (a scope's panicking thread would): the main
    // reading then reads on as without an early round
    let planned = std::panic::catch_unwind(|| plan_round(data, &plan, cancel));
    let Some((at, stop, known)) = planned.ok().flatten() else {
        let _ = start.send(None);
        return;
    };
    let told = Start {
        at,
        known: known.clone(),
    };
    if start.send(Some(told)).is_err() {
        return; // the main reading is past the trace's start, or gone
    }
    let began = Instant::now();
    let round = tail::Round {
        data,
        start: at,
        stop,
        parts: plan.parts,
        pages: plan.pages,
    };
    let read = tail::read(round, &known, tail::Progress { cancel, done });
    let _ = result.send((known, read, began.elapsed()));
}

/// Where the early round reads (from the event at the first offset to the first event at or
/// past the second) and what it is told, if the skim finds the trace and an event to start at.
fn plan_round(data: &[u8], plan: &Plan<'_>, cancel: &AtomicBool) -> Option<(usize, usize, Known)> {
    let (trace, strings) = skim(data, cancel)?;
    let left = data.len() - trace;
    if left < plan.min_bytes.max(1) {
        return None;
    }
    let scan_end = data.len().min(trace + SCAN_BYTES);
    let known = rounds::known_between(data, trace, scan_end, |id| strings.get(&id).map(|s| &**s));
    // the main reading comes to the trace after the segments
    let share = |round| rounds::main_share(round, None, trace as f64 / MACHINE_SPEED);
    let (at, stop) = rounds::cut(data, trace, &known, plan.round_bytes, share)?;
    Some((at, stop, known))
}

/// Where the value of the top-level key `device_traces` starts, and the strings memoized up
/// to `SCAN_BYTES` past it (its first events' keys and actions), by memo id; None if the
/// opcodes before are not what Python's pickler writes with protocol 4 or 5 (MEMOIZE, never
/// PUT), or the reading is over.
fn skim(data: &[u8], cancel: &AtomicBool) -> Option<(usize, FxHashMap<u64, Box<str>>)> {
    let mut ops = Cursor::new(data);
    let mut strings: FxHashMap<u64, Box<str>> = FxHashMap::default();
    let (mut next_id, mut depth) = (0u64, 0usize);
    let mut last_text: Option<&[u8]> = None;
    let (mut key_seen, mut trace) = (false, None::<usize>);
    let mut ops_read = 0u32;
    loop {
        if trace.is_some_and(|t| ops.position() >= t + SCAN_BYTES) {
            break;
        }
        ops_read = ops_read.wrapping_add(1);
        if ops_read.is_multiple_of(65_536) && cancel.load(Ordering::Relaxed) {
            return None;
        }
        let Ok(op) = ops.next_op() else {
            break; // (a trace shorter than the scan, or damage the main reading will name)
        };
        let text = match op {
            Op::Unicode(raw) => {
                if depth == 1 && trace.is_none() && raw == b"device_traces" {
                    key_seen = true;
                }
                Some(raw)
            }
            Op::Memoize => {
                if let Some(t) = last_text {
                    strings.insert(next_id, String::from_utf8_lossy(t).into());
                }
                next_id += 1;
                None
            }
            Op::Frame => last_text,
            Op::Put(_) => return None,
            Op::Stop => break,
            Op::Mark => {
                depth += 1;
                None
            }
            Op::Appends
            | Op::SetItems
            | Op::AddItems
            | Op::Tuple
            | Op::List
            | Op::Dict
            | Op::FrozenSet
            | Op::PopMark
            | Op::Obj
            | Op::Inst { .. } => {
                depth = depth.checked_sub(1)?;
                None
            }
            Op::EmptyList if key_seen && trace.is_none() => {
                trace = Some(ops.op_start());
                None
            }
            _ => None,
        };
        if key_seen && trace.is_none() && !matches!(op, Op::Unicode(_) | Op::Memoize | Op::Frame) {
            return None; // the key's value is no list
        }
        last_text = text;
    }
    Some((trace?, strings))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A snapshot's top-level dict as Python's pickler writes it with protocol 4: `segments`
    /// (a frame string memoized there), then `device_traces` with one event (`pickle.loads`
    /// reads these bytes as `{'segments': [{'filename': 'train.py'}], 'device_traces':
    /// [[{'action': 'alloc'}]]}`, and `pickletools.dis` numbers the memo as below).
    fn protocol_4() -> (Vec<u8>, usize) {
        let text = |s: &str| [&[0x8c, s.len() as u8][..], s.as_bytes(), &[0x94]].concat();
        let mut b = vec![0x80, 4, b'}', 0x94, b'('];
        b.extend(text("segments"));
        b.extend([b']', 0x94, b'(', b'}', 0x94, b'(']);
        b.extend(text("filename"));
        b.extend(text("train.py"));
        b.extend([b'u', b'e']);
        b.extend(text("device_traces"));
        let trace = b.len();
        b.extend([b']', 0x94, b'(', b']', 0x94, b'(', b'}', 0x94, b'(']);
        b.extend(text("action"));
        b.extend(text("alloc"));
        b.extend([b'u', b'e', b'e', b'u', b'.']);
        (b, trace)
    }

    #[test]
    fn the_skim_finds_the_trace_and_the_ids_of_the_strings_before_it_and_in_it() {
        let (bytes, trace) = protocol_4();
        let (found, strings) = skim(&bytes, &AtomicBool::new(false)).expect("a trace");
        assert_eq!(found, trace);
        // ids count every MEMOIZE: the root dict 0, "segments" 1, its list 2, the block 3
        let named = |id: u64| strings.get(&id).map(|s| &**s);
        assert_eq!(named(1), Some("segments"));
        assert_eq!(named(4), Some("filename"));
        assert_eq!(named(5), Some("train.py"));
        assert_eq!(named(6), Some("device_traces"));
        assert_eq!(named(10), Some("action"));
        assert_eq!(named(11), Some("alloc"));
        assert_eq!(named(0), None);
    }

    #[test]
    fn the_skim_declines_explicit_memo_ids_a_trace_that_is_no_list_and_a_stopped_reading() {
        let (bytes, trace) = protocol_4();
        // BINPUT (protocols 1–3) instead of the first MEMOIZE
        let mut put = bytes.clone();
        put.splice(3..4, [b'q', 0]);
        assert!(skim(&put, &AtomicBool::new(false)).is_none());
        // `device_traces` holding None
        let none = [&bytes[..trace], b"Nu."].concat();
        assert!(skim(&none, &AtomicBool::new(false)).is_none());
        // the main reading is over
        assert!(skim(&bytes, &AtomicBool::new(true)).is_some()); // (checked every 65,536 ops)
        let long: Vec<u8> = [&bytes[..5], &[b'N', b'0'].repeat(70_000), &bytes[5..]].concat();
        assert!(skim(&long, &AtomicBool::new(true)).is_none());
    }
}
