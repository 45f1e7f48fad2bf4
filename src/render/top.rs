//! `top`: bytes by group (allocation site, user line, category, …), per device at a moment and
//! at the end; as text, Markdown, CSV or JSON. (`--folded` stacks are written by
//! `commands/top.rs` from the analysis.)

use std::fmt::Write;

use crate::analysis::groups::GroupReport;
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

/// Each device's groups by bytes in `format` (`title`: the file's name).
pub fn top(reports: &[GroupReport], title: &str, format: Format, units: Units) -> String {
    if format == Format::Json {
        return json(&reports);
    }
    let has_at = reports.iter().any(|r| r.at_bytes.is_some());
    let group_by = reports.first().map_or("site", |r| r.group_by);
    let moment = reports.first().map_or("peak".into(), |r| r.moment.clone());
    if format == Format::Csv {
        let mut t = Table::new(&[
            "device",
            group_by,
            "location",
            "moment",
            "at_bytes",
            "at_count",
            "end_bytes",
            "end_count",
        ]);
        for r in reports {
            for row in &r.rows {
                t.row(vec![
                    row.device.to_string(),
                    row.group.clone(),
                    row.location.clone().unwrap_or_default(),
                    r.moment.clone(),
                    or_empty(row.at_bytes),
                    or_empty(row.at_count),
                    row.end_bytes.to_string(),
                    row.end_count.to_string(),
                ]);
            }
        }
        return t.csv();
    }
    let what = match group_by {
        "site" => "allocation site",
        "user" => "line of the program's own code",
        "category" => "category",
        "annotation" => "annotation range open at allocation",
        "metadata" => "user metadata",
        "compile" => "compile context",
        _ => "rule",
    };
    let mut doc = Document::new(format);
    doc.title(&format!("{title}: bytes by {what}"));
    for r in reports {
        let mut head = format!(
            "Device {}: {} live at the end in {} allocations",
            r.device,
            format_bytes(r.end_bytes as f64, units),
            thousands(r.end_count as usize)
        );
        if let (Some(p), Some(c), Some(i)) = (r.at_bytes, r.at_count, r.at_event_index) {
            let at = if r.moment == "peak" {
                "at the peak".to_string()
            } else {
                format!("at {}", r.moment)
            };
            let _ = write!(
                head,
                "; {} {at} (after event {}{}) in {} allocations",
                format_bytes(p as f64, units),
                thousands(i),
                r.at_time_s
                    .map(|s| format!(", {s:.3}s"))
                    .unwrap_or_default(),
                thousands(c as usize)
            );
        }
        let plural = match group_by {
            "site" => "sites",
            "category" => "categories",
            _ => "groups",
        };
        let _ = write!(head, "; {} {plural}", thousands(r.groups));
        doc.heading(&head);
        let at_col = if moment == "peak" {
            ">at peak".to_string()
        } else {
            format!(">at {moment}")
        };
        let mut t = if has_at {
            Table::new(&[">#", &at_col, ">allocs", ">at end", ">allocs", group_by])
        } else {
            Table::new(&[">#", ">at end", ">allocs", group_by])
        };
        for (i, row) in r.rows.iter().enumerate() {
            let mut cells = vec![(i + 1).to_string()];
            if has_at {
                cells.push(format_bytes(row.at_bytes.unwrap_or(0) as f64, units));
                cells.push(thousands(row.at_count.unwrap_or(0) as usize));
            }
            cells.push(format_bytes(row.end_bytes as f64, units));
            cells.push(thousands(row.end_count as usize));
            cells.push(row.group.clone());
            t.row(cells);
        }
        doc.table(&t);
    }
    doc.text_note(match group_by {
        "site" => {
            "site: innermost Python frame kept by _memory_viz's frame filter (file:line:function), \
             else the autograd node or ATen op in the C++ frames (<backward MmBackward0>, \
             <aten::mm>); bytes as requested"
        }
        "user" => {
            "user: innermost frame of the program's own code (not torch, site-/dist-packages, \
             the standard library or memtrack's agent); bytes as requested"
        }
        "category" => {
            "category: from the allocating frames and when the allocation was freed (rules in \
             docs/snapshots.md); other: what no rule classifies (see --format json's example_stack); \
             bytes as requested"
        }
        _ => "bytes as requested",
    });
    doc.finish()
}
