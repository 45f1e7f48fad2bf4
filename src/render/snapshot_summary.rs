//! `summary` of an allocator snapshot: per device the reserved, allocated, active and free
//! bytes, the segments by pool and size class, the trace's peaks and OOMs, the allocator's
//! settings and the settings `simulate` suggests; as text, Markdown, CSV or JSON.

use std::fmt::Write;

use crate::analysis::snapshot_summary::SnapshotSummary;
use crate::formats::snapshot::RECORD_HISTORY_CALL;
use crate::model::{format_bytes, Units};

use super::document::Document;
use super::table::{or_empty, Table};
use super::{json, pct, thousands, Format};

/// `+1.234 s` after the trace start, or `event 123` when there is no time.
fn when(index: usize, time_us: Option<i64>, t0: Option<i64>) -> String {
    match (time_us, t0) {
        (Some(t), Some(t0)) => format!(
            "event {} (+{:.3} s)",
            thousands(index),
            (t - t0) as f64 / 1e6
        ),
        _ => format!("event {}", thousands(index)),
    }
}

/// The pool id of the allocator's ordinary pool (`segment_pool_id`).
const DEFAULT_POOL: &str = "(0, 0)";

/// A pool as the table says it: `default` for the allocator's ordinary pool, `private (id)`
/// for one made by CUDA graph capture or `torch.cuda.MemPool` (JSON keeps the id).
fn pool_name(id: &str) -> String {
    if id == DEFAULT_POOL {
        "default".into()
    } else {
        format!("private {id}")
    }
}

/// A setting's value, short enough for a table row: `roundup_power2_divisions` (a map of
/// size in MiB to divisions, 16 entries) as runs of sizes with the same value, in size order.
fn short_setting(key: &str, value: String) -> String {
    if key != "roundup_power2_divisions" {
        return value;
    }
    let Ok(map) = serde_json::from_str::<std::collections::BTreeMap<String, i64>>(&value) else {
        return value;
    };
    let Ok(mut sizes) = map
        .iter()
        .map(|(k, v)| k.parse::<u64>().map(|k| (k, *v)))
        .collect::<Result<Vec<_>, _>>()
    else {
        return value;
    };
    sizes.sort_unstable();
    let mut runs: Vec<(u64, u64, i64)> = Vec::new();
    for (size, v) in sizes {
        match runs.last_mut() {
            Some(run) if run.2 == v => run.1 = size,
            _ => runs.push((size, size, v)),
        }
    }
    let runs: Vec<String> = runs
        .iter()
        .map(|&(a, b, v)| {
            if a == b {
                format!("{a} MiB: {v}")
            } else {
                format!("{a}-{b} MiB: {v}")
            }
        })
        .collect();
    format!("{} (size: divisions)", runs.join(", "))
}

// ---- summary ----

/// An allocator snapshot's `summary` in `format` (`title`: the file's name).
/// `replay`: the snapshot as `memtrack simulate` is told to read it in a suggestion; None
/// when it came through a pipe, which cannot be read again.
pub fn summary(
    s: &SnapshotSummary,
    title: &str,
    replay: Option<&str>,
    format: Format,
    units: Units,
) -> String {
    match format {
        Format::Json => return json(s),
        Format::Csv => {
            let mut t = Table::new(&[
                "device",
                "segments",
                "blocks",
                "reserved_bytes",
                "allocated_bytes",
                "active_bytes",
                "requested_bytes",
                "free_bytes",
                "pending_free_bytes",
                "internal_fragmentation_bytes",
                "external_fragmentation",
                "largest_free_block_bytes",
                "peak_allocated_bytes",
                "peak_reserved_bytes",
                "trace_entries",
                "ooms",
                "leak_suspects",
            ]);
            for d in &s.devices {
                t.row(vec![
                    d.device.to_string(),
                    d.segments.to_string(),
                    d.blocks.to_string(),
                    d.reserved_bytes.to_string(),
                    d.allocated_bytes.to_string(),
                    d.active_bytes.to_string(),
                    d.requested_bytes.to_string(),
                    d.free_bytes.to_string(),
                    d.pending_free_bytes.to_string(),
                    d.internal_fragmentation_bytes.to_string(),
                    d.external_fragmentation
                        .map_or(String::new(), |f| format!("{f:.6}")),
                    d.largest_free_block_bytes.to_string(),
                    or_empty(d.peak_allocated.map(|p| p.bytes)),
                    or_empty(d.peak_reserved.map(|p| p.bytes)),
                    d.trace_entries.to_string(),
                    d.ooms.len().to_string(),
                    or_empty(d.leak_suspects.as_ref().map(|l| l.suspects.len())),
                ]);
            }
            return t.csv();
        }
        _ => {}
    }
    let mut doc = Document::new(format);
    let l = &s.layout;
    let mut head = format!(
        "{title}: allocator snapshot, {} device{}",
        s.devices.len(),
        if s.devices.len() == 1 { "" } else { "s" }
    );
    let mut notes = Vec::new();
    if l.bare_segment_list {
        notes.push("segments only (memory_snapshot() list)");
    }
    if l.legacy_block_history {
        notes.push("legacy block history (torch 2.0 era)");
    }
    if !l.has_time_us && s.devices.iter().any(|d| d.trace_entries > 0) {
        notes.push("trace without time_us");
    }
    if !notes.is_empty() {
        let _ = write!(head, " [{}]", notes.join("; "));
    }
    doc.title(&head);
    if s.allocations_have_stacks == Some(false) {
        doc.para(&super::no_stacks_note(
            "`memtrack top` shows them as <non-python>",
        ));
    }
    for d in &s.devices {
        doc.heading(&format!("Device {}", d.device));
        let mut t = Table::new(&["", ">bytes", "note"]);
        let row = |t: &mut Table, k: &str, v: u64, n: String| {
            t.row(vec![k.into(), format_bytes(v as f64, units), n]);
        };
        row(
            &mut t,
            "reserved",
            d.reserved_bytes,
            format!(
                "{} segments, {} blocks",
                thousands(d.segments),
                thousands(d.blocks)
            ),
        );
        row(
            &mut t,
            "allocated",
            d.allocated_bytes,
            "blocks used by tensors".into(),
        );
        row(
            &mut t,
            "active",
            d.active_bytes,
            format!(
                "allocated + {} pending free",
                format_bytes(d.pending_free_bytes as f64, units)
            ),
        );
        row(
            &mut t,
            "requested",
            d.requested_bytes,
            "what the program asked for".into(),
        );
        row(
            &mut t,
            "free",
            d.free_bytes,
            format!(
                "inactive blocks; largest {}",
                format_bytes(d.largest_free_block_bytes as f64, units)
            ),
        );
        row(
            &mut t,
            "internal fragmentation",
            d.internal_fragmentation_bytes,
            format!(
                "active - requested ({} of active)",
                pct((d.active_bytes > 0).then(|| {
                    d.internal_fragmentation_bytes as f64 / d.active_bytes as f64 * 100.0
                }))
            ),
        );
        t.row(vec![
            "external fragmentation".into(),
            pct(d.external_fragmentation.map(|f| f * 100.0)),
            "1 - largest free block / free".into(),
        ]);
        if let Some(p) = d.peak_allocated {
            t.row(vec![
                "peak allocated (trace)".into(),
                format_bytes(p.bytes as f64, units),
                format!("after {}", when(p.index, p.time_us, d.trace_start_time_us)),
            ]);
        }
        if let Some(p) = d.peak_reserved {
            t.row(vec![
                "peak reserved (trace)".into(),
                format_bytes(p.bytes as f64, units),
                format!("after {}", when(p.index, p.time_us, d.trace_start_time_us)),
            ]);
        }
        doc.table(&t);
        // where the counters came from is worth a line only when it is not simply the file
        let counters = match d.counters {
            "file" => None,
            "derived" => Some("counters derived from blocks (the file has none)"),
            _ => Some("counters from the file where present, else derived from blocks"),
        };
        let counters = match (counters, d.counter_mismatches) {
            (c, 0) => c.map(str::to_string),
            (c, n) => Some(format!(
                "{}{n} segment(s) whose counters disagree with their blocks",
                c.map_or(String::new(), |c| format!("{c}; "))
            )),
        };
        if let Some(counters) = counters {
            if doc.is_markdown() {
                doc.para(&format!("_{counters}_"));
            } else {
                doc.para(&counters);
            }
        }

        doc.heading("Segments by pool and size class");
        let mut t = Table::new(&[
            "pool",
            "class",
            ">segments",
            ">reserved",
            ">allocated",
            ">active",
            ">free",
            ">largest free",
        ]);
        for p in &d.pools {
            t.row(vec![
                pool_name(&p.pool),
                if p.size_class_derived {
                    format!("{}*", p.size_class.name())
                } else {
                    p.size_class.name().into()
                },
                thousands(p.segments),
                format_bytes(p.reserved_bytes as f64, units),
                format_bytes(p.allocated_bytes as f64, units),
                format_bytes(p.active_bytes as f64, units),
                format_bytes(p.free_bytes as f64, units),
                format_bytes(p.largest_free_block_bytes as f64, units),
            ]);
        }
        doc.table(&t);
        if d.pools.iter().any(|p| p.pool != DEFAULT_POOL) {
            doc.para(
                "private (segment_pool_id): a CUDA graph's or torch.cuda.MemPool's own pool; \
                 nothing else allocates from it",
            );
        }
        if d.pools.iter().any(|p| p.size_class_derived) {
            doc.para("* size class derived from the segment size (the file has no segment_type)");
        }

        if d.trace_entries > 0 {
            let acts: Vec<String> = d
                .actions
                .iter()
                .map(|a| format!("{} {}", a.action, thousands(a.count)))
                .collect();
            doc.heading(&format!(
                "Trace: {} entries ({})",
                thousands(d.trace_entries),
                acts.join(", ")
            ));
        } else {
            doc.heading(&format!("Trace: none (record with {RECORD_HISTORY_CALL})"));
        }
        if let (Some(a), Some(r)) = (d.initial_allocated_bytes, d.initial_reserved_bytes) {
            if a > 0 {
                doc.para(&format!(
                    "The trace starts with {} already allocated ({} reserved) that it never saw \
                     allocated: recording began after they were made, or max_entries was reached \
                     and the oldest events were dropped. To see where they came from, start \
                     torch.cuda.memory._record_memory_history() before they are allocated, with a \
                     larger max_entries (its default keeps every event).",
                    format_bytes(a as f64, units),
                    format_bytes(r as f64, units)
                ));
            }
        }
        if let Some(short) = &d.trace_shortfall {
            let gaps: Vec<String> = [
                ("allocated", short.allocated_bytes),
                ("reserved", short.reserved_bytes),
            ]
            .iter()
            .filter(|(_, v)| *v > 0)
            .map(|(k, v)| format!("{k} by {}", format_bytes(*v as f64, units)))
            .collect();
            doc.para(&format!(
                "warning: the trace is inconsistent with the final segments: it frees more than \
                 it allocated and they hold ({}), so the bytes before its first event are unknown",
                gaps.join(", ")
            ));
        }
        if d.ooms.is_empty() {
            if d.trace_entries > 0 {
                doc.para("No out-of-memory events in the trace.");
            }
        } else {
            doc.heading(&format!("Out-of-memory events: {}", d.ooms.len()));
            let mut t = Table::new(&[
                "when",
                ">requested",
                ">free in CUDA",
                ">allocated",
                ">reserved",
            ]);
            for o in &d.ooms {
                t.row(vec![
                    when(o.index, o.time_us, d.trace_start_time_us),
                    format_bytes(o.requested_bytes as f64, units),
                    o.device_free_bytes
                        .map_or_else(|| "-".into(), |f| format_bytes(f as f64, units)),
                    format_bytes(o.allocated_bytes as f64, units),
                    format_bytes(o.reserved_bytes as f64, units),
                ]);
            }
            doc.table(&t);
        }
        if !d.annotation_usage.is_empty() {
            doc.heading(
                "Usage by annotation (allocated when each range started and ended; the trace's \
                 external_annotations)",
            );
            let mut t = Table::new(&[">at", "annotation", "stage", ">allocated"]);
            for u in &d.annotation_usage {
                t.row(vec![
                    format!("{:.6}s", u.seconds),
                    u.name.clone(),
                    u.stage.to_lowercase(),
                    u.allocated_bytes
                        .map_or_else(|| "-".into(), |b| format_bytes(b as f64, units)),
                ]);
            }
            doc.table(&t);
        }
        if let Some(l) = &d.leak_suspects {
            if l.suspects.is_empty() {
                doc.para(&format!(
                    "No leak suspects: no site kept allocations from every one of the {} steps \
                     after the first (steps end at Optimizer.step).",
                    l.steps
                ));
            } else {
                doc.heading(&format!(
                    "Leak suspects: sites whose allocations alive at the end were made in every \
                     one of the {} steps after the first (steps end at Optimizer.step)",
                    l.steps
                ));
                let mut t = Table::new(&[">per step", ">allocations", "site"]);
                for x in &l.suspects {
                    t.row(vec![
                        format_bytes(x.bytes_per_step, units),
                        thousands(x.allocations),
                        x.site.clone(),
                    ]);
                }
                doc.table(&t);
            }
        }
    }
    match &s.allocator_settings {
        Some(settings) => {
            doc.heading("Allocator settings");
            let mut t = Table::new(&["setting", "value"]);
            for (k, v) in settings {
                let v = match v {
                    serde_json::Value::String(s) if s.is_empty() => "''".to_string(),
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                t.row(vec![k.clone(), short_setting(k, v)]);
            }
            doc.table(&t);
        }
        None => {
            doc.heading("Allocator settings: not in this file (older PyTorch)");
        }
    }
    for g in &s.simulate_suggestions {
        let change = if g.ooms < g.own_ooms {
            format!("{} OOM(s) instead of {}", g.ooms, g.own_ooms)
        } else {
            format!(
                "peak reserved {} instead of {}",
                format_bytes(g.peak_reserved_bytes as f64, units),
                format_bytes(g.own_peak_reserved_bytes as f64, units)
            )
        };
        doc.heading(&format!(
            "Try: memtrack simulate {} --set {}   (device {}, replayed: {change})",
            replay.unwrap_or("SNAPSHOT"),
            g.settings,
            g.device
        ));
    }
    if replay.is_none() && !s.simulate_suggestions.is_empty() {
        doc.para(
            "(the snapshot came through a pipe, which is read once: save it to a file, and \
             simulate that)",
        );
    }
    doc.finish()
}
