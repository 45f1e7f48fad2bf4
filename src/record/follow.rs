//! Following a journal while `record` (or `attach`) writes it: each process's spool is read
//! from where the last look stopped, up to the records its agent has published (slot 0 of the
//! segment: docs/record.md, "Spool"), into a [`LiveReplay`] per process.
//!
//! Only published records are read, and a segment is left for the next once the next exists
//! (the agent starts one when a record does not fit), so every batch ends between two records.
//! Reading is by position through the journal's own handles: a journal removed at the end of
//! the run is still read to its end.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use crate::record::journal::Journal;
use crate::record::replay::live::LiveReplay;

/// Most bytes of one process read in one look: a batch's ops are held until the model takes
/// them, so a journal written faster than it is read is caught up with in steps.
const MOST_PER_LOOK: u64 = 8 << 20;

/// One recorded process (one image of it) followed.
pub struct Followed {
    /// Its pid, and which image of it (0, then 1, 2, … after an `exec`).
    pub pid: u32,
    /// The image.
    pub image: u32,
    /// Its records so far.
    pub replay: LiveReplay,
    /// Its spool's segments, in order.
    segments: Vec<File>,
    /// The segment being read, and the next slot to read in it.
    at: (usize, u64),
}

/// Every process of a journal, followed.
pub struct Follower {
    journal: Arc<Journal>,
    /// In the order their spools appeared (the program's own process first).
    pub processes: Vec<Followed>,
    buf: Vec<u8>,
    slots: Vec<i64>,
}

impl Follower {
    /// Follow `journal` from its start.
    pub fn new(journal: Arc<Journal>) -> Follower {
        Follower {
            journal,
            processes: Vec::new(),
            buf: Vec::new(),
            slots: Vec::new(),
        }
    }

    /// The journal followed.
    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    /// Read what every process published since the last look; the bytes read.
    pub fn poll(&mut self) -> u64 {
        for ((pid, image, segment), file) in self.journal.spool_files() {
            let k = match (self.processes.iter()).position(|p| (p.pid, p.image) == (pid, image)) {
                Some(k) => k,
                None => {
                    self.processes.push(Followed {
                        pid,
                        image,
                        replay: LiveReplay::new(),
                        segments: Vec::new(),
                        at: (0, 1),
                    });
                    self.processes.len() - 1
                }
            };
            let p = &mut self.processes[k];
            // segments come in order; one missing in between (never made) ends the spool
            if segment as usize == p.segments.len() {
                p.segments.push(file);
            }
        }
        let mut read = 0;
        for p in &mut self.processes {
            read += p.read_published(&mut self.buf, &mut self.slots);
        }
        read
    }
}

impl Followed {
    /// Feed the replay the records published since the last look, at most [`MOST_PER_LOOK`].
    fn read_published(&mut self, buf: &mut Vec<u8>, slots: &mut Vec<i64>) -> u64 {
        let mut read = 0;
        // a record longer than a look's share is read whole
        let mut whole = false;
        while read < MOST_PER_LOOK || whole {
            let (seg, from) = self.at;
            let Some(file) = self.segments.get(seg) else {
                break;
            };
            let mut head = [0u8; 8];
            if file.read_exact_at(&mut head, 0).is_err() {
                break; // not yet written
            }
            let end = i64::from_le_bytes(head).max(1) as u64;
            let share = MOST_PER_LOOK.saturating_sub(read).max(8) / 8;
            let to = if whole { end } else { end.min(from + share) };
            if to > from {
                match read_slots(file, from, to, buf, slots) {
                    Ok(n) if n as u64 == to - from => {}
                    _ => break, // shorter than its head says: look again later
                }
                // a look cut short of `end` may cut a record: it is read again next time
                let taken = self.replay.feed(slots) as u64;
                read += taken * 8;
                self.at.1 = from + taken;
                if taken == 0 {
                    if to < end && !whole {
                        whole = true;
                        continue;
                    }
                    break;
                }
                whole = false;
                continue;
            }
            // all published records read: the segment is done once the next exists
            if seg + 1 < self.segments.len() {
                let mut again = [0u8; 8];
                let last = file
                    .read_exact_at(&mut again, 0)
                    .map(|_| i64::from_le_bytes(again));
                if last.is_ok_and(|e| e.max(1) as u64 > from) {
                    continue; // the last records landed after the look above
                }
                self.at = (seg + 1, 1);
                continue;
            }
            break;
        }
        read
    }
}

/// Slots `from..to` of a segment into `slots`; how many were whole in the file.
fn read_slots(
    file: &File,
    from: u64,
    to: u64,
    buf: &mut Vec<u8>,
    slots: &mut Vec<i64>,
) -> io::Result<usize> {
    buf.resize(((to - from) * 8) as usize, 0);
    let mut at = 0;
    while at < buf.len() {
        match file.read_at(&mut buf[at..], from * 8 + at as u64) {
            Ok(0) => break,
            Ok(n) => at += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    slots.clear();
    slots.extend(
        buf[..at - at % 8]
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap())),
    );
    Ok(slots.len())
}
