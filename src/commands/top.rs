use crate::analysis::sites::{folded, site_report, Moment};
use crate::cli::{MomentArg, TopArgs};
use crate::error::Result;
use crate::{formats, output, render};

fn moment(m: MomentArg) -> Moment {
    match m {
        MomentArg::End => Moment::End,
        MomentArg::Peak => Moment::Peak,
    }
}

pub fn run(a: TopArgs) -> Result<()> {
    let snap = formats::load_snapshot(&a.file)?;
    let devices = super::snapshot_devices(&a.file, &snap, a.device)?;
    if a.folded {
        let several = devices.len() > 1;
        let mut out = String::new();
        for &d in &devices {
            let prefix = format!("cuda:{d}");
            out.push_str(&folded(
                &snap,
                d,
                moment(a.at),
                several.then_some(prefix.as_str()),
            ));
        }
        return output::emit(&a.common.output, out.as_bytes());
    }
    let by = moment(a.by.unwrap_or(MomentArg::Peak));
    let reports: Vec<_> = devices
        .iter()
        .map(|&d| site_report(&snap, d, a.top, by))
        .collect();
    let title = super::display_name(&a.file);
    let text = render::snapshot::top(&reports, &title, a.common.format, a.common.units);
    output::emit(&a.common.output, text.as_bytes())
}
