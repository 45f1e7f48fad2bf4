use crate::analysis::trace_listing::ListingTotals;
use crate::cli::TraceArgs;
use crate::error::Result;
use crate::formats::event_spool::EventSpool;
use crate::formats::{self, SnapshotParts};
use crate::model::trace::TraceEvents;
use crate::progress::Stage;
use crate::{output, render};

pub fn run(a: TraceArgs) -> Result<()> {
    // The listing starts with its count of entries and names allocations in the final
    // segments, which the file gives only once read: the events are put aside on disk as
    // they are read (not in memory), then read back to be listed.
    let spool_error = super::spool_error("trace");
    let spool = EventSpool::new().map_err(spool_error)?;
    let mut sink = (ListingTotals::default(), spool);
    let snap =
        formats::load_snapshot_streaming(&a.file, SnapshotParts::EventsWithoutStacks, &mut sink)?;
    super::warn_inconsistent(
        &a.file,
        &snap,
        matches!(a.common.format, crate::render::Format::Json),
    );
    let (mut totals, mut spool) = sink;
    spool.finish().map_err(spool_error)?;
    // as `_memory_viz trace`: every device whose trace has entries
    let devices = super::devices_with_trace_events(&a.file, &snap, a.device)?;
    if devices.is_empty() {
        let which = match a.device {
            Some(d) => format!("device {d} has no trace events"),
            None => "no trace events".to_string(),
        };
        return Err(super::no_trace_events(&a.file, &format!("{which} to list")));
    }
    let listings: Vec<_> = devices.iter().map(|&d| totals.take(d)).collect();
    let events: &mut dyn TraceEvents = &mut spool;
    // (a spinner only when the listing goes to a file: on stdout it would mix with it)
    let _writing = (a.common.output.as_os_str() != "-").then(|| Stage::new("listing"));
    output::emit_with(&a.common.output, |w| {
        render::trace::write_trace(w, &snap, &listings, events, a.common.format)
    })
}
