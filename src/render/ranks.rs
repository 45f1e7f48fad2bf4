//! `summary` of several snapshots (one per rank) as one table: text, Markdown, CSV or JSON.

use crate::analysis::ranks::RankTable;
use crate::model::ranks::DeviceFigures;
use crate::model::{format_bytes, Units};

use super::document::Document;
use super::table::{or_empty, Table};
use super::{json, pct, Format};

/// The table of ranks in `format`.
pub fn rank_table(t: &RankTable, format: Format, units: Units) -> String {
    match format {
        Format::Json => json(t),
        Format::Csv => csv(t),
        Format::Text | Format::Markdown => document(t, format, units),
    }
}

fn csv(t: &RankTable) -> String {
    let mut out = Table::new(&[
        "file",
        "device",
        "trace_entries",
        "peak_allocated_bytes",
        "peak_reserved_bytes",
        "reserved_at_peak_allocated_bytes",
        "fragmentation_at_peak",
        "allocated_bytes",
        "reserved_bytes",
        "ooms",
        "first_oom_requested_bytes",
        "outlier",
    ]);
    for f in &t.files {
        for d in &f.devices {
            out.row(vec![
                f.file.clone(),
                d.device.to_string(),
                d.trace_entries.to_string(),
                or_empty(d.peak_allocated_bytes),
                or_empty(d.peak_reserved_bytes),
                or_empty(d.reserved_at_peak_allocated_bytes),
                d.fragmentation_at_peak
                    .map_or(String::new(), |x| format!("{x:.6}")),
                d.allocated_bytes.to_string(),
                d.reserved_bytes.to_string(),
                d.ooms.to_string(),
                or_empty(d.first_oom_requested_bytes),
                is_outlier(t, &f.file, d).to_string(),
            ]);
        }
    }
    out.csv()
}

fn is_outlier(t: &RankTable, file: &str, d: &DeviceFigures) -> bool {
    t.outlier
        .as_ref()
        .is_some_and(|o| o.file == file && o.device == d.device)
}

fn document(t: &RankTable, format: Format, units: Units) -> String {
    let mut doc = Document::new(format);
    let devices: usize = t.files.iter().map(|f| f.devices.len()).sum();
    doc.title(&format!(
        "{} allocator snapshots ({} device{})",
        t.files.len(),
        devices,
        if devices == 1 { "" } else { "s" }
    ));
    let mut table = Table::new(&[
        "file",
        ">device",
        ">peak allocated",
        ">peak reserved",
        ">fragmentation at peak",
        "OOM",
        "note",
    ]);
    let mut without_trace = false;
    for f in &t.files {
        for d in &f.devices {
            let shown = |(v, peak): (i64, bool)| {
                let s = format_bytes(v as f64, units);
                if peak {
                    s
                } else {
                    format!("{s} *")
                }
            };
            without_trace |= d.peak_reserved_bytes.is_none();
            let oom = match (d.ooms, d.first_oom_requested_bytes) {
                (0, _) => "-".to_string(),
                (1, Some(b)) => format!("asked {}", format_bytes(b as f64, units)),
                (n, Some(b)) => format!("{n}, first asked {}", format_bytes(b as f64, units)),
                (n, None) => n.to_string(),
            };
            let note = match &t.outlier {
                Some(o) if is_outlier(t, &f.file, d) => {
                    format!("outlier: {:+.1}% reserved vs median", o.from_median * 100.0)
                }
                _ => String::new(),
            };
            table.row(vec![
                f.file.clone(),
                d.device.to_string(),
                shown(d.allocated_or_capture()),
                shown(d.reserved_or_capture()),
                pct(d.fragmentation_at_peak.map(|x| x * 100.0)),
                oom,
                note,
            ]);
        }
    }
    doc.table(&table);
    doc.gap();
    if without_trace {
        doc.para(
            "* no trace: the bytes at capture, not the peak (record with \
             torch.cuda.memory._record_memory_history() to see peaks)",
        );
    }
    let median = t
        .median_peak_reserved_bytes
        .map(|m| format_bytes(m, units))
        .unwrap_or_else(|| "-".into());
    match &t.outlier {
        Some(o) => doc.para(&format!(
            "Outlier: {} (device {}) {} {} reserved, {:.1}% {} the median {median}.",
            o.file,
            o.device,
            if o.from_trace {
                "peaked at"
            } else {
                "held at capture"
            },
            format_bytes(o.peak_reserved_bytes as f64, units),
            o.from_median.abs() * 100.0,
            if o.from_median > 0.0 {
                "above"
            } else {
                "below"
            },
        )),
        None if devices > 1 => doc.para(&format!(
            "No outlier: every peak reserved is within {:.0}% of the median {median}.",
            crate::analysis::ranks::OUTLIER_SHARE * 100.0
        )),
        None => {}
    }
    let oomed: Vec<String> = (t.files.iter())
        .flat_map(|f| f.devices.iter().map(move |d| (f, d)))
        .filter(|(_, d)| d.ooms > 0)
        .map(|(f, d)| format!("{} (device {})", f.file, d.device))
        .collect();
    if !oomed.is_empty() {
        doc.para(&format!("Out of memory: {}.", oomed.join(", ")));
    }
    doc.para(
        "Fragmentation at peak: the share of the reserved bytes not allocated to tensors when \
         allocated peaked (cached free blocks and rounding).",
    );
    doc.close_up();
    doc.finish()
}
