//! Text, tables and pictures. Only this module knows how things look.

pub mod allocator;
pub mod cycles;
pub mod diff;
pub mod document;
pub mod error;
pub mod estimate;
pub mod gpus;
pub mod graph;
pub mod growth;
pub mod memory_chart;
pub mod modules;
pub mod picture;
pub mod plot;
pub mod profile;
pub mod profile_chart;
pub mod ranks;
pub mod segments;
pub mod segments_svg;
pub mod simulate;
pub mod snapshot_summary;
pub mod stacked;
pub mod summary;
pub mod table;
pub mod ticks;
pub mod top;
pub mod trace;

use clap::ValueEnum;

pub use crate::model::thousands;
use crate::model::{format_bytes, Units};

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

/// Bytes with a `+` when they grew: `+1.50 MiB`, `-2.00 KiB`, `0 B`.
pub fn signed(bytes: f64, units: Units) -> String {
    if bytes > 0.0 {
        format!("+{}", format_bytes(bytes, units))
    } else {
        format_bytes(bytes, units)
    }
}

/// What a capture without stacks lacks and how to record one that has them; `shown`: how the
/// report at hand names an allocation without a stack.
pub fn no_stacks_note(shown: &str) -> String {
    format!(
        "No stacks: the allocations in this capture were recorded without their stacks, so \
         where they were made is unknown ({shown}). To record them, call {} before they are \
         allocated: context=\"all\" keeps the stack of every allocation and free, stacks=\"all\" \
         adds the C++ frames to the Python ones.",
        crate::formats::snapshot::RECORD_STACKS_CALL
    )
}

/// `12.3%`, or `-` when there is no share to give.
pub fn pct(p: Option<f64>) -> String {
    p.map_or_else(|| "-".into(), |p| format!("{p:.1}%"))
}
