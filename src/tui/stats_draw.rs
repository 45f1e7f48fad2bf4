//! Drawing the per-op screen: the header (the program, where it is), the chart of allocated
//! and reserved with the iterations marked, growth, and the panel (the iteration's module
//! table, its phases and top ops, growth by iteration, the program's output). Laid out for
//! 80×24 and up.

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row, Table};
use ratatui::Frame;

use crate::analysis::modules::{select, IterationSel, Query};
use crate::model::{format_bytes, IterationModules, ModState, ModuleStats, RecordInfo, Units};
use crate::record::replay::live::{Hello, Now};
use crate::render::{signed, thousands};

use super::chart::{Column, ColumnChart, Mark, Y_LABELS};
use super::output::Output;
use super::stats_model::{StatsModel, DETAIL_EVERY, KEPT_DETAILS};

/// The panel under the chart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tab {
    /// The iteration's module table.
    Modules,
    /// Its phases and top ops.
    Ops,
    /// Growth across iterations.
    Growth,
    /// The program's output (under `record --watch`).
    Program,
}

/// What the user chose to look at.
pub struct Ui {
    /// The panel.
    pub tab: Tab,
    /// The iteration shown; None: the latest that ended.
    pub selected: Option<usize>,
    /// Rows scrolled past in the panel.
    pub scroll: usize,
    /// What rows must contain (case-insensitive); empty: all.
    pub search: String,
    /// The search is being typed.
    pub typing: bool,
    /// The process shown (a journal's).
    pub process: usize,
    /// The chart shows the selected iteration (else the whole run).
    pub zoom: bool,
}

/// What the header says besides the model.
pub struct Heading {
    /// The program or file.
    pub title: String,
    /// `recording 1:02`, `ended (exit)`, `record file`.
    pub state: String,
    /// Where the program is, for a running job.
    pub now: Option<Now>,
    /// What its process said of itself.
    pub hello: Option<Hello>,
    /// Which process of how many.
    pub process: (usize, usize),
}

/// Module depth shown when not searching (MemTracker's depth: `MLP` is 1).
const DEPTH: usize = 2;

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
pub fn draw(
    f: &mut Frame,
    model: &mut StatsModel,
    ui: &Ui,
    heading: &Heading,
    shown: Option<usize>,
    output: Option<&Output>,
) {
    let area = f.area();
    let chart_rows = (area.height / 3).clamp(5, 14);
    let tail_rows = match output {
        Some(_) if ui.tab != Tab::Program && area.height >= 30 => 4,
        _ => 0,
    };
    let [head, info, chart, growth, panel, tail, keys] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(1),
        Constraint::Length(chart_rows),
        Constraint::Length(1),
        Constraint::Min(5),
        Constraint::Length(tail_rows),
        Constraint::Length(1),
    ])
    .areas(area);
    draw_heading(f, head, heading);
    draw_info(f, info, model, heading);
    draw_chart(f, chart, model, ui, shown);
    draw_growth(f, growth, model);
    let title = panel_title(ui, model, shown, output.is_some());
    let block = Block::default().borders(Borders::ALL).title(title);
    let inner = block.inner(panel);
    f.render_widget(block, panel);
    match ui.tab {
        Tab::Modules => draw_modules(f, inner, model, ui, shown),
        Tab::Ops => draw_ops(f, inner, model, ui, shown),
        Tab::Growth => draw_growth_rows(f, inner, model, ui, shown),
        Tab::Program => draw_output(f, inner, output, ui.scroll),
    }
    if tail_rows > 0 {
        let block = Block::default()
            .borders(Borders::TOP)
            .title(Span::styled(" program output (p: all of it) ", dim()));
        let inner = block.inner(tail);
        f.render_widget(block, tail);
        draw_output(f, inner, output, 0);
    }
    draw_keys(f, keys, ui, heading, output.is_some());
}

/// Before the first process records: the header and the output.
pub fn waiting(f: &mut Frame, heading: &Heading, output: Option<&Output>) {
    let area = f.area();
    let [head, info, rest] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(1),
        Constraint::Min(1),
    ])
    .areas(area);
    draw_heading(f, head, heading);
    f.render_widget(
        Paragraph::new(" no op recorded yet (q quits; the recording goes on)").style(dim()),
        info,
    );
    draw_output(f, rest, output, 0);
}

fn draw_heading(f: &mut Frame, area: Rect, h: &Heading) {
    let mut right = String::new();
    if let Some(now) = &h.now {
        // a space before it: a left side cut short does not run into it
        right = format!(" iteration {} · {}", now.iteration, now.phase);
        if let Some(m) = &now.module {
            right.push_str(&format!(" · {m}"));
        }
        if now.oom {
            right.push_str(" · OUT OF MEMORY");
        }
        right.push(' ');
    }
    let [left_area, right_area] = Layout::horizontal([
        Constraint::Min(10),
        Constraint::Length(right.chars().count() as u16),
    ])
    .areas(area);
    // the state before the title: a narrow terminal cuts the title, not whether it runs
    let state_style = if h.state.starts_with("recording") {
        Style::default().fg(Color::Green)
    } else {
        Style::default().fg(Color::Yellow)
    };
    let mut left = vec![
        Span::styled(" memtrack ", bold().fg(Color::Black).bg(Color::Cyan)),
        Span::raw(" "),
        Span::styled(h.state.clone(), state_style),
        Span::raw("  "),
        Span::styled(h.title.clone(), bold()),
    ];
    if let Some(hello) = &h.hello {
        let mut who = String::new();
        if let Some(pid) = hello.pid {
            who.push_str(&format!("  pid {pid}"));
        }
        if let Some(rank) = hello.rank {
            who.push_str(&format!(" rank {rank}"));
        }
        who.push_str(&format!(" · {}", hello.backend));
        if let Some(d) = &hello.device {
            who.push_str(&format!(" ({d})"));
        }
        left.push(Span::raw(who));
    }
    if h.process.1 > 1 {
        left.push(Span::raw(format!(
            "  process {} of {} (r: next)",
            h.process.0 + 1,
            h.process.1
        )));
    }
    f.render_widget(Paragraph::new(Line::from(left)), left_area);
    f.render_widget(Paragraph::new(Span::styled(right, bold())), right_area);
}

fn draw_info(f: &mut Frame, area: Rect, model: &StatsModel, h: &Heading) {
    let mut spans = Vec::new();
    match &h.now {
        Some(now) => {
            let total = now.memory.total() as f64;
            spans.push(Span::raw(format!(" now {} in tensors", bytes(total))));
            // the largest categories now
            let mut cats: Vec<(usize, i64)> = (0..7)
                .map(|c| (c, now.memory.0.iter().map(|d| d.by_category[c]).sum()))
                .filter(|&(_, b)| b > 0)
                .collect();
            cats.sort_by_key(|&(_, b)| std::cmp::Reverse(b));
            let parts: Vec<String> = (cats.iter().take(3))
                .map(|&(c, b)| format!("{} {}", crate::model::CATEGORIES[c], bytes(b as f64)))
                .collect();
            if !parts.is_empty() {
                spans.push(Span::styled(format!(" ({})", parts.join(", ")), dim()));
            }
            spans.push(Span::raw(format!(" · {} ops", thousands(now.ops))));
        }
        None => spans.push(Span::raw(format!(
            " {} ops · {} iterations",
            thousands(model.ops()),
            model.rows.len() + model.rows_dropped
        ))),
    }
    if let Some(p) = &model.peak {
        spans.push(Span::raw(" │ peak "));
        spans.push(Span::styled(bytes(p.bytes), bold().fg(Color::Magenta)));
        spans.push(Span::raw(format!(" after op {} ", thousands(p.op))));
        spans.push(Span::styled(p.name.clone(), dim()));
    }
    f.render_widget(Paragraph::new(Line::from(spans)), area);
}

fn draw_chart(f: &mut Frame, area: Rect, model: &StatsModel, ui: &Ui, shown: Option<usize>) {
    let row = shown.and_then(|n| model.row(n));
    let ops = model.ops();
    let (from, to) = match row {
        Some(r) if ui.zoom => (r.first_op, r.end_op.unwrap_or(ops).max(r.first_op + 1)),
        _ => (0, ops.max(1)),
    };
    let width = area.width.saturating_sub(Y_LABELS) as usize;
    let cols = model.columns(from, to, width);
    let reserved_differs = cols.iter().flatten().any(|&(a, r)| r > a);
    let mut columns: Vec<Column> = (cols.iter())
        .map(|c| Column {
            layers: vec![c.map_or(0.0, |c| c.0)],
            line: c.filter(|_| reserved_differs).map(|c| c.1),
            ..Column::default()
        })
        .collect();
    let col = |op: usize| super::chart::column_of(from as u64, to as u64, width, op as u64);
    let visible: Vec<_> = (model.rows.iter())
        .filter(|r| (from..to).contains(&r.first_op))
        .collect();
    if visible.len() * 3 <= width {
        for r in &visible {
            if let Some(k) = col(r.first_op) {
                columns[k].marks.push(Mark::Iteration);
            }
        }
    }
    if ui.zoom {
        for &(op, _) in model.markers.iter().filter(|m| (from..to).contains(&m.0)) {
            if let Some(k) = col(op) {
                columns[k].marks.push(Mark::Phase);
            }
        }
    } else if let Some(r) = row {
        for op in [r.first_op, r.end_op.unwrap_or(ops).saturating_sub(1)] {
            if let Some(k) = col(op) {
                columns[k].shaded = true;
            }
        }
        let (a, z) = (
            col(r.first_op),
            col(r.end_op.unwrap_or(ops).saturating_sub(1)),
        );
        if let (Some(a), Some(z)) = (a, z) {
            columns[a..=z].iter_mut().for_each(|c| c.shaded = true);
        }
    }
    if let Some(k) = model.peak.as_ref().and_then(|p| col(p.op)) {
        columns[k].marks.push(Mark::Peak);
    }
    let top = cols.iter().flatten().fold(0.0_f64, |m, c| {
        m.max(c.0).max(if reserved_differs { c.1 } else { 0.0 })
    });
    let what = match row {
        Some(r) if ui.zoom => format!(" iteration {} (z: the whole run) ", r.number),
        _ => " the whole run (z: the iteration shown) ".to_string(),
    };
    let mut title = vec![
        Span::raw(" "),
        Span::styled("█ allocated", Style::default().fg(Color::Cyan)),
    ];
    if reserved_differs {
        title.push(Span::styled(
            "  ─ reserved",
            Style::default().fg(Color::Yellow),
        ));
    }
    title.push(Span::styled("  ┊ iterations  │ peak", dim()));
    title.push(Span::styled(what, dim()));
    let block = Block::default()
        .borders(Borders::TOP)
        .title(Line::from(title));
    let inner = block.inner(area);
    f.render_widget(block, area);
    f.render_widget(
        ColumnChart {
            columns: &columns,
            colors: &[Color::Cyan],
            top: top * 1.05,
            x_labels: (
                format!("op {}", thousands(from)),
                format!("op {}", thousands(to)),
            ),
        },
        inner,
    );
}

fn draw_growth(f: &mut Frame, area: Rect, model: &StatsModel) {
    let text = match model.growth() {
        Some(g) => match g.trend.bytes_per_iteration {
            Some(per) => format!(
                " growth: {} per iteration over {} iterations after warm-up (rose at {} of {} steps): {}",
                signed(per, Units::Auto),
                g.measured,
                g.trend.rising_steps,
                g.trend.steps,
                g.trend.verdict
            ),
            None => " growth: not yet known (fewer than three iterations)".to_string(),
        },
        None => String::new(),
    };
    let style = if text.ends_with("grows") {
        Style::default().fg(Color::Red)
    } else {
        Style::default()
    };
    f.render_widget(Paragraph::new(text).style(style), area);
}

fn panel_title(ui: &Ui, model: &StatsModel, shown: Option<usize>, program: bool) -> Line<'static> {
    let tab = |key: &str, name: &str, t: Tab| {
        let style = if ui.tab == t {
            bold().fg(Color::Black).bg(Color::Cyan)
        } else {
            Style::default()
        };
        Span::styled(format!(" {key} {name} "), style)
    };
    let mut spans = vec![
        tab("m", "modules", Tab::Modules),
        tab("o", "ops", Tab::Ops),
        tab("g", "growth", Tab::Growth),
    ];
    if program {
        spans.push(tab("p", "program", Tab::Program));
    }
    if let Some(n) = shown {
        let last = model.rows.back().map_or(n, |r| r.number);
        let under_way = model.row(n).is_some_and(|r| r.end_op.is_none());
        spans.push(Span::styled(
            format!(
                " iteration {n} of {last}{} (←/→) ",
                if under_way { ", under way" } else { "" }
            ),
            bold(),
        ));
    }
    if !ui.search.is_empty() {
        spans.push(Span::styled(
            format!(" matching \"{}\" ", ui.search),
            Style::default().fg(Color::Yellow),
        ));
    }
    Line::from(spans)
}

fn matches(text: &str, search: &str) -> bool {
    search.is_empty() || text.to_lowercase().contains(&search.to_lowercase())
}

fn draw_modules(f: &mut Frame, area: Rect, model: &StatsModel, ui: &Ui, shown: Option<usize>) {
    let Some(it) = shown.and_then(|n| model.modules(n)) else {
        let why = match shown {
            Some(n) if model.row(n).is_some_and(|r| r.end_op.is_none()) => {
                format!("iteration {n} is under way: its module table comes when it ends (←: the last that ended)")
            }
            Some(n) => format!("no module table for iteration {n} (a MemoryTracker file has none; a running job keeps the last {})", super::stats_model::KEPT_DETAILS),
            None => "no iteration yet".into(),
        };
        f.render_widget(Paragraph::new(format!(" {why}")).style(dim()), area);
        return;
    };
    let rows = module_rows(it, &ui.search);
    // Post-Forward and Pre-Forward where the terminal is wide enough
    let wide = area.width >= 110;
    let mut heads = vec!["module", "params"];
    if wide {
        heads.extend(["Pre-Fw", "Post-Fw"]);
    }
    heads.extend(["Peak-Fw", "Peak-Bw", "most at peak"]);
    let header = Row::new(heads.into_iter().map(|h| Cell::from(h).style(bold())));
    let body: Vec<Row> = (rows.iter().skip(ui.scroll))
        .map(|m| {
            let at = |s: ModState| m.max_total(s).map_or("-".into(), |b| bytes(b as f64));
            let first = |s: ModState| {
                (m.state(s).and_then(|x| x.calls.first()))
                    .map_or("-".into(), |b| bytes(b.total() as f64))
            };
            // a tree: its parent is the row above, so a child is named by its last part
            let name = match (ui.search.is_empty(), m.fqn.rsplit_once('.')) {
                (true, Some((_, last))) => {
                    format!("{}{last}", "  ".repeat(m.depth().saturating_sub(1)))
                }
                _ => m.fqn.clone(),
            };
            let mut cells = vec![
                Cell::from(name),
                Cell::from(bytes(m.parameter_bytes as f64)),
            ];
            if wide {
                cells.push(Cell::from(first(ModState::PreForward)));
                cells.push(Cell::from(first(ModState::PostForward)));
            }
            cells.push(Cell::from(at(ModState::PeakForward)));
            cells.push(Cell::from(at(ModState::PeakBackward)));
            cells.push(Cell::from(largest_category(m)));
            Row::new(cells)
        })
        .collect();
    let mut widths = vec![Constraint::Fill(1), Constraint::Length(10)];
    if wide {
        widths.extend([Constraint::Length(10), Constraint::Length(10)]);
    }
    widths.extend([
        Constraint::Length(10),
        Constraint::Length(10),
        Constraint::Length(24),
    ]);
    f.render_widget(Table::new(body, widths).header(header), area);
}

/// The iteration's modules (to [`DEPTH`], or every one matching the search), in natural
/// order, as `memtrack modules` lists them.
fn module_rows(it: &IterationModules, search: &str) -> Vec<ModuleStats> {
    let record = RecordInfo {
        modules: vec![it.clone()],
        ..RecordInfo::default()
    };
    let query = Query {
        depth: if search.is_empty() { DEPTH } else { usize::MAX },
        states: Vec::new(),
        iteration: IterationSel::Last,
    };
    let Ok(view) = select(&record, &query) else {
        return Vec::new();
    };
    (view.iterations.into_iter().flat_map(|i| i.modules))
        .map(|m| m.stats)
        .filter(|m| matches(&m.fqn, search))
        .collect()
}

/// The category holding most at the module's highest peak state: `Activation 12.00 MiB`.
fn largest_category(m: &ModuleStats) -> String {
    let peak = [ModState::PeakBackward, ModState::PeakForward]
        .iter()
        .filter_map(|&s| m.state(s))
        .flat_map(|s| s.calls.iter())
        .max_by_key(|c| c.total());
    let Some(snap) = peak else {
        return "-".into();
    };
    (0..7)
        .map(|c| (c, snap.0.iter().map(|d| d.by_category[c]).sum::<i64>()))
        .max_by_key(|&(_, b)| b)
        .filter(|&(_, b)| b > 0)
        .map_or("-".into(), |(c, b)| {
            format!("{} {}", crate::model::CATEGORIES[c], bytes(b as f64))
        })
}

fn draw_ops(f: &mut Frame, area: Rect, model: &mut StatsModel, ui: &Ui, shown: Option<usize>) {
    let Some(n) = shown else {
        f.render_widget(Paragraph::new(" no iteration yet").style(dim()), area);
        return;
    };
    let under_way = model.row(n).is_some_and(|r| r.end_op.is_none());
    let Some(d) = model.detail(n) else {
        let why = if under_way {
            format!("iteration {n} is under way: its phases and top ops come when it ends")
        } else if model
            .last_detailed()
            .is_some_and(|last| n + KEPT_DETAILS > last)
        {
            format!("iteration {n} ended soon after the one before: a running job works out an iteration's phases and top ops at most {} times a second (←/→: a neighbour)", 1000 / DETAIL_EVERY.as_millis())
        } else {
            format!(
                "the ops of iteration {n} are no longer kept (a running job keeps the last {KEPT_DETAILS} iterations' details)"
            )
        };
        f.render_widget(Paragraph::new(format!(" {why}")).style(dim()), area);
        return;
    };
    let phases = d.phases.len().min(6) as u16;
    let [top, rest] =
        Layout::vertical([Constraint::Length(phases + 1), Constraint::Min(1)]).areas(area);
    let header =
        Row::new(["phase", "ops", "peak allocated", "change"].map(|h| Cell::from(h).style(bold())));
    let body: Vec<Row> = (d.phases.iter())
        .map(|p| {
            let name = match p.micro_batch {
                Some(k) => format!("{} (micro-batch {k} of {})", p.phase, p.micro_batches),
                None if p.calls > 1 => format!("{} ({} calls)", p.phase, p.calls),
                None => p.phase.to_string(),
            };
            Row::new(vec![
                Cell::from(name),
                Cell::from(thousands(p.end_op - p.first_op)),
                Cell::from(bytes(p.peak_allocated_bytes)),
                Cell::from(signed(p.allocated_change_bytes, Units::Auto)),
            ])
        })
        .collect();
    let widths = [
        Constraint::Fill(2),
        Constraint::Length(9),
        Constraint::Length(15),
        Constraint::Length(13),
    ];
    f.render_widget(Table::new(body, widths).header(header), top);
    let header = Row::new(["op", "name", "allocated by it"].map(|h| Cell::from(h).style(bold())));
    let body: Vec<Row> = (d.top_ops.iter())
        .filter(|t| matches(&t.op, &ui.search))
        .skip(ui.scroll)
        .map(|t| {
            Row::new(vec![
                Cell::from(thousands(t.op_index)),
                Cell::from(t.op.clone()),
                Cell::from(signed(t.generated_bytes, Units::Auto)),
            ])
        })
        .collect();
    let widths = [
        Constraint::Length(10),
        Constraint::Fill(1),
        Constraint::Length(15),
    ];
    f.render_widget(Table::new(body, widths).header(header), rest);
}

fn draw_growth_rows(f: &mut Frame, area: Rect, model: &StatsModel, ui: &Ui, shown: Option<usize>) {
    let header = Row::new(
        [
            "iteration",
            "allocated at start",
            "change",
            "peak",
            "peak after",
        ]
        .map(|h| Cell::from(h).style(bold())),
    );
    let end = shown
        .and_then(|n| model.rows.iter().position(|r| r.number == n))
        .map_or(model.rows.len(), |k| k + 1);
    let fit = area.height.saturating_sub(1) as usize;
    let picked: Vec<_> = (model.rows.iter().take(end))
        .filter(|r| matches(&r.peak_name, &ui.search))
        .collect();
    let from = picked.len().saturating_sub(fit + ui.scroll);
    let body: Vec<Row> = (picked.iter().enumerate().skip(from).take(fit))
        .map(|(k, r)| {
            let change = k
                .checked_sub(1)
                .map(|j| r.start_allocated - picked[j].start_allocated);
            let style = if Some(r.number) == shown {
                bold()
            } else {
                Style::default()
            };
            Row::new(vec![
                Cell::from(r.number.to_string()),
                Cell::from(bytes(r.start_allocated)),
                Cell::from(change.map_or("".into(), |c| signed(c, Units::Auto))),
                Cell::from(bytes(r.peak)),
                Cell::from(r.peak_name.clone()),
            ])
            .style(style)
        })
        .collect();
    let widths = [
        Constraint::Length(10),
        Constraint::Length(19),
        Constraint::Length(13),
        Constraint::Length(12),
        Constraint::Fill(1),
    ];
    f.render_widget(Table::new(body, widths).header(header), area);
}

fn draw_output(f: &mut Frame, area: Rect, output: Option<&Output>, scroll: usize) {
    let Some(out) = output else {
        return;
    };
    let lines = out.tail(area.height as usize + scroll);
    let shown: Vec<Line> = (lines.iter())
        .take(lines.len().saturating_sub(scroll))
        .map(|l| Line::from(l.clone()))
        .collect();
    f.render_widget(Paragraph::new(shown), area);
}

fn draw_keys(f: &mut Frame, area: Rect, ui: &Ui, h: &Heading, program: bool) {
    let text = if ui.typing {
        format!(" search: {}█   (Enter keeps it, Esc clears it)", ui.search)
    } else {
        let quit = if h.now.is_some() {
            "q quit (the recording goes on)"
        } else {
            "q quit"
        };
        let p = if program { " p" } else { "" };
        format!(" {quit} │ m o g{p} panels │ ←/→ iteration │ ↑/↓ scroll │ z zoom │ / search")
    };
    f.render_widget(Paragraph::new(text).style(dim()), area);
}
