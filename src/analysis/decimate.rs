//! Reduce a long series to what a plot of a given width can show, keeping every extreme.
//!
//! Plain sampling drops spikes: a peak that lasts one op out of a million vanishes. Here the
//! ops are split into one bucket per pixel column and each bucket keeps its first, minimum,
//! maximum and last points, in op order, so the drawn line passes through every local maximum
//! and minimum the pixel grid can resolve, and the global peak is exactly the data's.

/// Points `(op index, value)` to draw for `values[from..to]` at `columns` buckets.
/// NaN values (ops a series lacks) are skipped.
pub fn min_max_envelope(
    values: &[f64],
    from: usize,
    to: usize,
    columns: usize,
) -> Vec<(usize, f64)> {
    let to = to.min(values.len());
    let from = from.min(to);
    let n = to - from;
    let columns = columns.max(1);
    if n <= columns * 4 {
        return (from..to)
            .filter(|&i| !values[i].is_nan())
            .map(|i| (i, values[i]))
            .collect();
    }
    let mut out = Vec::with_capacity(columns * 4);
    for c in 0..columns {
        let start = from + n * c / columns;
        let end = from + n * (c + 1) / columns;
        let mut first = None;
        let mut last = None;
        let mut min: Option<(usize, f64)> = None;
        let mut max: Option<(usize, f64)> = None;
        for (i, &v) in values[start..end]
            .iter()
            .enumerate()
            .map(|(k, v)| (k + start, v))
        {
            if v.is_nan() {
                continue;
            }
            first.get_or_insert((i, v));
            last = Some((i, v));
            if min.is_none_or(|(_, m)| v < m) {
                min = Some((i, v));
            }
            if max.is_none_or(|(_, m)| v > m) {
                max = Some((i, v));
            }
        }
        let mut bucket: Vec<(usize, f64)> = [first, min, max, last].into_iter().flatten().collect();
        bucket.sort_by_key(|p| p.0);
        bucket.dedup_by_key(|p| p.0);
        out.extend(bucket);
    }
    out
}

/// The same rule for points at irregular x (e.g. trace timestamps): one bucket per pixel
/// column of `[x0, x1]`, each keeping its first, minimum, maximum and last point in order.
/// `xs` must not decrease.
pub fn min_max_envelope_xy(
    xs: &[f64],
    ys: &[f64],
    x0: f64,
    x1: f64,
    columns: usize,
) -> Vec<(f64, f64)> {
    let n = xs.len().min(ys.len());
    let mut env = EnvelopeXy::new(n, x0, x1, columns);
    for i in 0..n {
        env.push(xs[i], ys[i]);
    }
    env.finish()
}

/// A point and its index: (index, x, y).
type Indexed = (usize, f64, f64);

/// [`min_max_envelope_xy`] fed one point at a time (a series that is never whole in memory):
/// memory is bounded by the columns, not the points.
pub struct EnvelopeXy {
    /// Every point is kept (there are few).
    whole: bool,
    x0: f64,
    span: f64,
    columns: usize,
    out: Vec<(f64, f64)>,
    /// The current column and its first, lowest, highest and last point.
    column: Option<(usize, [Indexed; 4])>,
    next: usize,
}

impl EnvelopeXy {
    /// For `n` points over `[x0, x1]` at `columns` buckets.
    pub fn new(n: usize, x0: f64, x1: f64, columns: usize) -> EnvelopeXy {
        let columns = columns.max(1);
        EnvelopeXy {
            whole: n <= columns * 4,
            x0,
            span: if x1 > x0 { x1 - x0 } else { 1.0 },
            columns,
            out: Vec::with_capacity(columns * 4),
            column: None,
            next: 0,
        }
    }

    /// The next point.
    #[inline]
    pub fn push(&mut self, x: f64, y: f64) {
        let i = self.next;
        self.next += 1;
        if self.whole {
            self.out.push((x, y));
            return;
        }
        let c = (((x - self.x0) / self.span * self.columns as f64) as usize).min(self.columns - 1);
        match &mut self.column {
            Some((col, [_, min, max, last])) if *col == c => {
                if y < min.2 {
                    *min = (i, x, y);
                }
                if y > max.2 {
                    *max = (i, x, y);
                }
                *last = (i, x, y);
            }
            _ => {
                self.flush();
                self.column = Some((c, [(i, x, y); 4]));
            }
        }
    }

    fn flush(&mut self) {
        if let Some((_, mut keep)) = self.column.take() {
            keep.sort_unstable_by_key(|p| p.0);
            let mut last = usize::MAX;
            for (k, x, y) in keep {
                if k != last {
                    self.out.push((x, y));
                    last = k;
                }
            }
        }
    }

    /// The points to draw, in order.
    pub fn finish(mut self) -> Vec<(f64, f64)> {
        self.flush();
        self.out
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn irregular_x_keeps_every_extreme_per_column() {
        let n = 100_000;
        let xs: Vec<f64> = (0..n).map(|i| (i as f64).sqrt()).collect();
        let mut ys = vec![1.0; n];
        ys[54_321] = 99.0;
        ys[7] = -5.0;
        let x1 = xs[n - 1];
        let pts = super::min_max_envelope_xy(&xs, &ys, 0.0, x1, 500);
        assert!(pts.len() <= 2000);
        assert!(pts.contains(&(xs[54_321], 99.0)));
        assert!(pts.contains(&(xs[7], -5.0)));
        assert!(pts.windows(2).all(|w| w[0].0 <= w[1].0));
    }

    use super::*;

    #[test]
    fn a_single_spike_survives() {
        let mut v = vec![1.0; 1_000_000];
        v[777_777] = 50.0;
        v[123_456] = -3.0;
        let pts = min_max_envelope(&v, 0, v.len(), 800);
        assert!(pts.len() <= 800 * 4);
        assert!(pts.contains(&(777_777, 50.0)));
        assert!(pts.contains(&(123_456, -3.0)));
        assert!(pts.windows(2).all(|w| w[0].0 < w[1].0));
    }

    #[test]
    fn short_series_are_kept_whole() {
        let v = [1.0, f64::NAN, 3.0];
        assert_eq!(min_max_envelope(&v, 0, 3, 10), vec![(0, 1.0), (2, 3.0)]);
    }
}
