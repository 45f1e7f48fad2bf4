//! `summary` of tracker stats as text, Markdown, CSV or JSON.

use crate::analysis::summary::TrackerSummary;
use crate::model::{format_bytes, Units};

use super::table::Table;
use super::{json, thousands, Format};

pub fn tracker(s: &TrackerSummary, title: &str, format: Format, units: Units) -> String {
    match format {
        Format::Json => json(s),
        Format::Csv => top_table(s, units, true).csv(),
        Format::Text | Format::Markdown => {
            let md = format == Format::Markdown;
            let table = |t: &Table| if md { t.markdown() } else { t.text() };
            let heading = |h: &str| {
                if md {
                    format!("### {h}\n\n")
                } else {
                    format!("{h}\n")
                }
            };
            let mut out = String::new();
            if md {
                out.push_str(&format!("## {title}\n\n"));
            }
            out.push_str(&headline(s, if md { None } else { Some(title) }));
            out.push('\n');

            let mut peaks = Table::new(&["series", ">peak", ">op index", "op"]);
            for p in &s.peaks {
                peaks.row(vec![
                    p.series.name().into(),
                    format_bytes(p.bytes, units),
                    thousands(p.op_index),
                    p.op.clone(),
                ]);
            }
            out.push_str(&heading("Peaks"));
            out.push_str(&table(&peaks));

            if !s.phases.is_empty() {
                let mut t = Table::new(&[
                    "iter",
                    "phase",
                    ">ops",
                    ">peak allocated",
                    ">at op",
                    ">allocated change",
                ]);
                for p in &s.phases {
                    t.row(vec![
                        p.iteration.to_string(),
                        p.phase.into(),
                        format!("{}..{}", thousands(p.first_op), thousands(p.end_op)),
                        format_bytes(p.peak_allocated_bytes, units),
                        thousands(p.peak_op_index),
                        signed(p.allocated_change_bytes, units),
                    ]);
                }
                out.push('\n');
                out.push_str(&heading(
                    "Forward / backward (split at fw_start and fw_bw_boundary)",
                ));
                out.push_str(&table(&t));
            }

            out.push('\n');
            out.push_str(&heading(&format!(
                "Top {} ops that generate memory (allocated after the op minus after the op before)",
                s.top_ops.len()
            )));
            out.push_str(&table(&top_table(s, units, false)));
            out
        }
    }
}

fn headline(s: &TrackerSummary, title: Option<&str>) -> String {
    let mut line = String::new();
    if let Some(t) = title {
        line.push_str(t);
        line.push_str(": ");
    }
    line.push_str(&format!(
        "{} ops, {} alloc retries",
        thousands(s.ops),
        s.num_alloc_retries
    ));
    if let Some(r) = &s.record {
        line.push_str(&format!(", recorded on {}", r.backend));
        if let Some(d) = &r.device_name {
            line.push_str(&format!(" ({d})"));
        }
        if let (Some(rank), Some(w)) = (r.rank, r.world_size) {
            line.push_str(&format!(", rank {rank} of {w}"));
        }
        if let Some(e) = &r.exit {
            match (e.code, e.signal) {
                (_, Some(sig)) => line.push_str(&format!(", killed by signal {sig}")),
                (Some(c), _) if c != 0 => line.push_str(&format!(", exited with code {c}")),
                _ => {}
            }
            if e.oom {
                line.push_str(", ran out of memory");
            }
        }
    }
    if !s.markers.is_empty() {
        let m: Vec<String> = s
            .markers
            .iter()
            .map(|m| format!("{}={}", m.name, m.op_index))
            .collect();
        line.push_str(&format!("; markers {}", m.join(" ")));
    }
    line.push('\n');
    line
}

fn signed(bytes: f64, units: Units) -> String {
    if bytes > 0.0 {
        format!("+{}", format_bytes(bytes, units))
    } else {
        format_bytes(bytes, units)
    }
}

fn top_table(s: &TrackerSummary, units: Units, raw: bool) -> Table {
    if raw {
        let mut t = Table::new(&["rank", "op_index", "op", "generated_bytes"]);
        for o in &s.top_ops {
            t.row(vec![
                o.rank.to_string(),
                o.op_index.to_string(),
                o.op.clone(),
                o.generated_bytes.to_string(),
            ]);
        }
        return t;
    }
    let mut t = Table::new(&[">#", ">op index", "op", ">generated"]);
    for o in &s.top_ops {
        t.row(vec![
            o.rank.to_string(),
            thousands(o.op_index),
            o.op.clone(),
            signed(o.generated_bytes, units),
        ]);
    }
    t
}
