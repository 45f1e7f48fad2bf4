//! How a trace is cut between the main reading and a second core: the bytes of a round, the
//! share of it the main reading takes, and what the second core is told of the memo. A leaf:
//! `traces` (every round) and `early` (the first, started with the file) cut them alike.

use std::time::Duration;

use crate::pickle::{ops::Cursor, Op};

use super::tail::{Known, Tail};

/// What a second core's reading of a round gives back: what it was told, its reading (None
/// if it gave up), how long it took.
pub type RoundRead = (Known, Option<Tail>, Duration);

/// How far back from where a round starts the strings it is told of are looked for (about a
/// thousand events, a batch of Python's pickler).
pub const SCAN_BYTES: usize = 256 << 10;

/// Bytes below which no round of a second core starts once rounds have run, and the least a
/// shrinking round reads (a round's start and take-over cost about 0.1 ms).
pub const LAST_ROUND_BYTES: usize = 2 << 20;

/// The two readings' speeds (bytes a second: the main reading's own share, the second core's
/// part) before a round has measured them, as on gen_data's 1M-event capture: the second core
/// reads about 700 MB/s, and the main reading, which adopts what it reads, takes 0.45 of a
/// round (that read fastest in one round; 0.38 and 0.5 took 10% longer).
const FIRST_SPEEDS: (f64, f64) = (570e6, 700e6);

/// The bytes of a round that starts `left` bytes before the file's end: at most
/// `round_bytes`, and shrinking towards the end, so that the last one, whose events the main
/// reading adopts while the second core has nothing left to read, is short.
pub fn round_len(left: usize, round_bytes: usize) -> usize {
    left.min(round_bytes.max(1))
        .min((left / 3).max(LAST_ROUND_BYTES))
}

/// Where a round from `here` is cut, `known` telling where events start: the second core
/// reads from the first event at or past the main reading's `share` of it (a function of the
/// round's bytes, `round_len`) to the round's end; None if no event starts within 1 MB there.
pub fn cut(
    data: &[u8],
    here: usize,
    known: &Known,
    round_bytes: usize,
    share: impl FnOnce(usize) -> f64,
) -> Option<(usize, usize)> {
    let round = round_len(data.len() - here, round_bytes);
    let from = here + (round as f64 * share(round)) as usize;
    let at = known.event_start(data, from, 1 << 20)?;
    Some((at, here + round))
}

/// The share of a `round` of bytes the main reading takes when it has `main_first` seconds of
/// other work first (adopting the last round's events, or the segments before the trace), at
/// `speeds` (the last round's, if any): both readings end together.
pub fn main_share(round: usize, speeds: Option<(f64, f64)>, main_first: f64) -> f64 {
    let (main_speed, tail_speed) = speeds.unwrap_or(FIRST_SPEEDS);
    // main: main_first + x·round / main_speed = second core: (1 - x)·round / tail_speed
    let (main_all, tail_all) = (round as f64 / main_speed, round as f64 / tail_speed);
    ((tail_all - main_first) / (main_all + tail_all)).clamp(0.1, 0.8)
}

/// What a second core's reading is told: the strings that the references in `data[from..to]`
/// (`from` where an opcode starts) fetch, by `text_of` (None for a memo id that is no string).
pub fn known_between<'t>(
    data: &[u8],
    from: usize,
    to: usize,
    text_of: impl Fn(u64) -> Option<&'t str>,
) -> Known {
    let mut known = Known::default();
    let mut ops = Cursor::new(&data[..to]);
    ops.advance(from);
    while let Ok(op) = ops.next_op() {
        if let Op::Get(id) = op {
            if !known.contains(id) {
                if let Some(s) = text_of(id) {
                    known.insert(id, s);
                }
            }
        }
    }
    known
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_shrink_towards_the_end_down_to_the_last_round_bytes() {
        const MB: usize = 1 << 20;
        let (mut left, mut rounds) = (2000 * MB, Vec::new());
        while left >= LAST_ROUND_BYTES {
            let r = round_len(left, 256 * MB);
            rounds.push(r);
            left -= r;
        }
        assert_eq!(rounds[..2], [256 * MB, 256 * MB]);
        assert!(rounds.windows(2).all(|w| w[1] <= w[0]), "{rounds:?}");
        assert_eq!(*rounds.last().unwrap(), LAST_ROUND_BYTES);
        assert!(left < LAST_ROUND_BYTES);
        // (a file's end is never passed)
        assert_eq!(round_len(MB, 256 * MB), MB);
    }

    #[test]
    fn the_split_lets_both_readings_end_together() {
        let round = 100_000_000;
        assert!((main_share(round, None, 0.0) - 0.45).abs() < 0.01);
        assert_eq!(main_share(round, Some((1e9, 1e9)), 0.0), 0.5);
        // the main reading busy 50 ms first, both at 1 GB/s: 25 MB of 100 MB for it
        assert!((main_share(round, Some((1e9, 1e9)), 0.05) - 0.25).abs() < 1e-9);
        // busy longer than the round takes the second core: the least share
        assert_eq!(main_share(round, Some((1e9, 1e9)), 1.0), 0.1);
    }
}
