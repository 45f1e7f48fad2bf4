//! The segment map as a picture: one row per segment (largest first), its blocks coloured by
//! state, the requested part of each allocated block darker than its rounding. Every block has
//! a tooltip (`<title>`) with its address, sizes, state and allocation site.

use std::fmt::Write;

use crate::analysis::segments::SegmentMap;
use crate::analysis::sites::Sites;
use crate::model::snapshot::{BlockState, Snapshot};
use crate::model::{format_bytes, Units};

use super::xml_escape as esc;

const WIDTH: f64 = 1200.0;
/// The label column: a label per row (size, pool, address), or only run labels ("20.00 MiB × 37").
const LABEL_W: f64 = 300.0;
const RUN_LABEL_W: f64 = 120.0;
const MAX_ROWS: usize = 1500;

const REQUESTED: &str = "#1f77b4";
const ROUNDING: &str = "#9ecae1";
const PENDING: &str = "#ff7f0e";
const FREE: &str = "#e8e8e8";
const UNKNOWN: &str = "#d62728";

fn bytes(b: u64) -> String {
    format_bytes(b as f64, Units::Auto)
}

/// `part` as a share of `whole`, as `summary` prints it.
fn percent_of(part: u64, whole: u64) -> String {
    if whole == 0 {
        return "-".into();
    }
    format!("{:.1}%", part as f64 / whole as f64 * 100.0)
}

pub fn svg(snap: &Snapshot, map: &SegmentMap, title: &str) -> String {
    let mut rows: Vec<&crate::analysis::segments::SegmentRow> = map.segments.iter().collect();
    rows.sort_by(|a, b| {
        (a.device, std::cmp::Reverse(a.total_size), a.address).cmp(&(
            b.device,
            std::cmp::Reverse(b.total_size),
            b.address,
        ))
    });
    let hidden = rows.len().saturating_sub(MAX_ROWS);
    rows.truncate(MAX_ROWS);
    let n = rows.len().max(1);
    let row_h: f64 = if n <= 60 {
        18.0
    } else {
        (1800.0 / n as f64).clamp(3.0, 18.0)
    };
    let labels = row_h >= 11.0;
    let label_w = if labels { LABEL_W } else { RUN_LABEL_W };
    let bar_x = label_w + 10.0;
    let bar_w = WIDTH - bar_x - 20.0;
    let devices: Vec<u32> = {
        let mut d: Vec<u32> = rows.iter().map(|r| r.device).collect();
        d.dedup();
        d
    };
    let header_h = 96.0;
    let dev_h = 22.0;
    let height = header_h
        + n as f64 * row_h
        + devices.len() as f64 * dev_h
        + 40.0
        + if hidden > 0 { 20.0 } else { 0.0 };
    let mut out = String::with_capacity(256 + map.segments.len() * 400);
    let _ = write!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0}" viewBox="0 0 {WIDTH} {height:.0}" font-family="DejaVu Sans, Verdana, sans-serif">
<rect width="100%" height="100%" fill="white"/>
"##
    );
    let t = &map.totals;
    let _ = writeln!(
        out,
        r#"<text x="20" y="30" font-size="20" font-weight="bold">{}</text>"#,
        esc(&format!("{title}: allocator segments"))
    );
    let _ = writeln!(
        out,
        r##"<text x="20" y="54" font-size="13" fill="#333">{}</text>"##,
        // `summary`'s measures under its names (the text map's totals are `_memory_viz`'s)
        esc(&format!(
            "{} segments · reserved {} · allocated {} · pending free {} · free {} · internal fragmentation {} ({} of active)",
            t.segments,
            bytes(t.reserved_bytes),
            bytes(t.allocator.allocated_bytes),
            bytes(t.allocator.pending_free_bytes),
            bytes(t.allocator.free_bytes),
            bytes(t.allocator.internal_fragmentation_bytes),
            percent_of(t.allocator.internal_fragmentation_bytes, t.allocator.active_bytes)
        ))
    );
    // legend
    let mut lx = 20.0;
    for (color, label) in [
        (REQUESTED, "allocated (requested)"),
        (ROUNDING, "allocated (rounding)"),
        (PENDING, "pending free"),
        (FREE, "free (inactive)"),
    ] {
        let _ = writeln!(
            out,
            r##"<rect x="{lx}" y="66" width="14" height="14" fill="{color}" stroke="#999" stroke-width="0.5"/><text x="{}" y="78" font-size="12">{label}</text>"##,
            lx + 19.0
        );
        lx += 30.0 + label.len() as f64 * 7.0;
    }
    let _ = writeln!(
        out,
        r##"<text x="{}" y="78" font-size="12" fill="#555" text-anchor="end">each bar is one segment, scaled to its own size; largest first</text>"##,
        WIDTH - 20.0
    );
    // rows too thin for a label each: label each run of equal-size segments where there is
    // room ("20.00 MiB × 37"), so the left column still says what the bars are
    let run_len: Vec<usize> = {
        let mut len = vec![0usize; rows.len()];
        let mut start = 0;
        for i in 1..=rows.len() {
            let same = i < rows.len()
                && (rows[i].device, rows[i].total_size)
                    == (rows[start].device, rows[start].total_size);
            if !same {
                len[start] = i - start;
                start = i;
            }
        }
        len
    };
    let mut last_label_y = f64::NEG_INFINITY;
    let mut sites = Sites::new(snap);
    let mut y = header_h;
    let mut last_dev = None;
    for (i, r) in rows.into_iter().enumerate() {
        if last_dev != Some(r.device) {
            let _ = writeln!(
                out,
                r#"<text x="20" y="{:.1}" font-size="14" font-weight="bold">cuda:{}</text>"#,
                y + 15.0,
                r.device
            );
            y += dev_h;
            last_dev = Some(r.device);
        }
        let seg = &snap.segments[r.index];
        let bar_h = (row_h - if row_h >= 6.0 { 3.0 } else { 1.0 }).max(1.0);
        if !labels && run_len[i] > 0 && y - last_label_y >= 12.0 {
            last_label_y = y;
            let _ = writeln!(
                out,
                r##"<line x1="{:.1}" x2="{:.1}" y1="{y:.1}" y2="{y:.1}" stroke="#888"/><text x="{:.1}" y="{:.1}" font-size="10" text-anchor="end" fill="#222">{}</text>"##,
                label_w + 2.0,
                bar_x - 2.0,
                label_w,
                y + 8.0,
                esc(&if run_len[i] > 1 {
                    format!("{} × {}", bytes(r.total_size), run_len[i])
                } else {
                    bytes(r.total_size)
                })
            );
        }
        if labels {
            let _ = writeln!(
                out,
                r##"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="end" fill="#222">{}</text>"##,
                label_w,
                y + bar_h - 3.0,
                esc(&format!(
                    "{}  {} {}  0x{:x}",
                    bytes(r.total_size),
                    r.pool,
                    r.size_class,
                    r.address
                ))
            );
        }
        let _ = writeln!(
            out,
            r##"<g><title>{}</title><rect x="{bar_x}" y="{y:.1}" width="{bar_w}" height="{bar_h:.1}" fill="{FREE}" stroke="#aaa" stroke-width="0.5"/></g>"##,
            esc(&format!(
                "segment {} at 0x{:x}: {} ({} {}), {} blocks, allocated {}, free {}",
                r.index,
                r.address,
                bytes(r.total_size),
                r.pool,
                r.size_class,
                r.blocks,
                bytes(r.allocated_bytes),
                bytes(r.free_external_bytes + r.free_internal_bytes)
            ))
        );
        let total = seg.total_size.max(1) as f64;
        let mut offset = 0u64;
        for b in seg.blocks(&snap.blocks) {
            let x = bar_x + offset as f64 / total * bar_w;
            let w = (b.size as f64 / total * bar_w).max(0.4);
            offset += b.size;
            if b.state == BlockState::Inactive {
                continue;
            }
            let site = sites.site(b.alloc_stack(&snap.history));
            let tip = format!(
                "0x{:x}: {} {} (requested {}) from {}",
                b.address,
                b.state.name(),
                bytes(b.size),
                bytes(b.requested(&snap.history)),
                sites.label(site, true)
            );
            let _ = write!(out, "<g><title>{}</title>", esc(&tip));
            match b.state {
                BlockState::ActiveAllocated => {
                    let req = b.requested(&snap.history).min(b.size);
                    let wr = (req as f64 / total * bar_w).max(0.4).min(w);
                    let _ = write!(
                        out,
                        r#"<rect x="{x:.2}" y="{y:.1}" width="{w:.2}" height="{bar_h:.1}" fill="{ROUNDING}"/><rect x="{x:.2}" y="{y:.1}" width="{wr:.2}" height="{bar_h:.1}" fill="{REQUESTED}"/>"#
                    );
                }
                BlockState::ActivePendingFree => {
                    let _ = write!(
                        out,
                        r#"<rect x="{x:.2}" y="{y:.1}" width="{w:.2}" height="{bar_h:.1}" fill="{PENDING}"/>"#
                    );
                }
                _ => {
                    let _ = write!(
                        out,
                        r#"<rect x="{x:.2}" y="{y:.1}" width="{w:.2}" height="{bar_h:.1}" fill="{UNKNOWN}"/>"#
                    );
                }
            }
            if w >= 3.0 && bar_h >= 4.0 {
                let _ = write!(
                    out,
                    r#"<line x1="{x:.2}" y1="{y:.1}" x2="{x:.2}" y2="{:.1}" stroke="white" stroke-width="0.6"/>"#,
                    y + bar_h
                );
            }
            out.push_str("</g>\n");
        }
        y += row_h;
    }
    if hidden > 0 {
        let _ = writeln!(
            out,
            r##"<text x="20" y="{:.1}" font-size="12" fill="#555">… and {hidden} smaller segments not drawn</text>"##,
            y + 16.0
        );
    }
    out.push_str("</svg>\n");
    out
}
