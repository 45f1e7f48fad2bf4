//! A memory chart in character cells: one column of the terminal per stretch of the run,
//! bytes stacked in layers (allocated alone, or by category) drawn in eighths of a cell
//! (`▁▂▃▄▅▆▇█`), a line over them (reserved), and marks (iterations, the peak, an OOM, the
//! moment looked at). Block characters render in every terminal and font, over SSH too.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::widgets::Widget;

use crate::model::{format_bytes, Units};

/// A mark drawn down a column, over what is not filled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mark {
    /// An iteration starts here.
    Iteration,
    /// A forward's start or its boundary with the backward.
    Phase,
    /// The run's highest allocated.
    Peak,
    /// An out-of-memory error.
    Oom,
}

/// One column of the chart.
#[derive(Clone, Debug, Default)]
pub struct Column {
    /// Bytes of each layer, bottom first.
    pub layers: Vec<f64>,
    /// A line's bytes (reserved), drawn where it is above the layers.
    pub line: Option<f64>,
    /// Marks, strongest last.
    pub marks: Vec<Mark>,
    /// Shaded: the stretch selected (an iteration).
    pub shaded: bool,
    /// The moment looked at.
    pub cursor: bool,
}

/// The chart: its columns, the colour of each layer, the top of the y axis, the x labels.
pub struct ColumnChart<'a> {
    /// One per cell column of the plot.
    pub columns: &'a [Column],
    /// Colour of each layer.
    pub colors: &'a [Color],
    /// Bytes at the top.
    pub top: f64,
    /// Left and right x labels.
    pub x_labels: (String, String),
}

/// Cell columns the y labels take.
pub const Y_LABELS: u16 = 13;
const EIGHTHS: [char; 8] = [' ', '▁', '▂', '▃', '▄', '▅', '▆', '▇'];

impl Widget for ColumnChart<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        if area.width <= Y_LABELS + 2 || area.height < 3 {
            return;
        }
        let plot = Rect {
            x: area.x + Y_LABELS,
            y: area.y,
            width: area.width - Y_LABELS,
            height: area.height - 1,
        };
        let top = if self.top > 0.0 { self.top } else { 1.0 };
        let dim = Style::default().fg(Color::DarkGray);
        for (row, label) in [
            (0, format_bytes(top, Units::Auto)),
            (plot.height / 2, format_bytes(top / 2.0, Units::Auto)),
            (plot.height - 1, "0".to_string()),
        ] {
            let text = format!("{label:>w$} ┤", w = Y_LABELS as usize - 2);
            buf.set_stringn(area.x, plot.y + row, text, Y_LABELS as usize, dim);
        }
        let unit = top / plot.height as f64;
        for (i, col) in self.columns.iter().take(plot.width as usize).enumerate() {
            let x = plot.x + i as u16;
            draw_column(col, x, plot, unit, self.colors, buf);
        }
        let y = plot.y + plot.height;
        let (left, right) = &self.x_labels;
        buf.set_stringn(plot.x, y, left, plot.width as usize, dim);
        let rx = (plot.x + plot.width).saturating_sub(right.chars().count() as u16);
        if rx > plot.x + left.chars().count() as u16 {
            buf.set_string(rx, y, right, dim);
        }
    }
}

fn draw_column(col: &Column, x: u16, plot: Rect, unit: f64, colors: &[Color], buf: &mut Buffer) {
    // the layers' tops, bottom first
    let mut bounds = Vec::with_capacity(col.layers.len());
    let mut sum = 0.0;
    for &b in &col.layers {
        sum += b.max(0.0);
        bounds.push(sum);
    }
    let fill = (sum / unit * 8.0).round() as i64;
    let line_row = col.line.filter(|&l| l > sum).map(|l| (l / unit) as i64);
    for r in 0..plot.height as i64 {
        let y = plot.y + plot.height - 1 - r as u16;
        let cell = &mut buf[(x, y)];
        let eighths = (fill - r * 8).clamp(0, 8);
        if eighths > 0 {
            // the layer at the middle of what is filled of this cell
            let mid = (r as f64 + eighths as f64 / 16.0) * unit;
            let k = bounds.partition_point(|&b| b < mid).min(bounds.len() - 1);
            let color = colors.get(k).copied().unwrap_or(Color::Gray);
            let ch = if eighths == 8 {
                '█'
            } else {
                EIGHTHS[eighths as usize]
            };
            cell.set_char(ch).set_style(Style::default().fg(color));
        } else if line_row == Some(r) {
            cell.set_char('─')
                .set_style(Style::default().fg(Color::Yellow));
        } else if let Some(&m) = col.marks.last() {
            let (ch, color) = match m {
                Mark::Iteration => ('┊', Color::DarkGray),
                Mark::Phase => ('╎', Color::Blue),
                Mark::Peak => ('│', Color::Magenta),
                Mark::Oom => ('┃', Color::Red),
            };
            cell.set_char(ch).set_style(Style::default().fg(color));
        }
        if col.shaded {
            cell.set_bg(Color::Rgb(40, 40, 60));
        }
        if col.cursor {
            cell.modifier.insert(Modifier::REVERSED);
        }
    }
}

/// `n` columns over the ops `from..to` (or events): the column of each, for the caller to
/// fill; column `k` covers `from + k * span / n ..`.
pub fn column_of(from: u64, to: u64, n: usize, at: u64) -> Option<usize> {
    if at < from || at >= to || n == 0 {
        return None;
    }
    Some((((at - from) as u128 * n as u128) / (to - from) as u128) as usize)
}
