//! Drawing the snapshot and trace screen: the header with the OOMs (how much was asked, what
//! was allocated, reserved and free then, and where in the program), the timeline stacked by
//! category with the peak, the OOMs and the moment marked, its legend at the moment, and what
//! was live then by site with the selected site's stack.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Table, Wrap};
use ratatui::Frame;

use crate::model::{format_bytes, Units};
use crate::render::thousands;
use crate::view::index::{Tile, CATEGORIES};

use super::chart::{column_of, Column, ColumnChart, Mark, Y_LABELS};
use super::snapshot_screen::SnapshotScreen;

/// Colours of the categories, in `view::index::CATEGORIES` order, then the untracked rest.
const COLORS: [Color; 8] = [
    Color::Blue,
    Color::Magenta,
    Color::Yellow,
    Color::Green,
    Color::Red,
    Color::Cyan,
    Color::Gray,
    Color::DarkGray,
];

fn bytes(b: f64) -> String {
    format_bytes(b, Units::Auto)
}

fn dim() -> Style {
    Style::default().fg(Color::DarkGray)
}

fn bold() -> Style {
    Style::default().add_modifier(Modifier::BOLD)
}

/// The whole screen.
pub fn draw(f: &mut Frame, s: &mut SnapshotScreen<'_, '_>) {
    let area = f.area();
    let oom = oom_lines(s);
    let oom_rows = oom.as_ref().map_or(0, |l| rows_for(l, area.width));
    let chart_rows = (area.height / 3).clamp(6, 16);
    let [head, oom_area, info, chart, legend, panel, keys] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(oom_rows),
        Constraint::Length(1),
        Constraint::Length(chart_rows),
        Constraint::Length(if s.by_category() { 2 } else { 0 }),
        Constraint::Min(4),
        Constraint::Length(1),
    ])
    .areas(area);
    draw_heading(f, head, s);
    if let Some(lines) = &oom {
        draw_oom(f, oom_area, lines);
    }
    draw_info(f, info, s);
    let width = chart.width.saturating_sub(Y_LABELS) as usize;
    let layers = draw_chart(f, chart, s, width);
    draw_legend(f, legend, s, layers.as_deref());
    draw_live(f, panel, s);
    let text = if s.view.typing {
        format!(
            " search: {}█   (Enter finds it, Esc clears it)",
            s.view.search
        )
    } else {
        " q quit │ ←/→ moment (,/. one event) │ p peak │ x OOM │ +/- zoom 0 all │ ↑/↓ site │ / search"
            .to_string()
    };
    f.render_widget(Paragraph::new(text).style(dim()), keys);
}

fn draw_heading(f: &mut Frame, area: Rect, s: &SnapshotScreen<'_, '_>) {
    let ix = s.index();
    let kind = if s.by_category() {
        "allocator snapshot"
    } else {
        "profiler trace"
    };
    let line = Line::from(vec![
        Span::styled(" memtrack ", bold().fg(Color::Black).bg(Color::Cyan)),
        Span::raw(" "),
        Span::styled(s.title.clone(), bold()),
        Span::raw(format!(
            "  {kind} · {} · {} events · {} allocations",
            ix.device_label,
            thousands(ix.events()),
            thousands(ix.allocs.len())
        )),
    ]);
    f.render_widget(Paragraph::new(line), area);
}

/// The OOM nearest at or after the moment (else the last): what was asked, what was there,
/// where in the program. None without OOMs.
fn oom_lines(s: &SnapshotScreen<'_, '_>) -> Option<[String; 2]> {
    let ooms = &s.index().marks.ooms;
    let k =
        (ooms.iter().position(|o| o.index >= s.view.event)).unwrap_or(ooms.len().checked_sub(1)?);
    let o = &ooms[k];
    let mut text = format!(
        " OUT OF MEMORY at event {}: {} asked; {} allocated, {} reserved",
        thousands(o.index),
        bytes(o.requested_bytes as f64),
        bytes(o.allocated_bytes as f64),
        bytes(o.reserved_bytes as f64),
    );
    if let Some(free) = o.device_free_bytes {
        text.push_str(&format!(", {} free", bytes(free as f64)));
    }
    if ooms.len() > 1 {
        text.push_str(&format!(
            " (OOM {} of {}: x for the next)",
            k + 1,
            ooms.len()
        ));
    }
    let at = match s.oom_where.get(k).and_then(Option::as_ref) {
        Some(w) => {
            let innermost = w.frames.first().cloned().unwrap_or_default();
            let whose = if w.event == o.index {
                "its own stack".to_string()
            } else {
                format!("the last stack before it, event {}", thousands(w.event))
            };
            match &w.program {
                Some(p) if *p != innermost => format!(" where: {p}, in {innermost} ({whose})"),
                _ => format!(" where: {innermost} ({whose})"),
            }
        }
        None => " where: no stack recorded up to it".to_string(),
    };
    Some([text, at])
}

/// Rows `lines` take wrapped at `width`.
fn rows_for(lines: &[String], width: u16) -> u16 {
    let w = width.max(1) as usize;
    (lines.iter())
        .map(|l| l.chars().count().div_ceil(w).max(1) as u16)
        .sum()
}

fn draw_oom(f: &mut Frame, area: Rect, lines: &[String]) {
    let styled: Vec<Line> = (lines.iter().enumerate())
        .map(|(k, l)| {
            let style = if k == 0 { bold() } else { Style::default() };
            Line::styled(l.clone(), style.fg(Color::Red))
        })
        .collect();
    f.render_widget(Paragraph::new(styled).wrap(Wrap { trim: false }), area);
}

fn draw_info(f: &mut Frame, area: Rect, s: &SnapshotScreen<'_, '_>) {
    let ix = s.index();
    let mut spans = Vec::new();
    if let Some(p) = &ix.marks.peak_allocated {
        spans.push(Span::raw(" peak "));
        spans.push(Span::styled(
            bytes(p.bytes as f64),
            bold().fg(Color::Magenta),
        ));
        spans.push(Span::raw(format!(" after event {}", thousands(p.index))));
    }
    let e = s.view.event;
    if e < ix.events() {
        spans.push(Span::raw(" │ moment: event "));
        spans.push(Span::styled(thousands(e), bold()));
        if ix.marks.x_is_time {
            spans.push(Span::raw(format!(" (+{:.3} s)", ix.series.x(e))));
        }
        spans.push(Span::raw(format!(
            ", {} allocated",
            bytes(ix.series.allocated(e) as f64)
        )));
        ix.series.release_all();
    }
    f.render_widget(Paragraph::new(Line::from(spans)), area);
}

/// Bytes per layer at each sample of the tile: a snapshot's categories then the untracked
/// rest; a trace's allocated alone.
fn sample_layers(t: &Tile, by_category: bool) -> Vec<Vec<f64>> {
    let n = t.samples.x.len();
    if !by_category {
        return (t.samples.total.iter()).map(|&b| vec![b as f64]).collect();
    }
    let mut layers = vec![vec![0.0; CATEGORIES.len() + 1]; n];
    for d in &t.drawn {
        let c = d.category.map_or(CATEGORIES.len() - 1, usize::from);
        for l in &mut layers[d.j0 as usize..(d.j1 as usize).min(n)] {
            l[c.min(CATEGORIES.len() - 1)] += d.size as f64;
        }
    }
    for b in &t.bands {
        let c = b.category.map_or(CATEGORIES.len() - 1, usize::from);
        for (l, &v) in layers.iter_mut().zip(&b.bytes) {
            l[c.min(CATEGORIES.len() - 1)] += v as f64;
        }
    }
    for (l, &u) in layers.iter_mut().zip(&t.untracked) {
        l[CATEGORIES.len()] += u as f64;
    }
    layers
}

/// The chart; the layers at the moment's column, for the legend.
fn draw_chart(
    f: &mut Frame,
    area: Rect,
    s: &mut SnapshotScreen<'_, '_>,
    width: usize,
) -> Option<Vec<f64>> {
    let by_category = s.by_category();
    let (x0, x1) = (s.view.x0, s.view.x1);
    let (from, to) = (x0 as u64, x1 as u64 + 1);
    let rows = area.height.saturating_sub(2) as usize;
    let tile = s.tile_for(width, rows)?;
    let per_sample = sample_layers(tile, by_category);
    let mut columns = vec![Column::default(); width];
    let mut filled = vec![false; width];
    for (j, &ev) in tile.samples.event.iter().enumerate() {
        if let Some(k) = column_of(from, to, width, ev as u64) {
            columns[k].layers = per_sample[j].clone();
            filled[k] = true;
        }
    }
    // a column without an event of its own shows the state the one before left
    for k in 1..width {
        if !filled[k] && filled[k - 1] {
            columns[k].layers = columns[k - 1].layers.clone();
            filled[k] = true;
        }
    }
    let top = tile.samples.total.iter().copied().max().unwrap_or(0) as f64;
    let ix = s.index();
    if let Some(k) =
        (ix.marks.peak_allocated.as_ref()).and_then(|p| column_of(from, to, width, p.index as u64))
    {
        columns[k].marks.push(Mark::Peak);
    }
    for o in &ix.marks.ooms {
        if let Some(k) = column_of(from, to, width, o.index as u64) {
            columns[k].marks.push(Mark::Oom);
        }
    }
    let cursor = column_of(from, to, width, s.view.event as u64);
    if let Some(k) = cursor {
        columns[k].cursor = true;
    }
    let mut title = vec![Span::raw(" ")];
    if by_category {
        title.push(Span::styled("by category (legend below)", dim()));
    } else {
        title.push(Span::styled("█ allocated", Style::default().fg(COLORS[0])));
    }
    title.push(Span::styled("  │ peak  ┃ OOM  ▌ moment ", dim()));
    let block = Block::default()
        .borders(Borders::TOP)
        .title(Line::from(title));
    let inner = block.inner(area);
    f.render_widget(block, area);
    let colors: &[Color] = if by_category { &COLORS } else { &COLORS[..1] };
    f.render_widget(
        ColumnChart {
            columns: &columns,
            colors,
            top: top * 1.05,
            x_labels: (
                format!("event {}", thousands(from as usize)),
                format!("event {}", thousands(to.saturating_sub(1) as usize)),
            ),
        },
        inner,
    );
    cursor.map(|k| columns[k].layers.clone())
}

fn draw_legend(f: &mut Frame, area: Rect, s: &SnapshotScreen<'_, '_>, layers: Option<&[f64]>) {
    if !s.by_category() {
        return;
    }
    // entries whole on a line, as many lines as the area has
    let mut lines = vec![Line::from(" ")];
    let names = CATEGORIES.iter().copied().chain(["untracked"]);
    for (k, name) in names.enumerate() {
        let b = layers.and_then(|l| l.get(k)).copied().unwrap_or(0.0);
        let entry = format!("{name} {}  ", bytes(b));
        let width = lines.last().map_or(0, Line::width);
        if width + entry.chars().count() + 2 > area.width as usize {
            lines.push(Line::from(" "));
        }
        let line = lines.last_mut().expect("one line at least");
        line.push_span(Span::styled("█ ", Style::default().fg(COLORS[k])));
        line.push_span(Span::raw(entry));
    }
    f.render_widget(Paragraph::new(lines), area);
}

fn draw_live(f: &mut Frame, area: Rect, s: &SnapshotScreen<'_, '_>) {
    let what = if s.by_category() { "site" } else { "op" };
    let mut title = match &s.live {
        Some(l) => format!(
            " live at event {}: {} in {} allocations, {} {what}s ",
            thousands(l.event),
            bytes(l.bytes as f64),
            thousands(l.count as usize),
            thousands(l.groups)
        ),
        None => " live at the moment: working it out… ".to_string(),
    };
    if let Some((n, b)) = s.found {
        title.push_str(&format!(
            "│ \"{}\": {} allocations, {} in the trace ",
            s.view.search,
            thousands(n),
            bytes(b as f64)
        ));
    }
    let block = Block::default().borders(Borders::ALL).title(title);
    let inner = block.inner(area);
    f.render_widget(block, area);
    let Some(live) = &s.live else {
        return;
    };
    let q = s.view.search.to_lowercase();
    let rows: Vec<_> = (live.rows.iter())
        .filter(|r| {
            q.is_empty()
                || r.group.to_lowercase().contains(&q)
                || r.stack.iter().any(|f| f.to_lowercase().contains(&q))
        })
        .collect();
    let selected = s.view.row.min(rows.len().saturating_sub(1));
    // the selected site's stack beside the table on a wide terminal, under it otherwise
    let stacks = rows.iter().any(|r| !r.stack.is_empty());
    let (table_area, stack_area) = match (stacks, inner.width >= 120) {
        (false, _) => (inner, None),
        (true, true) => {
            let [a, b] =
                Layout::horizontal([Constraint::Percentage(55), Constraint::Percentage(45)])
                    .areas(inner);
            (a, Some(b))
        }
        (true, false) => {
            let [a, b] = Layout::vertical([Constraint::Percentage(55), Constraint::Percentage(45)])
                .areas(inner);
            (a, Some(b))
        }
    };
    let fit = table_area.height.saturating_sub(1) as usize;
    let skip = (selected + 1).saturating_sub(fit);
    let header = Row::new(["bytes", "allocs", what].map(|h| Cell::from(h).style(bold())));
    let body: Vec<Row> = (rows.iter().enumerate().skip(skip))
        .map(|(k, r)| {
            let style = if k == selected {
                Style::default().add_modifier(Modifier::REVERSED)
            } else {
                Style::default()
            };
            Row::new(vec![
                Cell::from(bytes(r.bytes as f64)),
                Cell::from(thousands(r.count as usize)),
                Cell::from(r.group.clone()),
            ])
            .style(style)
        })
        .collect();
    let widths = [
        Constraint::Length(11),
        Constraint::Length(7),
        Constraint::Fill(1),
    ];
    f.render_widget(Table::new(body, widths).header(header), table_area);
    if let (Some(area), Some(r)) = (stack_area, rows.get(selected)) {
        let head = format!("stack of {}, innermost first", r.group);
        let lines: Vec<Line> = std::iter::once(Line::styled(head, bold()))
            .chain(r.stack.iter().map(|fr| Line::from(fr.clone())))
            .collect();
        let side = if area.y == table_area.y {
            Borders::LEFT
        } else {
            Borders::TOP
        };
        let block = Block::default().borders(side);
        let inner = block.inner(area);
        f.render_widget(block, area);
        f.render_widget(Paragraph::new(lines), inner);
    }
}
