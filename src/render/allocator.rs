//! `allocator`: the caching allocator's counters, laid out as `torch.cuda.memory_summary()`
//! prints them (text), or as a table (Markdown, CSV) or JSON.

use crate::analysis::allocator::{AllocatorSummary, MetricRow};
use crate::model::{format_bytes, Units};

use super::document::Document;
use super::table::Table;
use super::{json, Format};

/// The counters in `format`: memory_summary's box as text, else one row per counter and pool.
pub fn allocator(
    s: &AllocatorSummary,
    title: &str,
    format: Format,
    units: Units,
    abbreviated: bool,
) -> String {
    match format {
        Format::Json => json(s),
        Format::Csv => table(s, None, abbreviated).csv(),
        Format::Text | Format::Markdown => {
            let mut doc = Document::new(format);
            doc.title(title);
            if doc.is_markdown() {
                doc.table(&table(s, Some(units), abbreviated));
                doc.close_up();
            } else {
                // PyTorch's own box, character for character
                doc.raw(&memory_summary(s, abbreviated));
            }
            doc.finish()
        }
    }
}

fn rows(m: &crate::analysis::allocator::Metric, abbreviated: bool) -> &[MetricRow] {
    if abbreviated {
        &m.rows[..1]
    } else {
        &m.rows
    }
}

fn table(s: &AllocatorSummary, units: Option<Units>, abbreviated: bool) -> Table {
    let mut t = Table::new(&[
        "metric",
        "pool",
        ">current",
        ">peak",
        ">total allocated",
        ">total freed",
    ]);
    for m in &s.metrics {
        for r in rows(m, abbreviated) {
            let cell = |v: Option<i64>| match (v, units) {
                (None, _) => String::new(),
                (Some(v), Some(u)) if m.bytes => format_bytes(v as f64, u),
                (Some(v), _) => v.to_string(),
            };
            t.row(vec![
                m.name.to_string(),
                r.pool.to_string(),
                cell(r.current),
                cell(r.peak),
                cell(r.allocated),
                cell(r.freed),
            ]);
        }
    }
    for (name, v) in [
        ("CUDA OOMs", s.num_ooms),
        ("cudaMalloc retries", s.num_alloc_retries),
    ] {
        t.row(vec![
            name.into(),
            String::new(),
            v.to_string(),
            String::new(),
            String::new(),
            String::new(),
        ]);
    }
    t
}

/// memory_summary's `_format_size`: the unit follows the `all` row's value (`pref`), stepping
/// up while it is at least 768 of the next unit down.
fn format_size(sz: i64, pref: i64) -> String {
    const PREFIXES: [&str; 6] = ["B  ", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let (mut sz, mut pref) = (sz, pref as f64);
    let mut prefix = PREFIXES[0];
    for p in &PREFIXES[1..] {
        if pref < 768.0 * 1024.0 {
            break;
        }
        prefix = p;
        sz = sz.div_euclid(1024);
        pref /= 1024.0;
    }
    format!("{sz:6} {prefix}")
}

/// memory_summary's `_format_count`.
fn format_count(cnt: i64, pref: i64) -> String {
    const PREFIXES: [&str; 3] = [" ", "K", "M"];
    let (mut cnt, mut pref) = (cnt, pref as f64);
    let mut prefix = PREFIXES[0];
    for p in &PREFIXES[1..] {
        if pref < 750.0 * 1000.0 {
            break;
        }
        prefix = p;
        cnt = cnt.div_euclid(1000);
        pref /= 1000.0;
    }
    format!("{cnt:7} {prefix} ")
}

/// The box `torch.cuda.memory_summary(device, abbreviated)` returns, character for character
/// (a counter the file lacks shows as `-`, where PyTorch would raise KeyError).
pub fn memory_summary(s: &AllocatorSummary, abbreviated: bool) -> String {
    let mut lines: Vec<String> = Vec::new();
    lines.push("=".repeat(75));
    lines.push(format!(
        " {:16} PyTorch CUDA memory summary, device ID {:<17} ",
        "", s.device
    ));
    lines.push("-".repeat(75));
    lines.push(format!(
        "  {:9} CUDA OOMs: {:<12} | {:6} cudaMalloc retries: {:<8}  ",
        "", s.num_ooms, "", s.num_alloc_retries
    ));
    lines.push("=".repeat(75));
    lines
        .push("        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  ".into());
    let pooled = s.metrics.iter().filter(|m| m.rows.len() == 3);
    let oversize = s.metrics.iter().filter(|m| m.rows.len() == 1);
    for m in pooled {
        lines.push("-".repeat(75));
        let first = &m.rows[0];
        for r in rows(m, abbreviated) {
            let name = match r.pool {
                "large_pool" => "      from large pool",
                "small_pool" => "      from small pool",
                _ => m.name,
            };
            let f = |v: Option<i64>, pref: Option<i64>| match v {
                None => format!("{:>6} {}", "-", if m.bytes { "   " } else { "  " }),
                Some(v) if m.bytes => format_size(v, pref.unwrap_or(v)),
                Some(v) => format_count(v, pref.unwrap_or(v)),
            };
            lines.push(format!(
                " {name:<21} | {} | {} | {} | {} ",
                f(r.current, first.current),
                f(r.peak, first.peak),
                f(r.allocated, first.allocated),
                f(r.freed, first.freed)
            ));
        }
    }
    for m in oversize {
        lines.push("-".repeat(75));
        let r = &m.rows[0];
        let f = |v: Option<i64>| match v {
            None => format!("{:>7} {}  ", "-", ""),
            Some(v) => format_count(v, v),
        };
        lines.push(format!(
            " {:<21} | {} | {} | {} | {} ",
            m.name,
            f(r.current),
            f(r.peak),
            f(r.allocated),
            f(r.freed)
        ));
    }
    lines.push("=".repeat(75));
    format!("|{}|\n", lines.join("|\n|"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_memory_summary_rounding() {
        assert_eq!(format_size(1000, 1000), "  1000 B  ");
        assert_eq!(format_size(786_432, 786_432), "   768 KiB");
        // the pool row follows the `all` row's unit
        assert_eq!(format_size(2048, 786_432), "     2 KiB");
        assert_eq!(format_count(750_000, 750_000), "    750 K ");
        assert_eq!(format_count(12, 12), "     12   ");
    }
}
