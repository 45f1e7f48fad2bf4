//! `segments`: one row per segment with its map of blocks, ordered as `_memory_viz stats`
//! orders them, and the totals; as text, Markdown, CSV or JSON. (The picture is
//! `segments_svg.rs`.)

use crate::analysis::segments::{SegmentMap, MAX_MAP_CHARS};
use crate::model::{format_bytes, Units};

use super::document::Document;
use super::table::Table;
use super::{json, pct, thousands, Format};

/// The segment table and its totals in `format` (`title`: the file's name).
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
            "map_page_size",
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
                r.map_page_size.unwrap_or(m.page_size).to_string(),
            ]);
        } else {
            t.row(vec![
                r.index.to_string(),
                r.device.to_string(),
                format!("0x{:x}", r.address),
                format_bytes(r.total_size as f64, units),
                r.pool.clone(),
                r.size_class.into(),
                thousands(r.blocks),
                format_bytes(r.allocated_bytes as f64, units),
                format_bytes(
                    (r.free_external_bytes + r.free_internal_bytes) as f64,
                    units,
                ),
                pct(r.internal_percent),
                format_bytes(r.largest_free_block_bytes as f64, units),
                format!("[{}]", r.map),
            ]);
        }
    }
    if raw {
        return t.csv();
    }
    let mut doc = Document::new(format);
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
        format_bytes(tt.reserved_bytes as f64, units),
        String::new(),
    ]);
    s.row(vec![
        "total_allocated".into(),
        format_bytes(tt.allocated_bytes as f64, units),
        "_memory_viz's allocated: requested bytes of active_allocated blocks".into(),
    ]);
    s.row(vec![
        "total_free".into(),
        format_bytes(tt.free_bytes as f64, units),
        format!(
            "_memory_viz's free: {} internal (rounding), {} external",
            pct(tt.internal_percent),
            format_bytes(tt.free_external_bytes as f64, units)
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
        s.row(vec![
            name.into(),
            format_bytes(bytes as f64, units),
            note.into(),
        ]);
    }
    doc.heading("Totals");
    doc.table(&s);
    doc.text_note(
        "map: a-z a 20 MiB page filled by one block; 0-9 partly filled by several (9 = 90%); \
             * full with several; space free",
    );
    for r in &m.segments {
        if let Some(page) = r.map_page_size {
            doc.para(&format!(
                "segment {}'s map: 1 char = {} (a segment over 320 GiB is drawn in at most {} characters)",
                r.index,
                format_bytes(page as f64, Units::Auto),
                thousands(MAX_MAP_CHARS as usize)
            ));
        }
    }
    doc.finish()
}
