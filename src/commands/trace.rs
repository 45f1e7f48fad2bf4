use crate::analysis::trace_listing::listing;
use crate::cli::TraceArgs;
use crate::error::Result;
use crate::{formats, output, render};

pub fn run(a: TraceArgs) -> Result<()> {
    let snap = formats::load_snapshot_parts(&a.file, formats::SnapshotParts::EventsWithoutStacks)?;
    let devices = match a.device {
        Some(_) => super::snapshot_devices(&a.file, &snap, a.device)?,
        // as `_memory_viz trace`: every device whose trace has entries
        None => (0..snap.traces.len() as u32)
            .filter(|&d| snap.trace_lengths[d as usize] > 0)
            .collect(),
    };
    let listings: Vec<_> = devices.iter().map(|&d| listing(&snap, d)).collect();
    let text = render::snapshot::trace(&snap, &listings, a.common.format);
    output::emit(&a.common.output, text.as_bytes())
}
