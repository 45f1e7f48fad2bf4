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

#[cfg(test)]
mod tests {
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
