//! `trace`: the allocator's trace as `_memory_viz trace` lists it, one line an event, as text,
//! or a row an event as Markdown or CSV, or JSON; written as it is read (millions of events).

use std::cell::RefCell;
use std::fmt::Write;

use crate::analysis::memviz::push_size;
use crate::analysis::trace_listing::{name_of, push_name, DeviceListing, Line, Namer, Place, Ref};
use crate::format_thread::{write_formatted, Handover};
use crate::model::snapshot::{EventAux, Snapshot, TraceEvent};
use crate::model::trace::{serialize_events, TraceEvents};

use super::document::Document;
use super::table::{csv_cell, csv_record, or_empty, Table};
use super::Format;

fn push_u64(out: &mut String, v: u64) {
    out.push_str(itoa::Buffer::new().format(v));
}

fn push_ref(out: &mut String, r: Ref) {
    match r {
        Ref::Name(n) => push_name(out, n),
        Ref::Addr(a) => push_u64(out, a),
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

/// One line of the listing (`line` of an event which carries `aux`), with its newline.
fn push_line(out: &mut String, aux: Option<&EventAux>, line: Line) {
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
                    out.push_str("seg_");
                    push_u64(out, i as u64);
                }
                Place::Mem => out.push_str("MEM"),
            }
            out.push('[');
            push_u64(out, offset);
            out.push(':');
            push_size(out, size as i64);
            out.push_str("]\n");
        }
        Line::FreeRequested { target, size } => push_ref_line(out, "del ", target, " # ", size),
        Line::FreeCompleted { target, size } => {
            push_ref_line(out, "# free completed for ", target, " ", size)
        }
        Line::SegmentAlloc { name, addr, size } => {
            push_name(out, name);
            out.push_str(" = cudaMalloc(");
            push_u64(out, addr);
            out.push_str(", ");
            push_size(out, size as i64);
            out.push_str(")\n");
        }
        Line::SegmentMap { name, addr, size } => {
            push_name(out, name);
            out.push_str(" = cuMemMap(");
            push_u64(out, addr);
            out.push_str(", ");
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
        Line::Other { addr, size } => {
            let name = aux
                .and_then(|a| a.action_name.as_deref())
                .unwrap_or("unknown");
            out.push_str("# ");
            out.push_str(name);
            out.push_str(" addr=");
            push_u64(out, addr);
            out.push_str(" size=");
            push_size(out, size as i64);
            out.push('\n');
        }
    }
}

/// A batch of named events on its way to be written: their lines, and what the few events that
/// carry something carry (by index in the batch).
#[derive(Default)]
struct NamedBatch {
    lines: Vec<Line>,
    aux: Vec<(usize, EventAux)>,
}

/// Events read back, waiting to be named: naming looks ahead to ask for the table entries
/// it will need ([`Namer::prefetch`]).
#[derive(Default)]
struct ReadBatch {
    events: Vec<TraceEvent>,
    aux: Vec<(usize, EventAux)>,
}

impl ReadBatch {
    /// Name the events into `out` (emptied first), and empty this batch.
    fn name_into(&mut self, namer: &mut Namer, out: &mut NamedBatch) {
        // events ahead whose lookups are asked for: enough to cover a cache miss
        const AHEAD: usize = 16;
        out.lines.clear();
        out.aux.clear();
        let mut aux = self.aux.drain(..).peekable();
        for (i, e) in self.events.iter().enumerate() {
            if let Some(next) = self.events.get(i + AHEAD) {
                namer.prefetch(next);
            }
            match aux.next_if(|(at, _)| *at == i) {
                Some((_, a)) => {
                    out.lines.push(namer.line(e, Some(&a)));
                    out.aux.push((i, a));
                }
                None => out.lines.push(namer.line(e, None)),
            }
        }
        self.events.clear();
    }
}

/// The listing as text, written to `w` a chunk at a time: 10M events make gigabytes of text,
/// which never need to be in memory at once. Naming is sequential (names are given in event
/// order) but writing the lines is not: a second thread writes them while this one reads and
/// names the next events, in batches handed over in order (and handed back, to be used again).
pub fn write_trace_text(
    w: &mut dyn std::io::Write,
    snap: &Snapshot,
    listings: &[DeviceListing],
    events: &mut dyn TraceEvents,
) -> std::io::Result<()> {
    const BATCH: usize = 4096;
    let mut head = String::new();
    for l in listings {
        let _ = writeln!(head, "Device {} ----------------", l.device);
        let _ = writeln!(head, "{} entries", l.totals.entries);
        w.write_all(head.as_bytes())?;
        head.clear();
        let mut namer = l.namer(snap);
        let format = |batch: &NamedBatch, out: &mut String| {
            out.clear();
            let mut aux = batch.aux.iter().peekable();
            for (i, line) in batch.lines.iter().enumerate() {
                let a = aux.next_if(|(at, _)| *at == i).map(|(_, a)| a);
                push_line(out, a, *line);
            }
        };
        write_formatted(&mut *w, format, |handover| {
            let mut read = ReadBatch::default();
            read.events.reserve(BATCH);
            let mut hand_over = |read: &mut ReadBatch, h: &mut Handover<'_, NamedBatch, String>| {
                let mut named = h.batch();
                read.name_into(&mut namer, &mut named);
                h.send(named)
            };
            events.visit(l.device, &mut |_, e, _, aux| {
                if let Some(a) = aux {
                    read.aux.push((read.events.len(), a.clone()));
                }
                read.events.push(*e);
                if read.events.len() == BATCH {
                    hand_over(&mut read, handover)?;
                }
                Ok(())
            })?;
            hand_over(&mut read, handover)
        })?;
        head.push_str("TOTAL MEM: ");
        push_size(&mut head, l.totals.net_bytes);
        head.push('\n');
    }
    w.write_all(head.as_bytes())
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
                csv_record(&mut out, &t.headers);
            }
            let mut line_text = String::new();
            for l in listings {
                let mut namer = l.namer(snap);
                events.visit(l.device, &mut |i, e, _, aux| {
                    line_text.clear();
                    push_line(&mut line_text, aux, namer.line(e, aux));
                    let line = line_text.strip_suffix('\n').unwrap_or(&line_text);
                    let time = or_empty(e.time());
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
                    csv_cell(&mut out, line);
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
                let mut doc = Document::new(format);
                doc.table(&t);
                for l in listings {
                    doc.para(&format!(
                        "Device {}: {} entries, TOTAL MEM {}",
                        l.device,
                        l.totals.entries,
                        crate::analysis::memviz::format_size(l.totals.net_bytes)
                    ));
                }
                doc.close_up();
                out = doc.finish();
            }
            w.write_all(out.as_bytes())
        }
    }
}
