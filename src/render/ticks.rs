//! Axis ticks at round numbers (1, 2 or 5 times a power of ten), labelled with one number of
//! decimals for the whole axis, so "0" never sits next to "0.50".

/// Ticks covering `lo..=hi` with about `n` steps; the last is at or above `hi`.
pub fn nice_ticks(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    if !(lo.is_finite() && hi.is_finite()) {
        return vec![0.0, 1.0];
    }
    let (lo, hi) = if hi > lo { (lo, hi) } else { (lo, lo + 1.0) };
    let step = step(lo, hi, n);
    let first = (lo / step).floor() as i64;
    let last = (hi / step - 1e-9).ceil() as i64;
    (first..=last.max(first + 1))
        .map(|k| k as f64 * step)
        .collect()
}

fn step(lo: f64, hi: f64, n: usize) -> f64 {
    let raw = (hi - lo) / n.max(1) as f64;
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * p)
        .find(|&s| s >= raw * (1.0 - 1e-9))
        .unwrap_or(raw)
}

/// Labels with as many decimals as the step needs, the same for every tick.
pub fn tick_labels(ticks: &[f64]) -> Vec<String> {
    let step = match ticks {
        [a, b, ..] => (b - a).abs(),
        _ => 1.0,
    };
    let decimals = if step > 0.0 {
        (-(step.log10() + 1e-9).floor()).max(0.0) as usize
    } else {
        0
    };
    ticks
        .iter()
        .map(|t| {
            let s = format!("{t:.decimals$}");
            // "-0" or "-0.0" reads as a bug
            if s.trim_start_matches('-')
                .chars()
                .all(|c| c == '0' || c == '.')
            {
                s.trim_start_matches('-').to_string()
            } else {
                s
            }
        })
        .collect()
}

/// Multiplier from seconds and unit name for an x span of `span` seconds.
pub fn time_unit(span: f64) -> (f64, &'static str) {
    if span >= 2.0 {
        (1.0, "s")
    } else if span >= 2e-3 {
        (1e3, "ms")
    } else {
        (1e6, "µs")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        assert_eq!(nice_ticks(0.0, 9.3, 5), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(tick_labels(&[0.0, 0.05, 0.1]), vec!["0.00", "0.05", "0.10"]);
        assert_eq!(tick_labels(&[0.0, 0.5, 1.0]), vec!["0.0", "0.5", "1.0"]);
        assert_eq!(tick_labels(&[0.0, 500.0, 1000.0]), vec!["0", "500", "1000"]);
        let t = nice_ticks(0.0, 0.0, 5);
        assert!(t.len() >= 2 && t[0] == 0.0);
    }
}
