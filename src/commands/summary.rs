use crate::analysis::snapshot_summary::snapshot_summary;
use crate::analysis::summary::tracker_summary;
use crate::cli::SummaryArgs;
use crate::error::{Error, Result};
use crate::formats::{self, Input};
use crate::{output, render};

pub fn run(a: SummaryArgs) -> Result<()> {
    let title = super::display_name(&a.file);
    // a snapshot's summary reads events for peaks and OOMs, never their stacks
    let text = match formats::load_with(&a.file, formats::SnapshotParts::EventsWithoutStacks)? {
        Input::Tracker(stats) => {
            if a.device.is_some() {
                return Err(Error::Usage(
                    "--device applies to allocator snapshots; this is a stats file".into(),
                ));
            }
            let summary = tracker_summary(&stats, a.top);
            render::summary::tracker(&summary, &title, a.common.format, a.common.units)
        }
        Input::Snapshot(snap) => {
            let devices = super::snapshot_devices(&a.file, &snap, a.device)?;
            let s = snapshot_summary(&snap, &devices);
            render::snapshot::summary(&s, &title, a.common.format, a.common.units)
        }
    };
    output::emit(&a.common.output, text.as_bytes())
}
