//! Text, tables and pictures. Only this module knows how things look.

pub mod allocator;
pub mod cycles;
pub mod error;
pub mod gpus;
pub mod graph;
pub mod memory_chart;
pub mod modules;
pub mod picture;
pub mod plot;
pub mod segments_svg;
pub mod simulate;
pub mod snapshot;
pub mod stacked;
pub mod summary;
pub mod table;
pub mod ticks;

use clap::ValueEnum;

/// How a command prints its data (`--format`). JSON is the stable contract for scripts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Default)]
pub enum Format {
    #[default]
    Text,
    Json,
    Csv,
    Markdown,
}

/// Pretty JSON with a trailing newline.
pub fn json<T: serde::Serialize>(value: &T) -> String {
    let mut s = serde_json::to_string_pretty(value).expect("model types serialize to JSON");
    s.push('\n');
    s
}

/// Text for XML (SVG, HTML): `&`, `<`, `>` and `"` escaped.
pub fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// `1,234,567`
pub fn thousands(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
