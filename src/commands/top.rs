use crate::analysis::sites::{folded, site_report, LiveAtPeaks, Moment};
use crate::cli::{MomentArg, TopArgs};
use crate::error::Result;
use crate::formats::{self, SnapshotParts};
use crate::{output, render};

fn moment(m: MomentArg) -> Moment {
    match m {
        MomentArg::End => Moment::End,
        MomentArg::Peak => Moment::Peak,
    }
}

pub fn run(a: TopArgs) -> Result<()> {
    if super::profile::any_trace(std::slice::from_ref(&a.file)) {
        return super::profile::top(a);
    }
    // what was live at the peak is gathered as the events stream by, with their stacks: the
    // trace is not kept; what is live at the end is in the segments
    let mut peaks = LiveAtPeaks::default();
    let at = moment(a.at);
    let snap = if a.folded && at == Moment::End {
        formats::load_snapshot_parts(&a.file, SnapshotParts::SegmentsOnly)?
    } else {
        formats::load_snapshot_streaming(&a.file, SnapshotParts::All, &mut peaks)?
    };
    let devices = super::snapshot_devices(&a.file, &snap, a.device)?;
    if a.folded {
        let several = devices.len() > 1;
        let mut out = String::new();
        for &d in &devices {
            let prefix = format!("cuda:{d}");
            let live = match at {
                Moment::Peak => peaks.take(&snap, d).1.map(|(_, live)| live),
                Moment::End => None,
            };
            out.push_str(&folded(&snap, d, live, several.then_some(prefix.as_str())));
        }
        return output::emit(&a.common.output, out.as_bytes());
    }
    let by = moment(a.by.unwrap_or(MomentArg::Peak));
    let reports: Vec<_> = devices
        .iter()
        .map(|&d| site_report(&snap, d, a.top, by, peaks.take(&snap, d).1))
        .collect();
    let title = super::display_name(&a.file);
    let text = render::top::top(&reports, &title, a.common.format, a.common.units);
    output::emit(&a.common.output, text.as_bytes())
}
