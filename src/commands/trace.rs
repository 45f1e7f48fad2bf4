use crate::analysis::trace_listing::listing;
use crate::cli::TraceArgs;
use crate::error::Result;
use crate::{formats, output, render};

pub fn run(a: TraceArgs) -> Result<()> {
    let snap = formats::load_snapshot_parts(&a.file, formats::SnapshotParts::EventsWithoutStacks)?;
    // as `_memory_viz trace`: every device whose trace has entries
    let devices = super::devices_with_trace_events(&a.file, &snap, a.device)?;
    if devices.is_empty() {
        let which = match a.device {
            Some(d) => format!("device {d} has no trace events"),
            None => "no trace events".to_string(),
        };
        return Err(super::no_trace_events(&a.file, &format!("{which} to list")));
    }
    let listings: Vec<_> = devices.iter().map(|&d| listing(&snap, d)).collect();
    output::emit_with(&a.common.output, |w| {
        render::snapshot::write_trace(w, &snap, &listings, a.common.format)
    })
}
