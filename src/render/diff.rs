//! `diff`: two snapshots (metrics, segments, growth by allocation site) or two tracker stats
//! files (peaks, growth per op and per module), with the `--fail-over` gate; as text,
//! Markdown, CSV or JSON.

use crate::analysis::diff::{Gate, Metric, SnapshotDiff, StatsDiff, Threshold};
use crate::model::{format_bytes, Units};

use super::document::Document;
use super::table::{or_empty, Table};
use super::{json, signed, thousands, Format};

fn threshold_text(t: Threshold, units: Units) -> String {
    match t {
        Threshold::Bytes(v) => format_bytes(v as f64, units),
        Threshold::Percent(p) => format!("{p}%"),
    }
}

/// `ok: …` or `FAIL: …`: the gated metric before and after, its growth and the limit.
fn gate_line(g: &Gate, units: Units) -> String {
    format!(
        "{}: {} {} → {} ({}{}), limit {}",
        if g.failed { "FAIL" } else { "ok" },
        g.metric,
        format_bytes(g.before_bytes, units),
        format_bytes(g.after_bytes, units),
        signed(g.growth_bytes, units),
        g.growth_percent
            .map_or(String::new(), |p| format!(", {p:+.2}%")),
        threshold_text(g.threshold, units)
    )
}

/// Two snapshots compared, in `format` (`title`: what was compared).
pub fn snapshot_diff(d: &SnapshotDiff, title: &str, format: Format, units: Units) -> String {
    if format == Format::Json {
        return json(d);
    }
    if format == Format::Csv {
        let mut t = Table::new(&[
            d.group_by,
            "location",
            "end_before_bytes",
            "end_after_bytes",
            "end_growth_bytes",
            "peak_before_bytes",
            "peak_after_bytes",
            "peak_growth_bytes",
        ]);
        for s in &d.sites {
            t.row(vec![
                s.site.clone(),
                s.location.clone(),
                s.end_before_bytes.to_string(),
                s.end_after_bytes.to_string(),
                s.end_growth_bytes.to_string(),
                s.peak_before_bytes.to_string(),
                s.peak_after_bytes.to_string(),
                s.peak_growth_bytes.to_string(),
            ]);
        }
        return t.csv();
    }
    let mut doc = Document::new(format);
    doc.title(title);
    doc.table(&metric_table(&d.metrics, units));
    doc.heading("Segments (matched by address and size)");
    doc.para(&format!(
        "only before: {} ({}); only after: {} ({})",
        thousands(d.segments_only_before.len()),
        format_bytes(d.only_before_bytes as f64, units),
        thousands(d.segments_only_after.len()),
        format_bytes(d.only_after_bytes as f64, units)
    ));
    let (what, plural) = match d.group_by {
        "site" => ("allocation site", "sites"),
        "category" => ("category", "categories"),
        "user" => ("line of the program's own code", "lines"),
        "rules" => ("rule", "groups"),
        other => (other, "groups"),
    };
    // nothing changed: say so, not "0 of 0" over an empty table
    if d.sites.is_empty() {
        doc.heading(&format!("Growth by {what}"));
        doc.para(&format!("no {what} changed"));
        if let Some(g) = &d.gate {
            doc.heading("Gate");
            doc.para(&gate_line(g, units));
        }
        return doc.finish();
    }
    doc.heading(&format!(
        "Growth by {what} ({} of {} {plural} that changed)",
        d.sites.len(),
        d.sites_total
    ));
    let mut t = Table::new(&[
        ">end before",
        ">end after",
        ">end growth",
        ">peak growth",
        d.group_by,
    ]);
    for s in &d.sites {
        t.row(vec![
            format_bytes(s.end_before_bytes as f64, units),
            format_bytes(s.end_after_bytes as f64, units),
            signed(s.end_growth_bytes as f64, units),
            signed(s.peak_growth_bytes as f64, units),
            s.site.clone(),
        ]);
    }
    doc.table(&t);
    if let Some(g) = &d.gate {
        doc.heading("Gate");
        doc.para(&gate_line(g, units));
    }
    doc.finish()
}

/// Two tracker stats files compared, in `format` (`title`: what was compared).
pub fn stats_diff(d: &StatsDiff, title: &str, format: Format, units: Units) -> String {
    if format == Format::Json {
        return json(d);
    }
    if format == Format::Csv {
        // one table: op rows, then module rows; a column that does not apply is empty
        let mut t = Table::new(&[
            "kind",
            "name",
            "generated_before_bytes",
            "generated_after_bytes",
            "growth_bytes",
            "allocated_before_bytes",
            "allocated_after_bytes",
            "peak_before_bytes",
            "peak_after_bytes",
        ]);
        for g in &d.ops {
            t.row(vec![
                "op".into(),
                g.op.clone(),
                or_empty(g.generated_before_bytes),
                or_empty(g.generated_after_bytes),
                g.growth_bytes.to_string(),
                or_empty(g.allocated_before_bytes),
                or_empty(g.allocated_after_bytes),
                String::new(),
                String::new(),
            ]);
        }
        for m in &d.modules {
            t.row(vec![
                "module".into(),
                m.module.clone(),
                or_empty(m.generated_before_bytes),
                or_empty(m.generated_after_bytes),
                m.growth_bytes.to_string(),
                String::new(),
                String::new(),
                or_empty(m.peak_before_bytes),
                or_empty(m.peak_after_bytes),
            ]);
        }
        return t.csv();
    }
    let mut doc = Document::new(format);
    doc.title(&format!(
        "{title}: {} ops before, {} after",
        thousands(d.ops_before),
        thousands(d.ops_after)
    ));
    doc.table(&metric_table(&d.peaks, units));
    let o = |v: Option<f64>| v.map_or_else(|| "-".into(), |v| format_bytes(v, units));
    // a section where nothing changed says so, not "0 of 0" over an empty table
    if d.ops.is_empty() {
        doc.heading("Growth of memory generated per op");
        doc.para("no op changed the memory it generates");
    } else {
        doc.heading(&format!(
            "Growth of memory generated per op ({} of {} ops that changed; {} only before, {} only after)",
            d.ops.len(),
            d.ops_total,
            d.only_before,
            d.only_after
        ));
        let mut t = Table::new(&[">before", ">after", ">growth", "op"]);
        for g in &d.ops {
            t.row(vec![
                o(g.generated_before_bytes),
                o(g.generated_after_bytes),
                signed(g.growth_bytes, units),
                g.op.clone(),
            ]);
        }
        doc.table(&t);
    }
    if d.modules.is_empty() {
        doc.heading("Growth per module");
        doc.para("no module changed what its ops generate or its peak");
        if let Some(g) = &d.gate {
            doc.heading("Gate");
            doc.para(&gate_line(g, units));
        }
        return doc.finish();
    }
    doc.heading(&format!(
        "Growth per module: what its ops generate, and the peak allocated after them ({} of {} modules that changed)",
        d.modules.len(),
        d.modules_total
    ));
    let mut t = Table::new(&[
        ">before",
        ">after",
        ">growth",
        ">peak before",
        ">peak after",
        "module",
    ]);
    for m in &d.modules {
        t.row(vec![
            o(m.generated_before_bytes),
            o(m.generated_after_bytes),
            signed(m.growth_bytes, units),
            o(m.peak_before_bytes),
            o(m.peak_after_bytes),
            m.module.clone(),
        ]);
    }
    doc.table(&t);
    if let Some(g) = &d.gate {
        doc.heading("Gate");
        doc.para(&gate_line(g, units));
    }
    doc.finish()
}

/// Totals of A and B side by side (snapshots' and stats files' diffs alike).
fn metric_table(metrics: &[Metric], units: Units) -> Table {
    let mut t = Table::new(&["", ">before", ">after", ">growth"]);
    for m in metrics {
        t.row(vec![
            m.name.into(),
            format_bytes(m.before_bytes, units),
            format_bytes(m.after_bytes, units),
            signed(m.growth_bytes, units),
        ]);
    }
    t
}
