//! `simulate`: one column per scenario, as text, Markdown, CSV or JSON.

use std::fmt::Write;

use serde::{Serialize, Serializer};

use crate::analysis::simulate::{
    DeviceSimulation, LimitSource, Note, Scenario, SegmentEventRef, Simulation,
};
use crate::model::{format_bytes, Units};

use super::document::Document;
use super::table::{or_empty, Table};
use super::{json, thousands, Format};

/// The replay of each device's trace under each scenario, in `format`.
pub fn simulation(s: &Simulation, title: &str, format: Format, units: Units) -> String {
    match format {
        Format::Json => json(s),
        Format::Csv => csv(s),
        Format::Text | Format::Markdown => text(s, title, format, units),
    }
}

/// Where the memory limit came from, as the user reads it: naming `--memory`, which sets it.
fn limit_source(source: LimitSource) -> String {
    match source {
        LimitSource::Given => "--memory".into(),
        LimitSource::NoFailure => "none (no allocation failed; pass --memory)".into(),
        LimitSource::RecordedOom | LimitSource::SmallestAllowed => source.to_string(),
    }
}

/// A note as the user reads it: with how to set the memory limit where that helps.
fn note(n: &Note) -> String {
    match n {
        Note::LimitRange { .. } | Note::LimitContradiction { .. } => {
            format!("{n}; pass --memory to set it")
        }
        Note::GcWithoutLimit => format!("{n}: pass --memory to see it work"),
        Note::StartState { .. } | Note::UnplacedBlocks(_) | Note::PrivatePools => n.to_string(),
    }
}

/// In JSON as in text.
impl Serialize for LimitSource {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&limit_source(*self))
    }
}

/// In JSON as in text.
impl Serialize for Note {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&note(self))
    }
}

fn csv(s: &Simulation) -> String {
    let mut t = Table::new(&[
        "device",
        "settings",
        "peak_reserved_bytes",
        "end_reserved_bytes",
        "peak_allocated_bytes",
        "largest_free_block_at_peak_bytes",
        "fragmentation_at_peak",
        "segments_created",
        "num_alloc_retries",
        "ooms",
        "first_oom_index",
    ]);
    for d in &s.devices {
        for sc in &d.scenarios {
            t.row(vec![
                d.device.to_string(),
                sc.settings.clone(),
                sc.peak_reserved_bytes.to_string(),
                sc.end_reserved_bytes.to_string(),
                sc.peak_allocated_bytes.to_string(),
                sc.largest_free_block_at_peak_bytes.to_string(),
                sc.fragmentation_at_peak
                    .map_or(String::new(), |f| format!("{f:.6}")),
                sc.segments_created.to_string(),
                sc.num_alloc_retries.to_string(),
                sc.ooms.len().to_string(),
                or_empty(sc.ooms.first().map(|o| o.index)),
            ]);
        }
    }
    t.csv()
}

fn event_ref(r: &Option<SegmentEventRef>, units: Units) -> String {
    match r {
        Some(r) => format!(
            "{} of {} at event {}",
            r.action,
            format_bytes(r.size as f64, units),
            thousands(r.index)
        ),
        None => "nothing".into(),
    }
}

/// The warning `simulate` prints when the replay under the file's own settings does not
/// reproduce the recording; None when it does. A `--memory` below what the recording used is
/// named as the cause: the replay ran out where the program did not.
pub fn mismatch_warning(d: &DeviceSimulation, units: Units) -> Option<String> {
    let v = &d.validation;
    if v.first_mismatch.is_none() && v.final_segments_match {
        return None;
    }
    let own = d.scenarios.first();
    let limit_caused = d.memory_limit_source == LimitSource::Given
        && own.is_some_and(|sc| sc.ooms.iter().any(|o| !o.recorded));
    let mut line = format!(
        "device {}: the replay under the file's own settings differs from the recording",
        d.device
    );
    if let (true, Some(limit)) = (limit_caused, d.memory_limit_bytes) {
        let _ = write!(
            line,
            " because of --memory {}: below what the program used{}, the replayed allocator ran \
             out of memory where the recorded one did not (drop --memory to check the model \
             against the file)",
            format_bytes(limit as f64, units),
            v.recorded_peak_reserved_bytes
                .filter(|p| *p > 0)
                .map_or(String::new(), |p| format!(
                    " (peak reserved {})",
                    format_bytes(p as f64, units)
                ))
        );
    }
    let _ = write!(line, ": {}", validation_line(d, units));
    Some(line)
}

/// The validation line (also the warning `simulate` prints on a mismatch).
pub fn validation_line(d: &DeviceSimulation, units: Units) -> String {
    let v = &d.validation;
    let mut line = format!(
        "{} of {} recorded segment events reproduced",
        thousands(v.segment_events_matched),
        thousands(v.segment_events_recorded)
    );
    if let Some(m) = &v.first_mismatch {
        let _ = write!(
            line,
            "; first difference: recorded {}, replay {}",
            event_ref(&m.recorded, units),
            event_ref(&m.simulated, units)
        );
    }
    let _ = write!(
        line,
        "; final segments {} ({} recorded, {} replayed)",
        if v.final_segments_match {
            "match"
        } else {
            "differ"
        },
        thousands(v.final_segments_recorded),
        thousands(v.final_segments_simulated)
    );
    line
}

fn ooms_cell(sc: &Scenario, units: Units) -> String {
    match sc.ooms.first() {
        None => "none".into(),
        Some(o) => format!(
            "{}: first at event {}, {} requested",
            sc.ooms.len(),
            thousands(o.index),
            format_bytes(o.requested_bytes as f64, units)
        ),
    }
}

/// Per device: the limit, the validation, notes, a column per scenario, and the OOMs.
fn text(s: &Simulation, title: &str, format: Format, units: Units) -> String {
    let mut doc = Document::new(format);
    let b = |v: u64| format_bytes(v as f64, units);
    for d in &s.devices {
        let head = format!(
            "{title}: device {}, {} trace events replayed under {} setting{}",
            d.device,
            thousands(d.trace_events),
            d.scenarios.len(),
            if d.scenarios.len() == 1 { "" } else { "s" }
        );
        doc.title(&head);
        doc.para(&format!(
            "memory limit: {}",
            match d.memory_limit_bytes {
                Some(l) => format!("{} ({})", b(l), limit_source(d.memory_limit_source)),
                None => limit_source(d.memory_limit_source),
            }
        ));
        doc.para(&format!("validation: {}", validation_line(d, units)));
        for n in &d.notes {
            doc.para(&format!("note: {}", note(n)));
        }
        if s.own_settings_from == "defaults" {
            doc.para(
                "note: the file records no allocator_settings; its own column assumes the defaults",
            );
        }
        let own_peak = d.scenarios.first().map_or(0, |o| o.peak_reserved_bytes);
        let mut headers: Vec<String> = vec![String::new()];
        for (k, sc) in d.scenarios.iter().enumerate() {
            headers.push(if k == 0 {
                format!(">file's own: {}", sc.settings)
            } else {
                format!(">{}", sc.settings)
            });
        }
        let hdr: Vec<&str> = headers.iter().map(String::as_str).collect();
        let mut t = Table::new(&hdr);
        let mut row = |name: &str, f: &dyn Fn(&Scenario) -> String| {
            let mut cells = vec![name.to_string()];
            cells.extend(d.scenarios.iter().map(f));
            t.row(cells);
        };
        row("peak reserved", &|sc| b(sc.peak_reserved_bytes));
        row("  vs the file's own", &|sc| {
            if own_peak == 0 {
                "-".into()
            } else {
                format!(
                    "{:+.1}%",
                    (sc.peak_reserved_bytes as f64 / own_peak as f64 - 1.0) * 100.0
                )
            }
        });
        row("reserved at the end", &|sc| b(sc.end_reserved_bytes));
        row("peak allocated (requested)", &|sc| {
            b(sc.peak_allocated_bytes)
        });
        row("largest free block at peak", &|sc| {
            b(sc.largest_free_block_at_peak_bytes)
        });
        row("fragmentation at peak", &|sc| {
            sc.fragmentation_at_peak
                .map_or_else(|| "-".into(), |f| format!("{:.1}%", f * 100.0))
        });
        row("segments created", &|sc| sc.segments_created.to_string());
        row("alloc retries", &|sc| sc.num_alloc_retries.to_string());
        row("OOMs", &|sc| ooms_cell(sc, units));
        doc.table(&t);
        for sc in &d.scenarios {
            for o in sc.ooms.iter().take(5) {
                doc.item(&format!(
                    "OOM under {}: event {}{}, {} requested with {} reserved{}{}",
                    sc.settings,
                    thousands(o.index),
                    match (o.time_us, d.first_time_us) {
                        (Some(t), Some(t0)) => format!(" (+{:.3} s)", (t - t0) as f64 / 1e6),
                        _ => String::new(),
                    },
                    b(o.requested_bytes),
                    b(o.reserved_bytes),
                    o.site
                        .as_ref()
                        .map_or(String::new(), |s| format!(", at {s}")),
                    if o.recorded { " (recorded too)" } else { "" }
                ));
            }
            if sc.ooms.len() > 5 {
                doc.item(&format!(
                    "... and {} more under {}",
                    sc.ooms.len() - 5,
                    sc.settings
                ));
            }
        }
        if d.scenarios.iter().any(|sc| !sc.ooms.is_empty()) {
            doc.gap();
        }
    }
    doc.finish()
}
