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
    let columns = columns.max(1);
    if n <= columns * 4 {
        return (0..n).map(|i| (xs[i], ys[i])).collect();
    }
    let span = if x1 > x0 { x1 - x0 } else { 1.0 };
    let col = |x: f64| (((x - x0) / span * columns as f64) as usize).min(columns - 1);
    let mut out = Vec::with_capacity(columns * 4);
    let mut i = 0;
    while i < n {
        let c = col(xs[i]);
        let start = i;
        let (mut min, mut max) = (i, i);
        while i < n && col(xs[i]) == c {
            if ys[i] < ys[min] {
                min = i;
            }
            if ys[i] > ys[max] {
                max = i;
            }
            i += 1;
        }
        let mut keep = [start, min, max, i - 1];
        keep.sort_unstable();
        let mut last = usize::MAX;
        for k in keep {
            if k != last {
                out.push((xs[k], ys[k]));
                last = k;
            }
        }
    }
    out
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
