use crate::analysis::snapshot_summary::{add_simulate_suggestions, snapshot_summary};
use crate::analysis::summary::{cross_rank, tracker_summary};
use crate::cli::SummaryArgs;
use crate::error::{Error, Result};
use crate::formats::{self, Input};
use crate::{output, render};

const SEVERAL_SNAPSHOTS: &str = "is an allocator snapshot: `summary` of several files compares \
    the stats files of a job's ranks (`memtrack record` or save_stats). Summarize snapshots one \
    at a time (`memtrack summary a.pickle`), or compare two with `memtrack diff a.pickle b.pickle`";

pub fn run(a: SummaryArgs) -> Result<()> {
    let (format, units) = (a.common.format, a.common.units);
    let text = if let [file] = a.files.as_slice() {
        let title = super::display_name(file);
        // a snapshot's summary reads events for peaks and OOMs, never their stacks
        match formats::load_with(file, formats::SnapshotParts::EventsWithoutStacks)? {
            Input::Tracker(stats) => {
                if a.device.is_some() {
                    return Err(Error::Usage(
                        "--device applies to allocator snapshots; this is a stats file".into(),
                    ));
                }
                let summary = tracker_summary(&stats, a.top);
                render::summary::tracker(&summary, &title, format, units)
            }
            Input::Snapshot(snap) => {
                let devices = super::snapshot_devices(file, &snap, a.device)?;
                let mut s = snapshot_summary(&snap, &devices);
                add_simulate_suggestions(&mut s, &snap);
                render::snapshot::summary(&s, &title, format, units)
            }
        }
    } else {
        let mut loaded = Vec::with_capacity(a.files.len());
        for f in &a.files {
            match formats::load_with(f, formats::SnapshotParts::SegmentsOnly)? {
                Input::Tracker(stats) => loaded.push((super::display_name(f), *stats)),
                Input::Snapshot(_) => return Err(Error::input(f, SEVERAL_SNAPSHOTS)),
            }
        }
        let refs: Vec<(String, &_)> = loaded.iter().map(|(n, s)| (n.clone(), s)).collect();
        let c = cross_rank(&refs);
        let each: Vec<_> = loaded
            .iter()
            .map(|(n, s)| (n.clone(), tracker_summary(s, a.top)))
            .collect();
        render::summary::cross_rank(&c, &each, format, units)
    };
    output::emit(&a.common.output, text.as_bytes())
}
