//! The events a pixel column keeps: its first, lowest, highest and last, so no spike is lost.

/// Indices of the first, lowest, highest and last value of each of `columns` equal x ranges
/// of `x_range`, ascending and distinct, taken as the events go by.
pub(super) struct ColumnPicks {
    lo: f64,
    width: f64,
    columns: usize,
    picks: Vec<usize>,
    /// The current column and its first, lowest, highest and last (index, value).
    current: Option<(usize, [(usize, i64); 4])>,
}

impl ColumnPicks {
    pub(super) fn new((lo, hi): (f64, f64), columns: usize) -> ColumnPicks {
        ColumnPicks {
            lo,
            width: (hi - lo).max(f64::MIN_POSITIVE),
            columns,
            picks: Vec::with_capacity(4 * columns),
            current: None,
        }
    }

    #[inline]
    pub(super) fn push(&mut self, i: usize, x: f64, y: i64) {
        let c = (((x - self.lo) / self.width * self.columns as f64) as usize).min(self.columns - 1);
        match &mut self.current {
            Some((col, [_, min, max, last])) if *col == c => {
                if y < min.1 {
                    *min = (i, y);
                }
                if y > max.1 {
                    *max = (i, y);
                }
                *last = (i, y);
            }
            _ => {
                self.flush();
                self.current = Some((c, [(i, y); 4]));
            }
        }
    }

    pub(super) fn flush(&mut self) {
        if let Some((_, four)) = self.current.take() {
            let mut four = four.map(|(i, _)| i);
            four.sort_unstable();
            for i in four {
                if self.picks.last() != Some(&i) {
                    self.picks.push(i);
                }
            }
        }
    }

    pub(super) fn finish(mut self) -> Vec<usize> {
        self.flush();
        self.picks
    }
}

/// Indices of the first, lowest, highest and last value of each of `columns` equal x ranges,
/// ascending and distinct.
#[cfg(test)]
pub(super) fn column_picks(x: &[f64], y: &[i64], columns: usize) -> Vec<usize> {
    let n = x.len();
    if n == 0 {
        return Vec::new();
    }
    let mut picks = ColumnPicks::new((x[0], x[n - 1]), columns);
    for i in 0..n {
        picks.push(i, x[i], y[i]);
    }
    picks.finish()
}
