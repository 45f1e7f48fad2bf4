//! `top`: bytes by allocation site, per device at the end and at the peak; as text, Markdown,
//! CSV or JSON. (`--folded` stacks are written by `commands/top.rs` from the analysis.)

use std::fmt::Write;

use crate::analysis::sites::SiteReport;
use crate::model::{format_bytes, Units};

use super::document::Document;
use super::table::{or_empty, Table};
use super::{json, thousands, Format};

/// The note that follows `top` of a capture without stacks (text and Markdown; nothing in JSON
/// and CSV, whose rows say `<non-python>`).
pub fn no_stacks(format: Format) -> String {
    match format {
        Format::Json | Format::Csv => String::new(),
        _ => {
            let mut doc = Document::new(format);
            doc.para(&super::no_stacks_note("shown here as <non-python>"));
            // the text report ends at its last line; Markdown's with a blank one
            let gap = if format == Format::Text { "\n" } else { "" };
            format!("{gap}{}", doc.finish())
        }
    }
}

/// Each device's sites by bytes in `format` (`title`: the file's name).
pub fn top(reports: &[SiteReport], title: &str, format: Format, units: Units) -> String {
    if format == Format::Json {
        return json(&reports);
    }
    let has_peak = reports.iter().any(|r| r.peak_bytes.is_some());
    if format == Format::Csv {
        let mut t = Table::new(&[
            "device",
            "site",
            "location",
            "end_bytes",
            "end_count",
            "peak_bytes",
            "peak_count",
        ]);
        for r in reports {
            for row in &r.rows {
                t.row(vec![
                    row.device.to_string(),
                    row.site.clone(),
                    row.location.clone(),
                    row.end_bytes.to_string(),
                    row.end_count.to_string(),
                    or_empty(row.peak_bytes),
                    or_empty(row.peak_count),
                ]);
            }
        }
        return t.csv();
    }
    let mut doc = Document::new(format);
    doc.title(&format!("{title}: bytes by allocation site"));
    for r in reports {
        let mut head = format!(
            "Device {}: {} live at the end in {} allocations",
            r.device,
            format_bytes(r.end_bytes as f64, units),
            thousands(r.end_count as usize)
        );
        if let (Some(p), Some(c), Some(i)) = (r.peak_bytes, r.peak_count, r.peak_event_index) {
            let _ = write!(
                head,
                "; {} at the peak (after event {}) in {} allocations",
                format_bytes(p as f64, units),
                thousands(i),
                thousands(c as usize)
            );
        }
        let _ = write!(head, "; {} sites", thousands(r.sites));
        doc.heading(&head);
        let mut t = if has_peak {
            Table::new(&[">#", ">at peak", ">allocs", ">at end", ">allocs", "site"])
        } else {
            Table::new(&[">#", ">at end", ">allocs", "site"])
        };
        for (i, row) in r.rows.iter().enumerate() {
            let mut cells = vec![(i + 1).to_string()];
            if has_peak {
                cells.push(format_bytes(row.peak_bytes.unwrap_or(0) as f64, units));
                cells.push(thousands(row.peak_count.unwrap_or(0) as usize));
            }
            cells.push(format_bytes(row.end_bytes as f64, units));
            cells.push(thousands(row.end_count as usize));
            cells.push(row.site.clone());
            t.row(cells);
        }
        doc.table(&t);
    }
    doc.text_note(
        "site: innermost Python frame kept by _memory_viz's frame filter (file:line:function); \
             bytes as requested",
    );
    doc.finish()
}
