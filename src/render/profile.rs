//! torch.profiler traces: `summary` (one trace, or several as ranks), `top` and `diff`, as
//! text, Markdown, CSV or JSON.

use std::fmt::Write;

use crate::analysis::profile_diff::ProfileDiff;
use crate::analysis::profile_summary::{Moment, ProfileSummary, Within};
use crate::model::{format_bytes, Units};

use super::document::Document;
use super::table::Table;
use super::{json, pct, signed, thousands, Format};

/// Python frames shown at a moment in text (innermost last); JSON has them all.
const PYTHON_FRAMES: usize = 6;

fn when(m: &Moment) -> String {
    format!("+{:.3} ms", m.at_ms)
}

/// The moment's context in one line: `in aten::mm (ProfilerStep#2 > forward)`.
fn context(m: &Moment) -> String {
    let mut s = String::new();
    match &m.op {
        Some(op) => {
            let _ = write!(s, "in {op}");
        }
        None => s.push_str("outside any op"),
    }
    if !m.annotations.is_empty() {
        let _ = write!(s, " ({})", m.annotations.join(" > "));
    }
    s
}

fn python_lines(doc: &mut Document, m: &Moment) {
    if m.python.is_empty() {
        return;
    }
    let skip = m.python.len().saturating_sub(PYTHON_FRAMES);
    let mut line = String::from("Python: ");
    if skip > 0 {
        let _ = write!(line, "({skip} outer frames) > ");
    }
    line.push_str(&m.python[skip..].join(" > "));
    doc.item(&line);
}

fn within_table(rows: &[Within], units: Units, what: &str) -> Table {
    let mut t = Table::new(&[
        what,
        "device",
        ">calls",
        ">allocated (self)",
        ">allocated (incl.)",
        ">net (self)",
        ">net (incl.)",
    ]);
    for w in rows {
        t.row(vec![
            w.name.clone(),
            w.device.clone(),
            if w.calls == 0 {
                String::new()
            } else {
                thousands(w.calls as usize)
            },
            format_bytes(w.self_allocated as f64, units),
            format_bytes(w.allocated as f64, units),
            signed(w.self_net as f64, units),
            signed(w.net as f64, units),
        ]);
    }
    t
}

fn within_csv(t: &mut Table, group: &str, file: Option<&str>, rows: &[Within]) {
    for w in rows {
        let mut r = Vec::new();
        if let Some(f) = file {
            r.push(f.to_string());
        }
        r.extend([
            group.to_string(),
            w.name.clone(),
            w.device.clone(),
            w.calls.to_string(),
            w.self_allocated.to_string(),
            w.allocated.to_string(),
            w.self_net.to_string(),
            w.net.to_string(),
        ]);
        t.row(r);
    }
}

const WITHIN_CSV: [&str; 8] = [
    "group",
    "name",
    "device",
    "calls",
    "self_allocated_bytes",
    "allocated_bytes",
    "self_net_bytes",
    "net_bytes",
];

/// One trace's `summary` in `format` (`title`: the file's name).
pub fn summary(s: &ProfileSummary, title: &str, format: Format, units: Units) -> String {
    match format {
        Format::Json => return json(s),
        Format::Csv => {
            // one table: the devices' peaks, then the ops (a `group` column tells them apart)
            let mut t = Table::new(&[
                "group",
                "name",
                "device",
                "calls",
                "bytes",
                "self_allocated_bytes",
                "allocated_bytes",
                "self_net_bytes",
                "net_bytes",
                "at_ms",
                "op",
                "annotations",
            ]);
            for d in &s.devices {
                for (group, m) in [
                    ("peak_allocated", &d.peak_allocated),
                    ("peak_reserved", &d.peak_reserved),
                ] {
                    t.row(vec![
                        group.into(),
                        String::new(),
                        d.device.clone(),
                        String::new(),
                        m.bytes.to_string(),
                        String::new(),
                        String::new(),
                        String::new(),
                        String::new(),
                        format!("{:.3}", m.at_ms),
                        m.op.clone().unwrap_or_default(),
                        m.annotations.join(" > "),
                    ]);
                }
            }
            for o in &s.ooms {
                t.row(vec![
                    "oom".into(),
                    String::new(),
                    o.device.clone(),
                    String::new(),
                    o.bytes.to_string(),
                    String::new(),
                    String::new(),
                    String::new(),
                    String::new(),
                    format!("{:.3}", o.at.at_ms),
                    o.at.op.clone().unwrap_or_default(),
                    o.at.annotations.join(" > "),
                ]);
            }
            for w in s.top_ops.iter().chain(&s.outside_ops) {
                t.row(vec![
                    "op".into(),
                    w.name.clone(),
                    w.device.clone(),
                    w.calls.to_string(),
                    String::new(),
                    w.self_allocated.to_string(),
                    w.allocated.to_string(),
                    w.self_net.to_string(),
                    w.net.to_string(),
                    String::new(),
                    String::new(),
                    String::new(),
                ]);
            }
            return t.csv();
        }
        _ => {}
    }
    let mut doc = Document::new(format);
    doc.title(&format!(
        "{title}: torch.profiler trace, {} events over {:.3} ms, {} device{}",
        thousands(s.trace_events as usize),
        s.duration_ms,
        s.devices.len(),
        if s.devices.len() == 1 { "" } else { "s" }
    ));
    let mut t = Table::new(&[
        "device",
        ">peak allocated",
        "at",
        ">peak reserved",
        "at",
        ">at start",
        ">at end",
        ">allocations",
        ">bytes allocated",
    ]);
    for d in &s.devices {
        t.row(vec![
            d.device.clone(),
            format_bytes(d.peak_allocated.bytes as f64, units),
            when(&d.peak_allocated),
            format_bytes(d.peak_reserved.bytes as f64, units),
            when(&d.peak_reserved),
            format_bytes(d.allocated_at_start as f64, units),
            format_bytes(d.allocated_at_end as f64, units),
            thousands(d.allocations as usize),
            format_bytes(d.bytes_allocated as f64, units),
        ]);
    }
    doc.table(&t);
    for d in &s.devices {
        doc.heading(&format!("Peak allocated on {}", d.device));
        let m = &d.peak_allocated;
        doc.item(&format!(
            "{} at {} {}",
            format_bytes(m.bytes as f64, units),
            when(m),
            context(m)
        ));
        python_lines(&mut doc, m);
        if d.allocated_at_start > 0 {
            doc.item(&format!(
                "{} were already allocated when the trace started: the profiler saw only what was allocated and freed while it ran",
                format_bytes(d.allocated_at_start as f64, units)
            ));
        }
    }
    if !s.ooms.is_empty() {
        doc.heading(&format!("Out of memory ({})", s.oom_count));
        for o in &s.ooms {
            doc.item(&format!(
                "{}: an allocation of {} failed at {} {} with {} allocated, {} reserved",
                o.device,
                format_bytes(o.bytes as f64, units),
                when(&o.at),
                context(&o.at),
                format_bytes(o.total_allocated as f64, units),
                format_bytes(o.total_reserved as f64, units)
            ));
        }
        if s.oom_count > s.ooms.len() as u64 {
            doc.item(&format!(
                "… and {} more (every one in `export`)",
                s.oom_count - s.ooms.len() as u64
            ));
        }
    }
    if !s.steps.is_empty() {
        doc.heading("Steps");
        let mut t = Table::new(&["step", ">start", ">duration", "peak allocated"]);
        for st in &s.steps {
            t.row(vec![
                st.name.clone(),
                format!("+{:.3} ms", st.start_ms),
                format!("{:.3} ms", st.duration_ms),
                st.peak_allocated
                    .iter()
                    .map(|(d, b)| format!("{d} {}", format_bytes(*b as f64, units)))
                    .collect::<Vec<_>>()
                    .join(", "),
            ]);
        }
        doc.table(&t);
    }
    doc.heading("Ops by bytes allocated within them");
    if s.top_ops.is_empty() && s.outside_ops.is_empty() {
        doc.para("No allocation happened inside an op.");
    } else {
        let rows: Vec<Within> = s.top_ops.iter().chain(&s.outside_ops).cloned().collect();
        doc.table(&within_table(&rows, units, "op"));
        doc.text_note(
            "self: while the op was the innermost op on the allocating thread; incl.: while it was open. net = allocated - freed (torch's key_averages memory columns).",
        );
    }
    doc.finish()
}

/// `top` of a trace: bytes allocated within ops, Python functions and annotations.
pub fn top(groups: &[(&str, &[Within])], title: &str, format: Format, units: Units) -> String {
    match format {
        Format::Json => {
            let map: serde_json::Map<String, serde_json::Value> = groups
                .iter()
                .map(|(g, rows)| {
                    (
                        g.to_string(),
                        serde_json::to_value(rows).expect("rows serialize"),
                    )
                })
                .collect();
            return json(&map);
        }
        Format::Csv => {
            let mut t = Table::new(&WITHIN_CSV);
            for (g, rows) in groups {
                within_csv(&mut t, g, None, rows);
            }
            return t.csv();
        }
        _ => {}
    }
    let mut doc = Document::new(format);
    doc.title(&format!("{title}: bytes allocated within each range"));
    for (g, rows) in groups {
        let (heading, col) = match *g {
            "ops" => ("By op (cpu_op)", "op"),
            "functions" => ("By Python function (with_stack=True)", "function"),
            _ => ("By annotation (user_annotation)", "annotation"),
        };
        doc.heading(heading);
        if rows.is_empty() {
            doc.para(match *g {
                "functions" => "No Python functions in this trace: profile with with_stack=True.",
                _ => "None.",
            });
        } else {
            doc.table(&within_table(rows, units, col));
        }
    }
    doc.text_note(
        "self: while the range was the innermost of its kind on the allocating thread; incl.: while it was open. net = allocated - freed.",
    );
    doc.finish()
}

/// Several traces (ranks, workers): one row per file and device.
pub fn ranks(each: &[(String, ProfileSummary)], format: Format, units: Units) -> String {
    if format == Format::Json {
        let v: Vec<serde_json::Value> = each
            .iter()
            .map(|(f, s)| serde_json::json!({ "file": f, "summary": s }))
            .collect();
        return json(&v);
    }
    let csv = format == Format::Csv;
    let mut t = Table::new(&[
        "file",
        "device",
        ">peak allocated",
        "at",
        ">peak reserved",
        "op at peak",
        ">OOMs",
    ]);
    for (f, s) in each {
        for d in &s.devices {
            let ooms = if s.oom_count > s.ooms.len() as u64 {
                s.oom_count as usize // past the listed ones: the file's count
            } else {
                s.ooms.iter().filter(|o| o.device == d.device).count()
            };
            t.row(vec![
                f.clone(),
                d.device.clone(),
                if csv {
                    d.peak_allocated.bytes.to_string()
                } else {
                    format_bytes(d.peak_allocated.bytes as f64, units)
                },
                if csv {
                    format!("{:.3}", d.peak_allocated.at_ms)
                } else {
                    when(&d.peak_allocated)
                },
                if csv {
                    d.peak_reserved.bytes.to_string()
                } else {
                    format_bytes(d.peak_reserved.bytes as f64, units)
                },
                d.peak_allocated.op.clone().unwrap_or_default(),
                ooms.to_string(),
            ]);
        }
    }
    if csv {
        return t.csv();
    }
    let mut doc = Document::new(format);
    doc.title(&format!("{} torch.profiler traces", each.len()));
    doc.table(&t);
    // the spread of each device label's peak across files
    let mut labels: Vec<&str> = each
        .iter()
        .flat_map(|(_, s)| s.devices.iter().map(|d| d.device.as_str()))
        .collect();
    labels.sort_unstable();
    labels.dedup();
    for l in labels {
        let peaks: Vec<(&str, i64)> = each
            .iter()
            .filter_map(|(f, s)| {
                s.devices
                    .iter()
                    .find(|d| d.device == l)
                    .map(|d| (f.as_str(), d.peak_allocated.bytes))
            })
            .collect();
        if peaks.len() < 2 {
            continue;
        }
        let max = peaks.iter().max_by_key(|p| p.1).expect("two or more");
        let min = peaks.iter().min_by_key(|p| p.1).expect("two or more");
        doc.item(&format!(
            "{l}: peaks from {} ({}) to {} ({}), a spread of {}",
            format_bytes(min.1 as f64, units),
            min.0,
            format_bytes(max.1 as f64, units),
            max.0,
            format_bytes((max.1 - min.1) as f64, units)
        ));
    }
    doc.finish()
}

/// `diff` of two traces.
pub fn diff(d: &ProfileDiff, title: &str, format: Format, units: Units) -> String {
    match format {
        Format::Json => return json(d),
        Format::Csv => {
            let mut t = Table::new(&[
                "group",
                "name",
                "device",
                "before_bytes",
                "after_bytes",
                "change_bytes",
            ]);
            for p in &d.devices {
                t.row(vec![
                    "peak_allocated".into(),
                    String::new(),
                    p.device.clone(),
                    p.before.to_string(),
                    p.after.to_string(),
                    (p.after - p.before).to_string(),
                ]);
            }
            for o in &d.ops {
                t.row(vec![
                    "op_self_allocated".into(),
                    o.name.clone(),
                    o.device.clone(),
                    o.before.to_string(),
                    o.after.to_string(),
                    (o.after - o.before).to_string(),
                ]);
            }
            return t.csv();
        }
        _ => {}
    }
    let mut doc = Document::new(format);
    doc.title(&format!("{title}: torch.profiler traces"));
    let mut t = Table::new(&["device", ">peak allocated A", ">B", ">change", ">%"]);
    for p in &d.devices {
        let change = (p.after - p.before) as f64;
        t.row(vec![
            p.device.clone(),
            format_bytes(p.before as f64, units),
            format_bytes(p.after as f64, units),
            signed(change, units),
            pct((p.before > 0).then(|| change / p.before as f64 * 100.0)),
        ]);
    }
    doc.table(&t);
    doc.heading("Ops whose allocations changed most (bytes allocated within them, self)");
    if d.ops.is_empty() {
        doc.para("No op allocated a different amount.");
    } else {
        let mut t = Table::new(&["op", "device", ">A", ">B", ">change"]);
        for o in &d.ops {
            t.row(vec![
                o.name.clone(),
                o.device.clone(),
                format_bytes(o.before as f64, units),
                format_bytes(o.after as f64, units),
                signed((o.after - o.before) as f64, units),
            ]);
        }
        doc.table(&t);
    }
    if let Some(g) = &d.gate {
        doc.para(&format!(
            "Gate: peak allocated {} → {} ({}), {}",
            format_bytes(g.before_bytes, units),
            format_bytes(g.after_bytes, units),
            signed(g.growth_bytes, units),
            if g.failed {
                "FAILED: grew past --fail-over"
            } else {
                "passed"
            }
        ));
    }
    doc.finish()
}
