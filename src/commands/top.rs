use crate::analysis::groups::group_report;
use crate::analysis::moment::Moment;
use crate::analysis::sites::folded;
use crate::cli::TopArgs;
use crate::error::Result;
use crate::formats::{self, SnapshotParts};
use crate::{output, render};

pub fn run(a: TopArgs) -> Result<()> {
    if super::profile::any_trace(std::slice::from_ref(&a.file)) {
        return super::profile::top(a);
    }
    let group = super::group_by(a.group_by, a.rules.as_deref())?;
    // the table counts at the peak unless told; folded stacks at the end (as before --at)
    let asked = a.at.is_some();
    let moment =
        a.at.clone()
            .unwrap_or(if a.folded { Moment::End } else { Moment::Peak });
    if a.folded && moment == Moment::End {
        // what is live at the end is in the segments: no trace events needed
        let snap = formats::load_snapshot_parts(&a.file, SnapshotParts::SegmentsOnly)?;
        super::warn_inconsistent(&a.file, &snap, false);
        let devices = super::snapshot_devices(&a.file, &snap, a.device)?;
        let several = devices.len() > 1;
        let mut out = String::new();
        for &d in &devices {
            let prefix = format!("cuda:{d}");
            out.push_str(&folded(&snap, d, None, several.then_some(prefix.as_str())));
        }
        return output::emit(&a.common.output, out.as_bytes());
    }
    let (snap, devices, gathered) = super::live_at(&a.file, a.device, &moment, &group, asked)?;
    super::warn_inconsistent(
        &a.file,
        &snap,
        matches!(a.common.format, crate::render::Format::Json),
    );
    if a.folded {
        let several = devices.len() > 1;
        let mut out = String::new();
        for (&d, g) in devices.iter().zip(gathered) {
            let prefix = format!("cuda:{d}");
            let live = g.at.map(|(_, live)| live);
            out.push_str(&folded(&snap, d, live, several.then_some(prefix.as_str())));
        }
        return output::emit(&a.common.output, out.as_bytes());
    }
    let reports: Vec<_> = (devices.iter().zip(gathered))
        .map(|(&d, g)| group_report(&snap, d, a.top, group.clone(), &moment, g))
        .collect();
    let title = super::display_name(&a.file);
    let mut text = render::top::top(&reports, &title, a.common.format, a.common.units);
    if snap.allocations_have_stacks(&devices) == Some(false) {
        text.push_str(&render::top::no_stacks(a.common.format));
    }
    output::emit(&a.common.output, text.as_bytes())
}
