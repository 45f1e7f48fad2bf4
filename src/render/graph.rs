//! Reference cycles drawn: DOT (for Graphviz), SVG (our own layered layout, read left to
//! right as Graphviz's `rankdir=LR`), and a self-contained HTML page (the SVG inline, a
//! tooltip and a panel with each tensor's allocation stack on hover; no script from anywhere).
//!
//! Layout: the loop of references that keeps a cycle alive is the first column, top to
//! bottom, its closing reference an arc on the left; every other object is placed in the
//! column of its distance from the loop, ordered by its neighbours' heights.

use std::collections::{HashSet, VecDeque};
use std::fmt::Write;

use crate::analysis::cycles::{short_label, CycleReport};
use crate::model::{format_bytes, Cycle, Units};

pub type Item<'a> = (&'a CycleReport, &'a Cycle);

// ---- DOT ----

fn dot_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => {}
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn heading(r: &CycleReport, units: Units) -> String {
    format!(
        "Cycle {}: {} held by {} tensor{}, freed at op {} (generation {}), {} objects",
        r.number,
        format_bytes(r.bytes as f64, units),
        r.tensors,
        if r.tensors == 1 { "" } else { "s" },
        r.op_index,
        r.generation,
        r.objects
    )
}

fn node_lines(c: &Cycle, i: usize, units: Units) -> Vec<String> {
    let n = &c.nodes[i];
    let mut lines = vec![clip(&short_label(c, i), 48)];
    match &n.tensor {
        Some(t) => lines.push(format!("holds {}", format_bytes(t.bytes as f64, units))),
        None => {
            if !n.type_name.is_empty() && !lines[0].starts_with(&n.type_name) {
                lines.push(clip(&n.type_name, 48));
            }
        }
    }
    lines
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        s.chars().take(n - 1).collect::<String>() + "…"
    }
}

/// Edge kinds: part of the loop, on a path to a tensor, or another reference.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Loop,
    ToTensor,
    Other,
}

fn edge_kinds(r: &CycleReport, c: &Cycle) -> Vec<Kind> {
    let pairs = |steps: &[crate::analysis::cycles::Step]| -> Vec<(usize, usize)> {
        steps.windows(2).map(|w| (w[0].node, w[1].node)).collect()
    };
    let looped: HashSet<(usize, usize)> = pairs(&r.cycle).into_iter().collect();
    let to_tensor: HashSet<(usize, usize)> =
        r.tensor_paths.iter().flat_map(|p| pairs(&p.path)).collect();
    c.edges
        .iter()
        .map(|e| {
            if looped.contains(&(e.from, e.to)) {
                Kind::Loop
            } else if to_tensor.contains(&(e.from, e.to)) {
                Kind::ToTensor
            } else {
                Kind::Other
            }
        })
        .collect()
}

pub fn dot(items: &[Item], title: &str, units: Units) -> String {
    let mut s = String::new();
    s.push_str("digraph memtrack_cycles {\n");
    let _ = writeln!(
        s,
        "  graph [rankdir=LR, fontname=\"monospace\", label={}, labelloc=t];",
        dot_str(&format!("{title}: reference cycles that held tensors"))
    );
    s.push_str("  node [shape=box, style=\"rounded,filled\", fillcolor=white, fontname=\"monospace\", fontsize=10];\n");
    s.push_str("  edge [fontname=\"monospace\", fontsize=9, color=gray40];\n");
    for (r, c) in items {
        let id = |i: usize| format!("c{}_{}", r.number, i);
        let _ = writeln!(s, "  subgraph cluster_{} {{", r.number);
        let _ = writeln!(s, "    label={};", dot_str(&heading(r, units)));
        let in_loop: HashSet<usize> = r.loop_nodes.iter().copied().collect();
        for i in 0..c.nodes.len() {
            let lines = node_lines(c, i, units).join("\n");
            let style = if c.nodes[i].tensor.is_some() {
                ", color=\"#d62728\", fillcolor=\"#fde2e2\", penwidth=2"
            } else if in_loop.contains(&i) {
                ", color=\"#1f77b4\", fillcolor=\"#e3eefa\", penwidth=2"
            } else {
                ""
            };
            let _ = writeln!(s, "    {} [label={}{style}];", id(i), dot_str(&lines));
        }
        for (e, k) in c.edges.iter().zip(edge_kinds(r, c)) {
            let style = match k {
                Kind::Loop => ", color=\"#1f77b4\", penwidth=2",
                Kind::ToTensor => ", color=\"#d62728\"",
                Kind::Other => "",
            };
            let _ = writeln!(
                s,
                "    {} -> {} [label={}{style}];",
                id(e.from),
                id(e.to),
                dot_str(&e.label)
            );
        }
        s.push_str("  }\n");
    }
    s.push_str("}\n");
    s
}

// ---- layout ----

const CHAR_W: f64 = 7.25; // 12 px DejaVu Sans Mono
const LABEL_CHAR_W: f64 = 6.05; // 10 px
const SANS_CHAR_W: f64 = 6.6; // 12 px DejaVu Sans, on average
const LINE_H: f64 = 16.0;
const PAD: f64 = 9.0;
const ROW_GAP: f64 = 40.0;
const PANEL_HEAD: f64 = 34.0;

struct Placed {
    x: f64,
    y: f64,
    w: f64,
    h: f64,
    col: usize,
    row: usize,
    lines: Vec<String>,
}

impl Placed {
    fn cy(&self) -> f64 {
        self.y + self.h / 2.0
    }
    fn right(&self) -> f64 {
        self.x + self.w
    }
    fn bottom(&self) -> f64 {
        self.y + self.h
    }
}

struct Layout {
    nodes: Vec<Placed>,
    width: f64,
    height: f64,
}

fn label_w(s: &str) -> f64 {
    s.chars().count() as f64 * LABEL_CHAR_W
}

fn layout(r: &CycleReport, c: &Cycle, units: Units) -> Layout {
    let n = c.nodes.len();
    let mut adj: Vec<Vec<usize>> = vec![Vec::new(); n];
    for e in &c.edges {
        adj[e.from].push(e.to);
        adj[e.to].push(e.from);
    }
    // columns: distance from the loop (ignoring direction)
    let loop_order: Vec<usize> = match r.loop_nodes.len() {
        0 => Vec::new(),
        k => r.loop_nodes[..k - 1].to_vec(),
    };
    let sources: Vec<usize> = if loop_order.is_empty() {
        let mut indeg = vec![0; n];
        for e in &c.edges {
            indeg[e.to] += 1;
        }
        let s: Vec<usize> = (0..n).filter(|&i| indeg[i] == 0).collect();
        if s.is_empty() {
            vec![0]
        } else {
            s
        }
    } else {
        loop_order.clone()
    };
    let mut col = vec![usize::MAX; n];
    let mut q = VecDeque::new();
    for &s in &sources {
        col[s] = 0;
        q.push_back(s);
    }
    while let Some(x) = q.pop_front() {
        for &y in &adj[x] {
            if col[y] == usize::MAX {
                col[y] = col[x] + 1;
                q.push_back(y);
            }
        }
    }
    let last = col
        .iter()
        .copied()
        .filter(|&c| c != usize::MAX)
        .max()
        .unwrap_or(0);
    for c in col.iter_mut().filter(|c| **c == usize::MAX) {
        *c = last + 1;
    }
    let ncols = col.iter().copied().max().map_or(0, |m| m + 1);
    let mut columns: Vec<Vec<usize>> = vec![Vec::new(); ncols];
    columns[0] = sources.clone();
    for i in 0..n {
        if col[i] > 0 {
            columns[col[i]].push(i);
        }
    }
    let mut nodes: Vec<Placed> = (0..n)
        .map(|i| {
            let lines = node_lines(c, i, units);
            let chars = lines.iter().map(|l| l.chars().count()).max().unwrap_or(1);
            Placed {
                x: 0.0,
                y: 0.0,
                w: chars as f64 * CHAR_W + 2.0 * PAD,
                h: lines.len() as f64 * LINE_H + PAD,
                col: col[i],
                row: 0,
                lines,
            }
        })
        .collect();
    // order each column by the mean row of its neighbours in earlier columns
    for (k, column) in columns.iter_mut().enumerate().skip(1) {
        let mut keyed: Vec<(f64, usize)> = column
            .iter()
            .map(|&i| {
                let rows: Vec<f64> = adj[i]
                    .iter()
                    .filter(|&&j| nodes[j].col < k)
                    .map(|&j| nodes[j].row as f64)
                    .collect();
                let key = if rows.is_empty() {
                    f64::MAX
                } else {
                    rows.iter().sum::<f64>() / rows.len() as f64
                };
                (key, i)
            })
            .collect();
        keyed.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        *column = keyed.into_iter().map(|(_, i)| i).collect();
        for (row, &i) in column.iter().enumerate() {
            nodes[i].row = row;
        }
    }
    for (row, &i) in columns[0].iter().enumerate() {
        nodes[i].row = row;
    }
    // room on the left for arcs within the first column and their labels
    let mut left = 24.0;
    for e in &c.edges {
        let (a, b) = (&nodes[e.from], &nodes[e.to]);
        if e.from == e.to {
            left = f64::max(left, 62.0 + label_w(&e.label));
        } else if a.col == b.col && b.row != a.row + 1 {
            left = f64::max(
                left,
                46.0 + 14.0 * a.row.abs_diff(b.row) as f64 + label_w(&e.label),
            );
        }
    }
    // columns' x: wide enough gaps for the labels of the references between them
    let col_w: Vec<f64> = columns
        .iter()
        .map(|ids| ids.iter().map(|&i| nodes[i].w).fold(0.0, f64::max))
        .collect();
    let mut gap = vec![90.0f64; ncols];
    for e in &c.edges {
        let (a, b) = (nodes[e.from].col, nodes[e.to].col);
        if a != b {
            let k = a.min(b);
            gap[k] = gap[k].max(label_w(&e.label) + 48.0);
        }
    }
    let mut x = left;
    let mut col_x = Vec::with_capacity(ncols);
    for k in 0..ncols {
        col_x.push(x);
        x += col_w[k] + gap[k];
    }
    let width = x - gap.last().copied().unwrap_or(0.0) + 24.0;
    let col_h: Vec<f64> = columns
        .iter()
        .map(|ids| ids.iter().map(|&i| nodes[i].h + ROW_GAP).sum::<f64>() - ROW_GAP)
        .collect();
    let tallest = col_h.iter().copied().fold(0.0, f64::max);
    let top = PANEL_HEAD + 16.0;
    for (k, ids) in columns.iter().enumerate() {
        let mut y = top + (tallest - col_h[k]) / 2.0;
        for &i in ids {
            let p = &mut nodes[i];
            p.x = col_x[k] + (col_w[k] - p.w) / 2.0;
            if k == 0 {
                p.x = col_x[k]; // the loop's column is left-aligned, arcs start on one line
            }
            p.y = y;
            y += p.h + ROW_GAP;
        }
    }
    Layout {
        nodes,
        width: width.max(560.0),
        height: top + tallest + 30.0,
    }
}

// ---- SVG ----

fn xml(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

const BLUE: &str = "#1f77b4";
const RED: &str = "#d62728";
const GREY: &str = "#8c8c8c";

fn color(k: Kind) -> &'static str {
    match k {
        Kind::Loop => BLUE,
        Kind::ToTensor => RED,
        Kind::Other => GREY,
    }
}

fn marker_id(k: Kind) -> &'static str {
    match k {
        Kind::Loop => "arrow-loop",
        Kind::ToTensor => "arrow-tensor",
        Kind::Other => "arrow-other",
    }
}

/// One cycle's panel, drawn at (0, y0); `html` adds hover hooks to nodes.
/// What every panel of one drawing shares.
#[derive(Clone, Copy)]
struct Page {
    /// The drawing's width, pixels.
    width: f64,
    units: Units,
    /// Drawn for the HTML page (hover targets), not plain SVG.
    html: bool,
}

/// One cycle's panel, its top at `y0`.
fn panel(out: &mut String, page: Page, r: &CycleReport, c: &Cycle, l: &Layout, y0: f64) {
    let Page { width, units, html } = page;
    let _ = writeln!(out, "<g transform=\"translate(0,{y0:.1})\">");
    let _ = writeln!(
        out,
        "<rect x=\"8\" y=\"4\" width=\"{:.1}\" height=\"{:.1}\" rx=\"6\" fill=\"#fafafa\" stroke=\"#dddddd\"/>",
        width - 16.0,
        l.height - 8.0
    );
    let _ = writeln!(
        out,
        "<text x=\"20\" y=\"26\" class=\"head\">{}</text>",
        xml(&heading(r, units))
    );
    let kinds = edge_kinds(r, c);
    let has_reverse = |a: usize, b: usize| c.edges.iter().any(|e| e.from == b && e.to == a);
    // edges under the nodes, labels over everything
    let mut labels = String::new();
    for (e, &k) in c.edges.iter().zip(&kinds) {
        let (a, b) = (&l.nodes[e.from], &l.nodes[e.to]);
        let stroke = color(k);
        let width = if k == Kind::Loop { 2.2 } else { 1.4 };
        let (d, lx, ly, anchor) = if e.from == e.to && a.col == 0 {
            // on the left, where the first column's arcs are
            let (x, y) = (a.x, a.cy());
            (
                format!(
                    "M{x:.1},{:.1} C{:.1},{:.1} {:.1},{:.1} {x:.1},{:.1}",
                    y - 7.0,
                    x - 46.0,
                    y - 34.0,
                    x - 46.0,
                    y + 34.0,
                    y + 7.0
                ),
                x - 40.0,
                y + 4.0,
                "end",
            )
        } else if e.from == e.to {
            // above the box, clear of the references coming in from the left
            let (x, y) = (a.x + a.w * 0.5, a.y);
            (
                format!(
                    "M{:.1},{y:.1} C{:.1},{:.1} {:.1},{:.1} {:.1},{y:.1}",
                    x - 14.0,
                    x - 24.0,
                    y - 30.0,
                    x + 24.0,
                    y - 30.0,
                    x + 14.0,
                ),
                x,
                y - 26.0,
                "middle",
            )
        } else if a.col == b.col && b.row == a.row + 1 {
            let x = a.x + 28.0;
            (
                format!("M{x:.1},{:.1} L{x:.1},{:.1}", a.bottom(), b.y - 1.0),
                x + 7.0,
                (a.bottom() + b.y) / 2.0 + 4.0,
                "start",
            )
        } else if a.col == b.col {
            let bulge = 34.0 + 14.0 * a.row.abs_diff(b.row) as f64;
            let x = a.x.min(b.x);
            (
                format!(
                    "M{:.1},{:.1} C{:.1},{:.1} {:.1},{:.1} {:.1},{:.1}",
                    a.x,
                    a.cy(),
                    x - bulge,
                    a.cy(),
                    x - bulge,
                    b.cy(),
                    b.x - 1.0,
                    b.cy()
                ),
                x - bulge * 0.75 - 6.0,
                (a.cy() + b.cy()) / 2.0 + 4.0,
                "end",
            )
        } else {
            let off = if has_reverse(e.from, e.to) {
                if e.from < e.to {
                    -7.0
                } else {
                    7.0
                }
            } else {
                0.0
            };
            let (sx, sy, tx, ty) = if b.col > a.col {
                (a.right(), a.cy() + off, b.x - 1.0, b.cy() + off)
            } else {
                (a.x, a.cy() + off, b.right() + 1.0, b.cy() + off)
            };
            let dx = (tx - sx) / 2.0;
            let (c1x, c2x) = (sx + dx, tx - dx);
            let (mx, my) = (
                (sx + 3.0 * c1x + 3.0 * c2x + tx) / 8.0,
                (sy + 3.0 * sy + 3.0 * ty + ty) / 8.0,
            );
            (
                format!("M{sx:.1},{sy:.1} C{c1x:.1},{sy:.1} {c2x:.1},{ty:.1} {tx:.1},{ty:.1}"),
                mx,
                my - 4.0,
                "middle",
            )
        };
        let _ = writeln!(
            out,
            "<path d=\"{d}\" fill=\"none\" stroke=\"{stroke}\" stroke-width=\"{width}\" marker-end=\"url(#{})\"/>",
            marker_id(k)
        );
        let _ = writeln!(
            labels,
            "<text x=\"{lx:.1}\" y=\"{ly:.1}\" text-anchor=\"{anchor}\" class=\"ref\" fill=\"{}\">{}</text>",
            if k == Kind::Other { "#555555" } else { stroke },
            xml(&clip(&e.label, 40))
        );
    }
    let in_loop: HashSet<usize> = r.loop_nodes.iter().copied().collect();
    for (i, p) in l.nodes.iter().enumerate() {
        let tensor = c.nodes[i].tensor.is_some();
        let (fill, stroke, w) = if tensor {
            ("#fde2e2", RED, 2.0)
        } else if in_loop.contains(&i) {
            ("#e3eefa", BLUE, 2.0)
        } else {
            ("#ffffff", GREY, 1.0)
        };
        if html {
            let _ = writeln!(out, "<g class=\"node\" data-node=\"{}-{i}\">", r.number);
        } else {
            out.push_str("<g>\n");
        }
        let _ = writeln!(
            out,
            "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" rx=\"5\" fill=\"{fill}\" stroke=\"{stroke}\" stroke-width=\"{w}\"/>",
            p.x, p.y, p.w, p.h
        );
        for (k, line) in p.lines.iter().enumerate() {
            let _ = writeln!(
                out,
                "<text x=\"{:.1}\" y=\"{:.1}\" class=\"{}\">{}</text>",
                p.x + PAD,
                p.y + PAD / 2.0 + LINE_H * (k as f64 + 1.0) - 4.0,
                if k == 0 { "obj" } else { "sub" },
                xml(line)
            );
        }
        if !html {
            // a plain SVG still shows the stack as a native tooltip
            if let Some(t) = &c.nodes[i].tensor {
                if !t.stack.is_empty() {
                    let _ = writeln!(out, "<title>{}</title>", xml(&t.stack.join("\n")));
                }
            }
        }
        out.push_str("</g>\n");
    }
    out.push_str(&labels);
    out.push_str("</g>\n");
}

const STYLE: &str = "text { font-family: 'DejaVu Sans Mono', Menlo, Consolas, monospace; font-size: 12px; fill: #222222; }
text.title { font-family: 'DejaVu Sans', Helvetica, Arial, sans-serif; font-size: 17px; font-weight: bold; }
text.head { font-family: 'DejaVu Sans', Helvetica, Arial, sans-serif; font-size: 13px; font-weight: bold; }
text.legend { font-family: 'DejaVu Sans', Helvetica, Arial, sans-serif; font-size: 12px; }
text.sub { fill: #666666; }
text.ref { font-size: 10px; paint-order: stroke; stroke: #fafafa; stroke-width: 4px; stroke-linejoin: round; }";

fn markers() -> String {
    let mut s = String::from("<defs>\n");
    for k in [Kind::Loop, Kind::ToTensor, Kind::Other] {
        let _ = writeln!(
            s,
            "<marker id=\"{}\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" markerUnits=\"userSpaceOnUse\" markerWidth=\"10\" markerHeight=\"9\" orient=\"auto\"><path d=\"M0,0 L10,5 L0,10 z\" fill=\"{}\"/></marker>",
            marker_id(k),
            color(k)
        );
    }
    s.push_str("</defs>\n");
    s
}

/// The drawing as an SVG document (without the XML declaration when `inline`).
fn svg_doc(items: &[Item], title: &str, units: Units, html: bool) -> String {
    let layouts: Vec<Layout> = items.iter().map(|(r, c)| layout(r, c, units)).collect();
    let head_h = 74.0;
    let total: i64 = items.iter().map(|(r, _)| r.bytes).sum();
    let title_text = format!(
        "{title}: {} reference cycle{} held {} of tensors until the garbage collector ran",
        items.len(),
        if items.len() == 1 { "" } else { "s" },
        format_bytes(total as f64, units)
    );
    const LEGEND: [(&str, &str, &str); 3] = [
        ("#e3eefa", BLUE, "the loop of references that kept it alive"),
        (
            "#fde2e2",
            RED,
            "a tensor it held (and the references to it)",
        ),
        ("#ffffff", GREY, "other object"),
    ];
    let legend_w: f64 = LEGEND
        .iter()
        .map(|(_, _, t)| 24.0 + t.len() as f64 * SANS_CHAR_W + 22.0)
        .sum();
    let width = layouts
        .iter()
        .map(|l| l.width)
        .fold(legend_w + 28.0, f64::max)
        .max(title_text.chars().count() as f64 * 9.6 + 28.0);
    let height = head_h + layouts.iter().map(|l| l.height + 12.0).sum::<f64>() + 8.0;
    let mut s = String::new();
    if !html {
        s.push_str("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    }
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" viewBox=\"0 0 {width:.0} {height:.0}\">"
    );
    let _ = writeln!(s, "<style>\n{STYLE}\n</style>");
    s.push_str(&markers());
    let _ = writeln!(s, "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>");
    let total: i64 = items.iter().map(|(r, _)| r.bytes).sum();
    let _ = writeln!(
        s,
        "<text x=\"12\" y=\"26\" class=\"title\">{}</text>",
        xml(&format!(
            "{title}: {} reference cycle{} held {} of tensors until the garbage collector ran",
            items.len(),
            if items.len() == 1 { "" } else { "s" },
            format_bytes(total as f64, units)
        ))
    );
    // legend
    let mut x = 14.0;
    for (fill, stroke, text) in [
        ("#e3eefa", BLUE, "the loop of references that kept it alive"),
        (
            "#fde2e2",
            RED,
            "a tensor it held (and the references to it)",
        ),
        ("#ffffff", GREY, "other object"),
    ] {
        let _ = writeln!(
            s,
            "<rect x=\"{x:.1}\" y=\"42\" width=\"18\" height=\"13\" rx=\"3\" fill=\"{fill}\" stroke=\"{stroke}\" stroke-width=\"2\"/><text x=\"{:.1}\" y=\"53\" class=\"legend\">{}</text>",
            x + 24.0,
            xml(text)
        );
        x += 24.0 + text.len() as f64 * SANS_CHAR_W + 22.0;
    }
    let mut y = head_h;
    let page = Page { width, units, html };
    for ((r, c), l) in items.iter().zip(&layouts) {
        panel(&mut s, page, r, c, l, y);
        y += l.height + 12.0;
    }
    s.push_str("</svg>\n");
    s
}

pub fn svg(items: &[Item], title: &str, units: Units) -> String {
    svg_doc(items, title, units, false)
}

fn json_for_script(v: &serde_json::Value) -> String {
    // inside <script>, `</` would end the element
    v.to_string().replace("</", "<\\/")
}

/// A self-contained page: the drawing, a tooltip that follows the mouse over an object, and a
/// panel below with the object's details (a tensor's allocation stack).
pub fn html(items: &[Item], title: &str, units: Units) -> String {
    let svg = svg_doc(items, title, units, true);
    let mut details = serde_json::Map::new();
    for (r, c) in items {
        for (i, n) in c.nodes.iter().enumerate() {
            let mut text = format!("{}\n{}", n.label.replace('\n', " "), n.type_name);
            match &n.tensor {
                Some(t) => {
                    let _ = write!(
                        text,
                        "\nstorage of {} ({} bytes) on {}",
                        format_bytes(t.bytes as f64, units),
                        t.bytes,
                        t.device
                    );
                    if t.stack.is_empty() {
                        text.push_str("\n\nno allocation stack: it is recorded on CUDA (record --cycles turns the allocator's history on)");
                    } else {
                        text.push_str("\n\nallocated at (innermost first):\n");
                        text.push_str(&t.stack.join("\n"));
                    }
                }
                None => {
                    let refs: Vec<String> = c
                        .edges
                        .iter()
                        .filter(|e| e.from == i)
                        .map(|e| format!("  {} → {}", e.label, short_label(c, e.to)))
                        .collect();
                    if !refs.is_empty() {
                        text.push_str("\n\nholds:\n");
                        text.push_str(&refs.join("\n"));
                    }
                }
            }
            details.insert(format!("{}-{i}", r.number), serde_json::Value::String(text));
        }
    }
    let data = json_for_script(&serde_json::Value::Object(details));
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title} — reference cycles (memtrack)</title>
<style>
  body {{ margin: 0; font-family: 'DejaVu Sans', Helvetica, Arial, sans-serif; }}
  #main {{ overflow: auto; height: 62vh; border-bottom: 1px solid #ccc; }}
  #details {{ margin: 0; padding: 10px 14px; height: 34vh; overflow: auto; font: 12px 'DejaVu Sans Mono', Menlo, Consolas, monospace; white-space: pre; }}
  #tip {{ position: fixed; display: none; max-width: 70ch; pointer-events: none; background: #fffff0; border: 1px solid #999; padding: 6px 8px; font: 11px 'DejaVu Sans Mono', Menlo, Consolas, monospace; white-space: pre; box-shadow: 2px 2px 6px rgba(0,0,0,.2); }}
  g.node {{ cursor: pointer; }}
  g.node:hover rect {{ stroke-width: 3; }}
</style>
</head>
<body>
<div id="main">
{svg}</div>
<pre id="details">Point at an object to see what it is; a tensor shows where it was allocated. Click to keep it here.</pre>
<div id="tip"></div>
<script id="memtrack-data" type="application/json">{data}</script>
<script>
(function () {{
  var details = JSON.parse(document.getElementById('memtrack-data').textContent);
  var tip = document.getElementById('tip');
  var panel = document.getElementById('details');
  var pinned = false;
  document.querySelectorAll('g.node').forEach(function (g) {{
    var text = details[g.getAttribute('data-node')] || '';
    g.addEventListener('mouseover', function () {{
      tip.textContent = text;
      tip.style.display = 'block';
      if (!pinned) panel.textContent = text;
    }});
    g.addEventListener('mousemove', function (e) {{
      tip.style.left = Math.min(e.clientX + 14, window.innerWidth - tip.offsetWidth - 8) + 'px';
      tip.style.top = (e.clientY + 14) + 'px';
    }});
    g.addEventListener('mouseout', function () {{ tip.style.display = 'none'; }});
    g.addEventListener('click', function () {{ pinned = true; panel.textContent = text; }});
  }});
}})();
</script>
</body>
</html>
"#,
        title = xml(title)
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::cycles::{reports, split_into_cycles};

    #[test]
    fn drawings_name_every_object_and_reference() {
        let parts = split_into_cycles(crate::analysis::cycles::tests::sample());
        let rs = reports(&parts);
        let items: Vec<Item> = rs.iter().map(|(r, c)| (r, *c)).collect();
        let d = dot(&items, "t.pkl", Units::Auto);
        assert!(d.contains("c1_1 -> c1_2 [label=\"__dict__\""), "{d}");
        assert!(d.contains("subgraph cluster_2"), "{d}");
        let s = svg(&items, "t.pkl", Units::Auto);
        assert!(s.contains("[&#39;me&#39;]"), "{s}");
        assert!(s.contains("holds 256.00 KiB"), "{s}");
        let h = html(&items, "t.pkl", Units::Auto);
        assert!(h.contains("train.py:10:make"));
        assert!(!h.contains("src=\"http"), "no script from anywhere");
    }
}
