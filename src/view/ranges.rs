//! The annotation ranges of a capture as the page draws them: each `START` paired with the
//! `END` of the same name that closes it (nested ranges of one name close innermost first),
//! placed on both of the page's axes: seconds and the event index.

use serde::Serialize;

use crate::analysis::timeline::AnnotationMark;

use super::event_series::EventSeries;

/// Ranges sent at most (the page draws the first ones; a capture of thousands of steps has
/// more than a window can label).
pub const MAX_RANGES: usize = 2000;

/// One annotation range.
#[derive(Debug, Serialize, PartialEq)]
pub struct Range {
    /// Its name (`Optimizer.step#AdamW.step`, a `record_function` label).
    pub name: String,
    /// Seconds since the first event, at its start and end (the trace's last event when the
    /// capture never closes it).
    pub x0: f64,
    /// Its end, seconds.
    pub x1: f64,
    /// The first event at or after its start.
    pub event0: usize,
    /// The first event at or after its end (the last event when none).
    pub event1: usize,
    /// How deep it is nested in other ranges open at its start (0: outermost).
    pub depth: usize,
}

/// The ranges of `marks` (in time order) over the events of `series` (x in seconds).
pub fn ranges(marks: &[AnnotationMark], series: &EventSeries) -> Vec<Range> {
    let Some((_, last_x)) = series.x_range() else {
        return Vec::new();
    };
    let last = series.len() - 1;
    let event_at = |x: f64| series.partition_point(|v| v < x).min(last);
    // (place in `out`, name) of the ranges open, outermost first
    let mut open: Vec<(usize, &str)> = Vec::new();
    let mut out: Vec<Range> = Vec::new();
    for m in marks {
        if m.stage.eq_ignore_ascii_case("START") {
            if out.len() >= MAX_RANGES {
                continue;
            }
            open.push((out.len(), &m.name));
            out.push(Range {
                name: m.name.clone(),
                x0: m.x,
                x1: last_x,
                event0: event_at(m.x),
                event1: last,
                depth: open.len() - 1,
            });
        } else if let Some(k) = open.iter().rposition(|&(_, n)| n == m.name) {
            let (at, _) = open.remove(k);
            out[at].x1 = m.x;
            out[at].event1 = event_at(m.x);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(x: f64, stage: &str, name: &str) -> AnnotationMark {
        AnnotationMark {
            x,
            time_us: (x * 1e6) as i64,
            stage: stage.into(),
            name: name.into(),
        }
    }

    #[test]
    fn starts_pair_with_their_ends_and_unclosed_ranges_run_to_the_last_event() {
        let series = EventSeries::write((0..10).map(|i| (i as f64, 0))).unwrap();
        let marks = [
            mark(1.0, "START", "step"),
            mark(2.5, "START", "fwd"),
            mark(4.0, "END", "fwd"),
            mark(5.0, "END", "step"),
            mark(7.0, "START", "step"),
        ];
        let r = ranges(&marks, &series);
        assert_eq!(r.len(), 3);
        assert_eq!((r[0].event0, r[0].event1, r[0].depth), (1, 5, 0));
        assert_eq!(
            (r[1].name.as_str(), r[1].event0, r[1].event1),
            ("fwd", 3, 4)
        );
        assert_eq!(r[1].depth, 1);
        assert_eq!((r[2].x0, r[2].x1, r[2].event1), (7.0, 9.0, 9));
    }
}
