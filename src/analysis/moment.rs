//! A moment of a snapshot's trace: when live memory is counted (`--at`).
//!
//! `end` is the snapshot's final state; every other moment is "right after" one trace event,
//! the index `memtrack trace` prints: the peak-allocated event, the n-th `oom` event, an event
//! by index, the last event at or before a time (seconds since the trace's first timed event),
//! or the last event at or before an `external_annotations` boundary (a `record_function`
//! range's START or END, the n-th of that name).

use std::fmt;
use std::str::FromStr;

use crate::model::snapshot::Annotation;

use super::sites::Capture;

/// When live memory is counted.
#[derive(Clone, Debug, PartialEq)]
pub enum Moment {
    /// The snapshot's final state (its segments).
    End,
    /// Right after the trace's peak-allocated event (the first one, as the timeline's).
    Peak,
    /// At the n-th `oom` event (1 is the first): what was live when the allocation failed.
    Oom(usize),
    /// Right after trace event `index` (0-based, as `trace` numbers them).
    Event(usize),
    /// After the last event at or before this many microseconds from the first timed event.
    Time(i64),
    /// After the last event at or before an annotation boundary.
    Annotation(AnnotationBoundary),
}

/// `NAME:start` or `NAME:end`, the n-th of that name and stage (1 is the first).
#[derive(Clone, Debug, PartialEq)]
pub struct AnnotationBoundary {
    /// The range's name (`Optimizer.step#AdamW.step`).
    pub name: String,
    /// The END boundary (else START).
    pub end: bool,
    /// Which occurrence, from 1.
    pub nth: usize,
}

/// A moment the command line could not read.
#[derive(Debug, thiserror::Error)]
#[error("'{text}' is not a moment: {why}; expected peak, end, oom, oom@N, an event index (1234), a time since the first event (5.2s, 300ms) or an annotation boundary (NAME:start, NAME:end, NAME:end@2)")]
pub struct MomentError {
    text: String,
    why: &'static str,
}

impl FromStr for Moment {
    type Err = MomentError;

    fn from_str(s: &str) -> Result<Moment, MomentError> {
        let err = |why| MomentError {
            text: s.to_string(),
            why,
        };
        let t = s.trim();
        let lower = t.to_ascii_lowercase();
        match lower.as_str() {
            "end" => return Ok(Moment::End),
            "peak" => return Ok(Moment::Peak),
            "oom" => return Ok(Moment::Oom(1)),
            _ => {}
        }
        if let Some(n) = lower.strip_prefix("oom@") {
            return match n.parse::<usize>() {
                Ok(n) if n >= 1 => Ok(Moment::Oom(n)),
                _ => Err(err("the N of oom@N counts from 1")),
            };
        }
        if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
            return t
                .parse()
                .map(Moment::Event)
                .map_err(|_| err("event index too large"));
        }
        for (unit, us) in [("ms", 1e3), ("us", 1.0), ("s", 1e6)] {
            if let Some(num) = lower.strip_suffix(unit) {
                if let Ok(v) = num.trim().parse::<f64>() {
                    if !(v.is_finite() && v >= 0.0) {
                        return Err(err("a time is not negative"));
                    }
                    return Ok(Moment::Time((v * us).round() as i64));
                }
            }
        }
        // NAME:stage[@n]; the name may itself hold ':' and '@'
        let (body, nth) = match t.rsplit_once('@') {
            Some((b, n)) if !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()) => {
                match n.parse::<usize>() {
                    Ok(n) if n >= 1 => (b, n),
                    _ => return Err(err("the n of @n counts from 1")),
                }
            }
            _ => (t, 1),
        };
        if let Some((name, stage)) = body.rsplit_once(':') {
            let end = match stage.to_ascii_lowercase().as_str() {
                "start" => false,
                "end" => true,
                _ => return Err(err("an annotation boundary ends in :start or :end")),
            };
            if name.is_empty() {
                return Err(err("the annotation's name is empty"));
            }
            return Ok(Moment::Annotation(AnnotationBoundary {
                name: name.to_string(),
                end,
                nth,
            }));
        }
        Err(err("not a known form"))
    }
}

impl fmt::Display for Moment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Moment::End => write!(f, "end"),
            Moment::Peak => write!(f, "peak"),
            Moment::Oom(1) => write!(f, "oom"),
            Moment::Oom(n) => write!(f, "oom@{n}"),
            Moment::Event(i) => write!(f, "event {i}"),
            Moment::Time(us) => write!(f, "{}s", *us as f64 / 1e6),
            Moment::Annotation(a) => {
                write!(f, "{}:{}", a.name, if a.end { "end" } else { "start" })?;
                if a.nth > 1 {
                    write!(f, "@{}", a.nth)?;
                }
                Ok(())
            }
        }
    }
}

impl Moment {
    /// Whether finding it needs the file's `external_annotations` (read after the trace).
    pub fn needs_annotations(&self) -> bool {
        matches!(self, Moment::Annotation(_))
    }
}

impl Moment {
    /// How device `device`'s gathering finds it (`annotations`: the file's, for a boundary).
    pub fn capture(&self, annotations: &[Annotation], device: u32) -> Result<Capture, String> {
        Ok(match self {
            Moment::End => Capture::End,
            Moment::Peak => Capture::Peak,
            Moment::Oom(n) => Capture::Oom(*n),
            Moment::Event(i) => Capture::Event(*i),
            Moment::Time(us) => Capture::SinceFirst(*us),
            Moment::Annotation(a) => Capture::AtTime(a.time_us(annotations, device)?),
        })
    }

    /// Why no event of device `device`'s trace (`events` long, with `ooms` OOMs) is the moment.
    pub fn not_found(&self, device: u32, events: usize, ooms: usize) -> String {
        let trace = format!("device {device}'s trace has {events} events");
        match self {
            _ if events == 0 => format!(
                "device {device} has no trace events: only the end can be shown (record them \
                 with torch.cuda.memory._record_memory_history())"
            ),
            Moment::Oom(n) if ooms == 0 => format!("{trace} and no oom event (wanted oom@{n})"),
            Moment::Oom(n) => format!("{trace} and {ooms} oom events, not {n}"),
            Moment::Event(i) => format!(
                "{trace}, numbered 0 to {} as `memtrack trace` lists them: no event {i}",
                events - 1
            ),
            Moment::Time(_) => format!("{trace} without times (time_us)"),
            Moment::Annotation(_) => format!("{trace}: none at or before {self}"),
            Moment::End | Moment::Peak => format!("{trace}: none is the {self}"),
        }
    }
}

impl AnnotationBoundary {
    /// The boundary's `time_us` among device `device`'s annotations (those naming no device
    /// count for every device); Err says what the file has instead.
    pub fn time_us(&self, annotations: &[Annotation], device: u32) -> Result<i64, String> {
        let stage = if self.end { "END" } else { "START" };
        let mut matching = annotations.iter().filter(|a| {
            a.device.is_none_or(|d| d == device)
                && a.name == self.name
                && a.stage.eq_ignore_ascii_case(stage)
        });
        if let Some(t) = matching.nth(self.nth - 1).and_then(|a| a.time_us) {
            return Ok(t);
        }
        let count = annotations
            .iter()
            .filter(|a| {
                a.device.is_none_or(|d| d == device)
                    && a.name == self.name
                    && a.stage.eq_ignore_ascii_case(stage)
            })
            .count();
        let mut names: Vec<&str> = annotations.iter().map(|a| a.name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        Err(if count > 0 {
            format!(
                "device {device} has {count} {stage} of '{}' with a time, not {}",
                self.name, self.nth
            )
        } else if names.is_empty() {
            "the snapshot has no external_annotations (record_function ranges are recorded \
             with torch.cuda.memory._record_memory_history(..., global_record_annotations=True) \
             or under the profiler)"
                .to_string()
        } else {
            format!(
                "no {stage} of '{}' on device {device}; the annotations are: {}",
                self.name,
                names.join(", ")
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_reads_and_prints_back() {
        let m = |s: &str| s.parse::<Moment>().unwrap();
        assert_eq!(m("peak"), Moment::Peak);
        assert_eq!(m("END"), Moment::End);
        assert_eq!(m("oom"), Moment::Oom(1));
        assert_eq!(m("oom@3"), Moment::Oom(3));
        assert_eq!(m("1234"), Moment::Event(1234));
        assert_eq!(m("5.2s"), Moment::Time(5_200_000));
        assert_eq!(m("300ms"), Moment::Time(300_000));
        assert_eq!(m("7us"), Moment::Time(7));
        let a = m("Optimizer.step#AdamW.step:end@2");
        assert_eq!(
            a,
            Moment::Annotation(AnnotationBoundary {
                name: "Optimizer.step#AdamW.step".into(),
                end: true,
                nth: 2
            })
        );
        assert_eq!(a.to_string(), "Optimizer.step#AdamW.step:end@2");
        assert_eq!(m("a:b:START").to_string(), "a:b:start");
        for bad in ["", "oom@0", "x:middle", ":end", "-1s", "soon", "x:end@0"] {
            assert!(bad.parse::<Moment>().is_err(), "{bad}");
        }
    }

    #[test]
    fn annotation_times_are_found_per_device_and_occurrence() {
        let an = |device, stage: &str, name: &str, t| Annotation {
            device,
            stage: stage.into(),
            name: name.into(),
            time_us: Some(t),
        };
        let list = vec![
            an(Some(0), "START", "step", 10),
            an(Some(1), "START", "step", 11),
            an(Some(0), "END", "step", 20),
            an(None, "START", "step", 30),
        ];
        let b = |end, nth| AnnotationBoundary {
            name: "step".into(),
            end,
            nth,
        };
        assert_eq!(b(false, 1).time_us(&list, 0), Ok(10));
        assert_eq!(b(false, 1).time_us(&list, 1), Ok(11));
        assert_eq!(b(false, 2).time_us(&list, 0), Ok(30));
        assert_eq!(b(true, 1).time_us(&list, 0), Ok(20));
        assert!(b(true, 2).time_us(&list, 0).unwrap_err().contains("1 END"));
        assert!(b(true, 1)
            .time_us(&[], 0)
            .unwrap_err()
            .contains("no external"));
    }
}
