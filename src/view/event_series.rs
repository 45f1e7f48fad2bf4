//! Each event's x and the allocated bytes after it, as the view's index reads them: written
//! once to an unnamed temporary file (16 bytes an event, in `TMPDIR`) and mapped read-only,
//! its pages handed back as a pass over them goes on. The server then holds only the part a
//! request is reading: at 10 GB (55.7M events) the two columns in memory were 850 MiB of the
//! server's 1.5 GB. Pages handed back stay in the kernel's page cache: reading them again is a
//! minor fault, not a disk read.

use std::fs::File;
use std::io::{self, BufWriter, Write};

/// Bytes an event: its x (f64) and its allocated bytes (i64), little-endian.
const RECORD: usize = 16;

/// Events read between two hand-backs in a pass (1 MiB of the file).
const STRETCH: usize = 1 << 16;

const PAGE: usize = 4096;

pub struct EventSeries {
    /// None for no events (a file of no bytes cannot be mapped).
    map: Option<memmap2::Mmap>,
    len: usize,
}

impl EventSeries {
    /// The series of `points` (x, allocated bytes), in event order.
    pub fn write(points: impl IntoIterator<Item = (f64, i64)>) -> io::Result<EventSeries> {
        let file: File = tempfile::tempfile()?;
        let mut w = BufWriter::with_capacity(1 << 16, &file);
        let mut len = 0;
        for (x, allocated) in points {
            w.write_all(&x.to_le_bytes())?;
            w.write_all(&allocated.to_le_bytes())?;
            len += 1;
        }
        w.flush()?;
        drop(w);
        let map = if len == 0 {
            None
        } else {
            // SAFETY: a private read-only mapping of an unnamed file only this process holds,
            // written whole above and never written again
            Some(unsafe { memmap2::MmapOptions::new().map(&file)? })
        };
        Ok(EventSeries { map, len })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }

    fn word(&self, at: usize) -> [u8; 8] {
        let mut w = [0; 8];
        w.copy_from_slice(&self.bytes()[at..at + 8]);
        w
    }

    /// x of event `i` (seconds since the first, or the event index). Panics past the end, as
    /// a slice does.
    pub fn x(&self, i: usize) -> f64 {
        f64::from_le_bytes(self.word(i * RECORD))
    }

    /// Allocated bytes after event `i`.
    pub fn allocated(&self, i: usize) -> i64 {
        i64::from_le_bytes(self.word(i * RECORD + 8))
    }

    /// x of the first and the last event; None without events.
    pub fn x_range(&self) -> Option<(f64, f64)> {
        (self.len > 0).then(|| (self.x(0), self.x(self.len - 1)))
    }

    /// The number of events from the first for which `below(x)` holds, x never decreasing
    /// (as `slice::partition_point`).
    pub fn partition_point(&self, below: impl Fn(f64) -> bool) -> usize {
        let (mut lo, mut hi) = (0, self.len);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if below(self.x(mid)) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// `f(index, x, allocated)` for each event of `from..to`, in order, the pages read handed
    /// back as the pass goes on.
    pub fn each(&self, from: usize, to: usize, mut f: impl FnMut(usize, f64, i64)) {
        let mut start = from;
        while start < to {
            let end = (start + STRETCH).min(to);
            for i in start..end {
                f(i, self.x(i), self.allocated(i));
            }
            self.release(start * RECORD, end * RECORD);
            start = end;
        }
    }

    /// Hand back every page this process has read of the file (after a request: whatever it
    /// read at random).
    pub fn release_all(&self) {
        self.release(0, self.len * RECORD);
    }

    /// Hand back the pages that hold any of bytes `from..to` of the file (values are copied
    /// out, never borrowed from the mapping).
    fn release(&self, from: usize, to: usize) {
        if let Some(map) = &self.map {
            crate::memory::release_mapped(map, from / PAGE * PAGE, to.next_multiple_of(PAGE));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_read_back_across_stretches_and_after_their_pages_are_handed_back() {
        let n = 3 * STRETCH + 123;
        let point = |i: usize| (i as f64 * 0.5, (i as i64 * 7919) % 100_003 - 50_000);
        let s = EventSeries::write((0..n).map(point)).unwrap();
        assert_eq!(s.len(), n);
        assert_eq!(s.x_range(), Some((0.0, (n - 1) as f64 * 0.5)));
        let mut seen = 0;
        s.each(5, n, |i, x, a| {
            assert_eq!((x, a), point(i), "event {i}");
            assert_eq!(i, 5 + seen);
            seen += 1;
        });
        assert_eq!(seen, n - 5);
        s.release_all();
        for i in [0, 1, STRETCH - 1, STRETCH, 2 * STRETCH + 7, n - 1] {
            assert_eq!((s.x(i), s.allocated(i)), point(i));
        }
        // as slice::partition_point over the x column
        let xs: Vec<f64> = (0..n).map(|i| point(i).0).collect();
        for v in [-1.0, 0.0, 0.25, 1000.0, 1000.5, (n as f64) * 0.5, 1e12] {
            assert_eq!(s.partition_point(|x| x < v), xs.partition_point(|&x| x < v));
            assert_eq!(
                s.partition_point(|x| x <= v),
                xs.partition_point(|&x| x <= v)
            );
        }
    }

    #[test]
    fn no_events_is_an_empty_series() {
        let s = EventSeries::write(std::iter::empty()).unwrap();
        assert!(s.is_empty());
        assert_eq!(s.x_range(), None);
        assert_eq!(s.partition_point(|_| true), 0);
        s.each(0, 0, |_, _, _| panic!("no events"));
        s.release_all();
    }
}
