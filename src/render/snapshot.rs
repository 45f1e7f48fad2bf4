//! Allocator-snapshot reports as text, Markdown, CSV or JSON: summary, segments, top, trace,
//! diff.

use std::cell::RefCell;
use std::fmt::Write;

use crate::analysis::diff::{SnapshotDiff, StatsDiff, Threshold};
use crate::analysis::memviz::push_size;
use crate::analysis::segments::SegmentMap;
use crate::analysis::sites::SiteReport;
use crate::analysis::snapshot_summary::SnapshotSummary;
use crate::analysis::trace_listing::{name_of, push_name, DeviceListing, Line, Place, Ref};
use crate::model::snapshot::{EventAux, Snapshot, TraceEvent};
use crate::model::trace::{serialize_events, TraceEvents};
use crate::model::{format_bytes, Units};

use super::table::Table;
use super::{json, thousands, Format};

struct Doc {
    md: bool,
    out: String,
}

impl Doc {
    fn new(format: Format) -> Doc {
        Doc {
            md: format == Format::Markdown,
            out: String::new(),
        }
    }

    fn title(&mut self, t: &str) {
        if self.md {
            let _ = writeln!(self.out, "## {t}\n");
        } else {
            let _ = writeln!(self.out, "{t}");
        }
    }

    fn heading(&mut self, h: &str) {
        if !self.out.is_empty() && !self.out.ends_with("\n\n") {
            self.out.push('\n');
        }
        if self.md {
            let _ = writeln!(self.out, "### {h}\n");
        } else {
            let _ = writeln!(self.out, "{h}");
        }
    }

    fn para(&mut self, p: &str) {
        self.out.push_str(p);
        self.out.push('\n');
        if self.md {
            self.out.push('\n');
        }
    }

    fn table(&mut self, t: &Table) {
        if self.md {
            self.out.push_str(&t.markdown());
            self.out.push('\n');
        } else {
            self.out.push_str(&t.text());
        }
    }
}

fn b(bytes: f64, units: Units) -> String {
    format_bytes(bytes, units)
}

fn signed(bytes: f64, units: Units) -> String {
    if bytes > 0.0 {
        format!("+{}", format_bytes(bytes, units))
    } else {
        format_bytes(bytes, units)
    }
}

fn pct(p: Option<f64>) -> String {
    p.map_or_else(|| "-".into(), |p| format!("{p:.1}%"))
}

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

// ---- summary ----

pub fn summary(s: &SnapshotSummary, title: &str, format: Format, units: Units) -> String {
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
                    d.peak_allocated
                        .map_or(String::new(), |p| p.bytes.to_string()),
                    d.peak_reserved
                        .map_or(String::new(), |p| p.bytes.to_string()),
                    d.trace_entries.to_string(),
                    d.ooms.len().to_string(),
                ]);
            }
            return t.csv();
        }
        _ => {}
    }
    let mut doc = Doc::new(format);
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
    for d in &s.devices {
        doc.heading(&format!("Device {}", d.device));
        let mut t = Table::new(&["", ">bytes", "note"]);
        let row = |t: &mut Table, k: &str, v: u64, n: String| {
            t.row(vec![k.into(), b(v as f64, units), n]);
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
                b(d.pending_free_bytes as f64, units)
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
                b(d.largest_free_block_bytes as f64, units)
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
                b(p.bytes as f64, units),
                format!("after {}", when(p.index, p.time_us, d.trace_start_time_us)),
            ]);
        }
        if let Some(p) = d.peak_reserved {
            t.row(vec![
                "peak reserved (trace)".into(),
                b(p.bytes as f64, units),
                format!("after {}", when(p.index, p.time_us, d.trace_start_time_us)),
            ]);
        }
        doc.table(&t);
        let counters = match d.counters {
            "file" => "counters from the file".to_string(),
            "derived" => "counters derived from blocks (the file has none)".to_string(),
            _ => "counters from the file where present, else derived from blocks".to_string(),
        };
        if d.counter_mismatches > 0 {
            doc.para(&format!(
                "{counters}; {} segment(s) whose counters disagree with their blocks",
                d.counter_mismatches
            ));
        } else if !doc.md {
            doc.para(&counters);
        } else {
            doc.para(&format!("_{counters}_"));
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
                p.pool.clone(),
                if p.size_class_derived {
                    format!("{}*", p.size_class.name())
                } else {
                    p.size_class.name().into()
                },
                thousands(p.segments),
                b(p.reserved_bytes as f64, units),
                b(p.allocated_bytes as f64, units),
                b(p.active_bytes as f64, units),
                b(p.free_bytes as f64, units),
                b(p.largest_free_block_bytes as f64, units),
            ]);
        }
        doc.table(&t);
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
            doc.heading("Trace: none (record with torch.cuda.memory._record_memory_history())");
        }
        if let Some(short) = &d.trace_shortfall {
            let gaps: Vec<String> = [
                ("allocated", short.allocated_bytes),
                ("reserved", short.reserved_bytes),
            ]
            .iter()
            .filter(|(_, v)| *v > 0)
            .map(|(k, v)| format!("{k} by {}", b(*v as f64, units)))
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
                    b(o.requested_bytes as f64, units),
                    o.device_free_bytes
                        .map_or_else(|| "-".into(), |f| b(f as f64, units)),
                    b(o.allocated_bytes as f64, units),
                    b(o.reserved_bytes as f64, units),
                ]);
            }
            doc.table(&t);
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
                t.row(vec![k.clone(), v]);
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
                b(g.peak_reserved_bytes as f64, units),
                b(g.own_peak_reserved_bytes as f64, units)
            )
        };
        doc.heading(&format!(
            "Try: memtrack simulate {title} --set {}   (device {}, replayed: {change})",
            g.settings, g.device
        ));
    }
    doc.out
}

// ---- segments ----

pub fn segments(m: &SegmentMap, title: &str, format: Format, units: Units) -> String {
    if format == Format::Json {
        return json(m);
    }
    let raw = format == Format::Csv;
    let mut t = if raw {
        Table::new(&[
            "index",
            "device",
            "address",
            "total_size",
            "stream",
            "pool",
            "size_class",
            "blocks",
            "allocated_bytes",
            "free_external_bytes",
            "free_internal_bytes",
            "largest_free_block_bytes",
            "map",
        ])
    } else {
        Table::new(&[
            ">#",
            ">dev",
            "address",
            ">size",
            "pool",
            "class",
            ">blocks",
            ">allocated",
            ">free",
            ">internal",
            ">largest free",
            "map (1 char = 20 MiB)",
        ])
    };
    for r in &m.segments {
        if raw {
            t.row(vec![
                r.index.to_string(),
                r.device.to_string(),
                r.address.to_string(),
                r.total_size.to_string(),
                r.stream.to_string(),
                r.pool.clone(),
                r.size_class.into(),
                r.blocks.to_string(),
                r.allocated_bytes.to_string(),
                r.free_external_bytes.to_string(),
                r.free_internal_bytes.to_string(),
                r.largest_free_block_bytes.to_string(),
                r.map.clone(),
            ]);
        } else {
            t.row(vec![
                r.index.to_string(),
                r.device.to_string(),
                format!("0x{:x}", r.address),
                b(r.total_size as f64, units),
                r.pool.clone(),
                r.size_class.into(),
                thousands(r.blocks),
                b(r.allocated_bytes as f64, units),
                b(
                    (r.free_external_bytes + r.free_internal_bytes) as f64,
                    units,
                ),
                pct(r.internal_percent),
                b(r.largest_free_block_bytes as f64, units),
                format!("[{}]", r.map),
            ]);
        }
    }
    if raw {
        return t.csv();
    }
    let mut doc = Doc::new(format);
    doc.title(&format!(
        "{title}: {} segments, ordered by size as _memory_viz stats orders them",
        thousands(m.totals.segments)
    ));
    doc.table(&t);
    let tt = &m.totals;
    let mut s = Table::new(&["", ">bytes", "note"]);
    s.row(vec![
        "segments".into(),
        thousands(tt.segments),
        String::new(),
    ]);
    s.row(vec![
        "total_reserved".into(),
        b(tt.reserved_bytes as f64, units),
        String::new(),
    ]);
    s.row(vec![
        "total_allocated".into(),
        b(tt.allocated_bytes as f64, units),
        "_memory_viz's allocated: requested bytes of active_allocated blocks".into(),
    ]);
    s.row(vec![
        "total_free".into(),
        b(tt.free_bytes as f64, units),
        format!(
            "_memory_viz's free: {} internal (rounding), {} external",
            pct(tt.internal_percent),
            b(tt.free_external_bytes as f64, units)
        ),
    ]);
    let a = &tt.allocator;
    for (name, bytes, note) in [
        (
            "allocated",
            a.allocated_bytes,
            "as summary: blocks used by tensors, rounded sizes",
        ),
        (
            "pending free",
            a.pending_free_bytes,
            "as summary: freed, waiting on a stream",
        ),
        ("free", a.free_bytes, "as summary: inactive blocks"),
    ] {
        s.row(vec![name.into(), b(bytes as f64, units), note.into()]);
    }
    doc.heading("Totals");
    doc.table(&s);
    if !doc.md {
        doc.out.push_str(
            "\nmap: a-z a 20 MiB page filled by one block; 0-9 partly filled by several (9 = 90%); \
             * full with several; space free\n",
        );
    }
    doc.out
}

// ---- top ----

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
                    row.peak_bytes.map_or(String::new(), |v| v.to_string()),
                    row.peak_count.map_or(String::new(), |v| v.to_string()),
                ]);
            }
        }
        return t.csv();
    }
    let mut doc = Doc::new(format);
    doc.title(&format!("{title}: bytes by allocation site"));
    for r in reports {
        let mut head = format!(
            "Device {}: {} live at the end in {} allocations",
            r.device,
            b(r.end_bytes as f64, units),
            thousands(r.end_count as usize)
        );
        if let (Some(p), Some(c), Some(i)) = (r.peak_bytes, r.peak_count, r.peak_event_index) {
            let _ = write!(
                head,
                "; {} at the peak (after event {}) in {} allocations",
                b(p as f64, units),
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
                cells.push(b(row.peak_bytes.unwrap_or(0) as f64, units));
                cells.push(thousands(row.peak_count.unwrap_or(0) as usize));
            }
            cells.push(b(row.end_bytes as f64, units));
            cells.push(thousands(row.end_count as usize));
            cells.push(row.site.clone());
            t.row(cells);
        }
        doc.table(&t);
    }
    if !doc.md {
        doc.out.push_str(
            "\nsite: innermost Python frame kept by _memory_viz's frame filter (file:line:function); \
             bytes as requested\n",
        );
    }
    doc.out
}

// ---- trace ----

fn push_ref(out: &mut String, r: Ref) {
    match r {
        Ref::Name(n) => push_name(out, n),
        Ref::Addr(a) => {
            let _ = write!(out, "{a}");
        }
    }
}

/// `{before}{target}{after}{size}` and a newline.
fn push_ref_line(out: &mut String, before: &str, target: Ref, after: &str, size: u64) {
    out.push_str(before);
    push_ref(out, target);
    out.push_str(after);
    push_size(out, size as i64);
    out.push('\n');
}

/// One line of the listing (`line` of event `e`, which carries `aux`), with its newline.
fn push_line(out: &mut String, e: &TraceEvent, aux: Option<&EventAux>, line: Line) {
    match line {
        Line::Alloc {
            name,
            place,
            offset,
            size,
        } => {
            push_name(out, name);
            out.push_str(" = ");
            match place {
                Place::Named(s) => push_name(out, s),
                Place::Final(i) => {
                    let _ = write!(out, "seg_{i}");
                }
                Place::Mem => out.push_str("MEM"),
            }
            let _ = write!(out, "[{offset}:");
            push_size(out, size as i64);
            out.push_str("]\n");
        }
        Line::FreeRequested { target, size } => push_ref_line(out, "del ", target, " # ", size),
        Line::FreeCompleted { target, size } => {
            push_ref_line(out, "# free completed for ", target, " ", size)
        }
        Line::SegmentAlloc { name, addr, size } => {
            let _ = write!(out, "{} = cudaMalloc({addr}, ", name_of(name));
            push_size(out, size as i64);
            out.push_str(")\n");
        }
        Line::SegmentMap { name, addr, size } => {
            let _ = write!(out, "{} = cuMemMap({addr}, ", name_of(name));
            push_size(out, size as i64);
            out.push_str(")\n");
        }
        Line::SegmentFree { target, size } => push_ref_line(out, "cudaFree(", target, ") # ", size),
        Line::SegmentUnmap { target, size } => {
            push_ref_line(out, "cuMemUnmap(", target, ") # ", size)
        }
        Line::Oom { size, device_free } => {
            out.push_str("raise OutOfMemoryError # ");
            push_size(out, size as i64);
            out.push_str(" requested, ");
            match device_free {
                Some(f) => push_size(out, f as i64),
                None => out.push('?'),
            }
            out.push_str(" free in CUDA\n");
        }
        Line::Annotate { target } => {
            out.push_str("# annotate ");
            push_ref(out, target);
            out.push_str(": ");
            let meta = aux.and_then(|a| a.user_metadata.as_deref()).unwrap_or("");
            out.push_str(meta);
            out.push('\n');
        }
        Line::Snapshot { size } => {
            out.push_str("# snapshot taken (");
            push_size(out, size as i64);
            out.push_str(")\n");
        }
        Line::Other => {
            let name = aux
                .and_then(|a| a.action_name.as_deref())
                .unwrap_or("unknown");
            let _ = write!(out, "# {name} addr={} size=", e.addr);
            push_size(out, e.size as i64);
            out.push('\n');
        }
    }
}

/// The listing as text, written to `w` a chunk at a time: 10M events make gigabytes of text,
/// which never need to be in memory at once.
pub fn write_trace_text(
    w: &mut dyn std::io::Write,
    snap: &Snapshot,
    listings: &[DeviceListing],
    events: &mut dyn TraceEvents,
) -> std::io::Result<()> {
    const CHUNK: usize = 1 << 16;
    let mut out = String::with_capacity(CHUNK + 4096);
    for l in listings {
        let _ = writeln!(out, "Device {} ----------------", l.device);
        let _ = writeln!(out, "{} entries", l.totals.entries);
        let mut namer = l.namer(snap);
        events.visit(l.device, &mut |_, e, _, aux| {
            if out.len() >= CHUNK {
                w.write_all(out.as_bytes())?;
                out.clear();
            }
            push_line(&mut out, e, aux, namer.line(e, aux));
            Ok(())
        })?;
        out.push_str("TOTAL MEM: ");
        push_size(&mut out, l.totals.net_bytes);
        out.push('\n');
    }
    w.write_all(out.as_bytes())
}

#[derive(serde::Serialize)]
struct TraceJsonDevice<'a, 'e> {
    device: u32,
    totals: &'a crate::analysis::trace_listing::Totals,
    events: TraceJsonEvents<'a, 'e>,
}

/// A device's events with their names, serialized as they are read back (`events`: shared by
/// the devices, one at a time).
struct TraceJsonEvents<'a, 'e> {
    snap: &'a Snapshot,
    listing: &'a DeviceListing,
    events: &'a RefCell<&'e mut dyn TraceEvents>,
}

impl serde::Serialize for TraceJsonEvents<'_, '_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let l = self.listing;
        let mut events = self.events.borrow_mut();
        let mut namer = l.namer(self.snap);
        serialize_events(s, *events, l.device, |seq, i, e, _, aux| {
            let line = namer.line(e, aux);
            let name = match line {
                Line::Alloc { name, .. }
                | Line::SegmentAlloc { name, .. }
                | Line::SegmentMap { name, .. } => Some(name_of(name)),
                Line::FreeRequested { target, .. }
                | Line::FreeCompleted { target, .. }
                | Line::SegmentFree { target, .. }
                | Line::SegmentUnmap { target, .. }
                | Line::Annotate { target } => match target {
                    Ref::Name(n) => Some(name_of(n)),
                    Ref::Addr(_) => None,
                },
                _ => None,
            };
            let segment = match line {
                Line::Alloc { place, offset, .. } => Some((
                    match place {
                        Place::Named(s) => name_of(s),
                        Place::Final(i) => format!("seg_{i}"),
                        Place::Mem => "MEM".into(),
                    },
                    offset,
                )),
                _ => None,
            };
            #[derive(serde::Serialize)]
            struct Ev<'a> {
                index: usize,
                action: &'static str,
                addr: u64,
                size: u64,
                time_us: Option<i64>,
                name: Option<String>,
                segment: Option<&'a str>,
                offset: Option<u64>,
            }
            seq.serialize_element(&Ev {
                index: i,
                action: e.action.name(),
                addr: e.addr,
                size: e.size,
                time_us: e.time(),
                name,
                segment: segment.as_ref().map(|s| s.0.as_str()),
                offset: segment.as_ref().map(|s| s.1),
            })
        })
    }
}

/// The listing in `format`, written to `w` (Markdown, whose columns are aligned, made whole;
/// the others as they are made), the events read from `events`.
pub fn write_trace(
    w: &mut dyn std::io::Write,
    snap: &Snapshot,
    listings: &[DeviceListing],
    events: &mut dyn TraceEvents,
    format: Format,
) -> std::io::Result<()> {
    match format {
        Format::Text => write_trace_text(w, snap, listings, events),
        Format::Json => {
            let events = RefCell::new(events);
            let devs: Vec<TraceJsonDevice> = listings
                .iter()
                .map(|l| TraceJsonDevice {
                    device: l.device,
                    totals: &l.totals,
                    events: TraceJsonEvents {
                        snap,
                        listing: l,
                        events: &events,
                    },
                })
                .collect();
            #[derive(serde::Serialize)]
            struct Out<'a, 'e> {
                kind: &'static str,
                devices: Vec<TraceJsonDevice<'a, 'e>>,
            }
            serde_json::to_writer(
                &mut *w,
                &Out {
                    kind: "trace",
                    devices: devs,
                },
            )?;
            w.write_all(b"\n")
        }
        Format::Csv | Format::Markdown => {
            // a row an event: the columns, then its line of the listing
            let headers = [
                ">device", ">index", "action", ">addr", ">size", ">time_us", "line",
            ];
            let mut t = Table::new(&headers);
            let csv = format == Format::Csv;
            const CHUNK: usize = 1 << 16;
            let mut out = String::with_capacity(CHUNK + 4096);
            if csv {
                out.push_str(&t.headers.join(","));
                out.push('\n');
            }
            let mut line_text = String::new();
            for l in listings {
                let mut namer = l.namer(snap);
                events.visit(l.device, &mut |i, e, _, aux| {
                    line_text.clear();
                    push_line(&mut line_text, e, aux, namer.line(e, aux));
                    let line = line_text.strip_suffix('\n').unwrap_or(&line_text);
                    let time = e.time().map_or(String::new(), |t| t.to_string());
                    let (action, addr, size) = (e.action.name(), e.addr, e.size);
                    if !csv {
                        t.row(vec![
                            l.device.to_string(),
                            i.to_string(),
                            action.into(),
                            addr.to_string(),
                            size.to_string(),
                            time,
                            line.to_string(),
                        ]);
                        return Ok(());
                    }
                    // CSV is written as it is made (a row an event: millions)
                    let _ = write!(out, "{},{i},{action},{addr},{size},{time},", l.device);
                    out.push_str(&super::table::csv_cell(line));
                    out.push('\n');
                    if out.len() >= CHUNK {
                        w.write_all(out.as_bytes())?;
                        out.clear();
                    }
                    Ok(())
                })?;
            }
            if !csv {
                // (Markdown aligns its columns: the table is made whole)
                out = t.markdown();
                for l in listings {
                    let _ = writeln!(
                        out,
                        "\nDevice {}: {} entries, TOTAL MEM {}",
                        l.device,
                        l.totals.entries,
                        crate::analysis::memviz::format_size(l.totals.net_bytes)
                    );
                }
            }
            w.write_all(out.as_bytes())
        }
    }
}

// ---- diff ----

fn threshold_text(t: Threshold, units: Units) -> String {
    match t {
        Threshold::Bytes(v) => b(v as f64, units),
        Threshold::Percent(p) => format!("{p}%"),
    }
}

fn gate_line(g: &crate::analysis::diff::Gate, units: Units) -> String {
    format!(
        "{}: {} {} → {} ({}{}), limit {}",
        if g.failed { "FAIL" } else { "ok" },
        g.metric,
        b(g.before_bytes, units),
        b(g.after_bytes, units),
        signed(g.growth_bytes, units),
        g.growth_percent
            .map_or(String::new(), |p| format!(", {p:+.2}%")),
        threshold_text(g.threshold, units)
    )
}

pub fn snapshot_diff(d: &SnapshotDiff, title: &str, format: Format, units: Units) -> String {
    if format == Format::Json {
        return json(d);
    }
    if format == Format::Csv {
        let mut t = Table::new(&[
            "site",
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
    let mut doc = Doc::new(format);
    doc.title(title);
    let mut t = Table::new(&["", ">before", ">after", ">growth"]);
    for m in &d.metrics {
        t.row(vec![
            m.name.into(),
            b(m.before_bytes, units),
            b(m.after_bytes, units),
            signed(m.growth_bytes, units),
        ]);
    }
    doc.table(&t);
    doc.heading("Segments (matched by address and size)");
    doc.para(&format!(
        "only before: {} ({}); only after: {} ({})",
        thousands(d.segments_only_before.len()),
        b(d.only_before_bytes as f64, units),
        thousands(d.segments_only_after.len()),
        b(d.only_after_bytes as f64, units)
    ));
    doc.heading(&format!(
        "Growth by allocation site ({} of {} sites that changed)",
        d.sites.len(),
        d.sites_total
    ));
    let mut t = Table::new(&[
        ">end before",
        ">end after",
        ">end growth",
        ">peak growth",
        "site",
    ]);
    for s in &d.sites {
        t.row(vec![
            b(s.end_before_bytes as f64, units),
            b(s.end_after_bytes as f64, units),
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
    doc.out
}

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
        let o = |v: Option<f64>| v.map_or(String::new(), |v| v.to_string());
        for g in &d.ops {
            t.row(vec![
                "op".into(),
                g.op.clone(),
                o(g.generated_before_bytes),
                o(g.generated_after_bytes),
                g.growth_bytes.to_string(),
                o(g.allocated_before_bytes),
                o(g.allocated_after_bytes),
                String::new(),
                String::new(),
            ]);
        }
        for m in &d.modules {
            t.row(vec![
                "module".into(),
                m.module.clone(),
                o(m.generated_before_bytes),
                o(m.generated_after_bytes),
                m.growth_bytes.to_string(),
                String::new(),
                String::new(),
                o(m.peak_before_bytes),
                o(m.peak_after_bytes),
            ]);
        }
        return t.csv();
    }
    let mut doc = Doc::new(format);
    doc.title(&format!(
        "{title}: {} ops before, {} after",
        thousands(d.ops_before),
        thousands(d.ops_after)
    ));
    let mut t = Table::new(&["", ">before", ">after", ">growth"]);
    for m in &d.peaks {
        t.row(vec![
            m.name.into(),
            b(m.before_bytes, units),
            b(m.after_bytes, units),
            signed(m.growth_bytes, units),
        ]);
    }
    doc.table(&t);
    doc.heading(&format!(
        "Growth of memory generated per op ({} of {} ops that changed; {} only before, {} only after)",
        d.ops.len(),
        d.ops_total,
        d.only_before,
        d.only_after
    ));
    let mut t = Table::new(&[">before", ">after", ">growth", "op"]);
    let o = |v: Option<f64>| v.map_or_else(|| "-".into(), |v| b(v, units));
    for g in &d.ops {
        t.row(vec![
            o(g.generated_before_bytes),
            o(g.generated_after_bytes),
            signed(g.growth_bytes, units),
            g.op.clone(),
        ]);
    }
    doc.table(&t);
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
    doc.out
}
