//! A run's allocated and reserved bytes per op, kept in a bounded number of buckets: each
//! bucket holds the lowest and highest allocated and the highest reserved of its ops, so every
//! spike a terminal column can show survives (as `analysis::decimate` keeps a plot's). When the
//! buckets pass their bound, neighbours merge and each bucket covers twice the ops: memory is
//! the bound, whatever the run's length, and each op costs a compare or two.

/// Most buckets kept (merged in pairs past it).
const MOST_BUCKETS: usize = 4096;

/// The ops `first..first + width` of one bucket.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bucket {
    /// Its first op.
    pub first: u64,
    /// The lowest allocated after one of its ops.
    pub low: f64,
    /// The highest allocated.
    pub high: f64,
    /// The highest reserved.
    pub reserved: f64,
}

/// Allocated and reserved over a run's ops, in buckets of `width` ops.
#[derive(Clone, Debug)]
pub struct Envelope {
    width: u64,
    buckets: Vec<Bucket>,
    ops: u64,
}

impl Default for Envelope {
    fn default() -> Envelope {
        Envelope {
            width: 1,
            buckets: Vec::new(),
            ops: 0,
        }
    }
}

impl Envelope {
    /// The next op's bytes after it (ops come in order).
    pub fn push(&mut self, allocated: f64, reserved: f64) {
        let (allocated, reserved) = (finite(allocated), finite(reserved));
        let k = self.ops / self.width;
        self.ops += 1;
        if let Some(b) = self
            .buckets
            .last_mut()
            .filter(|b| b.first / self.width == k)
        {
            b.low = b.low.min(allocated);
            b.high = b.high.max(allocated);
            b.reserved = b.reserved.max(reserved);
            return;
        }
        self.buckets.push(Bucket {
            first: k * self.width,
            low: allocated,
            high: allocated,
            reserved,
        });
        if self.buckets.len() > MOST_BUCKETS {
            self.width *= 2;
            let merged = self.buckets.chunks(2).map(|pair| {
                pair.iter().skip(1).fold(pair[0], |a, b| Bucket {
                    first: a.first,
                    low: a.low.min(b.low),
                    high: a.high.max(b.high),
                    reserved: a.reserved.max(b.reserved),
                })
            });
            self.buckets = merged.collect();
        }
    }

    /// Ops per bucket.
    pub fn width(&self) -> u64 {
        self.width
    }

    /// Ops pushed.
    pub fn ops(&self) -> u64 {
        self.ops
    }

    /// The buckets, in op order.
    pub fn buckets(&self) -> &[Bucket] {
        &self.buckets
    }

    /// The buckets whose ops overlap `from..to`.
    pub fn between(&self, from: u64, to: u64) -> &[Bucket] {
        let w = self.width;
        let a = self.buckets.partition_point(|b| b.first + w <= from);
        let z = self.buckets.partition_point(|b| b.first < to);
        &self.buckets[a..z.max(a)]
    }

    /// The highest allocated or reserved among `buckets`.
    pub fn top(buckets: &[Bucket]) -> f64 {
        (buckets.iter()).fold(0.0, |m, b| m.max(b.high).max(b.reserved))
    }
}

/// A sample that says nothing (NaN, a file's gap) counts as zero.
fn finite(x: f64) -> f64 {
    if x.is_finite() {
        x
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_stay_bounded_and_keep_every_extreme() {
        let mut e = Envelope::default();
        let n = 3 * MOST_BUCKETS as u64 + 7;
        for i in 0..n {
            // a spike at op 5000, a dip at op 9001
            let a = match i {
                5000 => 1e9,
                9001 => -1.0,
                _ => (i % 100) as f64,
            };
            e.push(a, a + 10.0);
        }
        assert_eq!(e.ops(), n);
        assert!(e.buckets().len() <= MOST_BUCKETS);
        assert_eq!(Envelope::top(e.buckets()), 1e9 + 10.0);
        assert!(e.buckets().iter().any(|b| b.low == -1.0));
        // buckets tile the ops: each starts where the one before ended
        let w = e.buckets()[1].first - e.buckets()[0].first;
        assert!(e.buckets().windows(2).all(|p| p[1].first - p[0].first == w));
        let mid = e.between(5000, 5001);
        assert_eq!(mid.len(), 1);
        assert_eq!(mid[0].high, 1e9);
    }
}
