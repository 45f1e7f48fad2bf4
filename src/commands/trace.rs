use crate::analysis::trace_listing::listing;
use crate::cli::TraceArgs;
use crate::error::Result;
use crate::{formats, output, render};

pub fn run(a: TraceArgs) -> Result<()> {
    let snap = formats::load_snapshot_parts(&a.file, formats::SnapshotParts::EventsWithoutStacks)?;
    let devices: Vec<u32> = match a.device {
        Some(_) => super::snapshot_devices(&a.file, &snap, a.device)?
            .into_iter()
            .filter(|&d| snap.trace_lengths.get(d as usize).is_some_and(|&n| n > 0))
            .collect(),
        // as `_memory_viz trace`: every device whose trace has entries
        None => (0..snap.traces.len() as u32)
            .filter(|&d| snap.trace_lengths[d as usize] > 0)
            .collect(),
    };
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
