use crate::analysis::diff::{snapshot_diff, stats_diff};
use crate::cli::DiffArgs;
use crate::error::{Error, Result};
use crate::formats::{self, Input};
use crate::{output, render};

pub fn run(a: DiffArgs) -> Result<()> {
    // the two files are independent: read them on both cores
    let (before, after) = std::thread::scope(|s| {
        let after = s.spawn(|| {
            crate::progress::silence_this_thread();
            formats::load(&a.after)
        });
        let before = formats::load(&a.before);
        let after = after.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
        (before, after)
    });
    let (before, after) = (before?, after?);
    let title = format!(
        "{} → {}",
        super::display_name(&a.before),
        super::display_name(&a.after)
    );
    let (text, failed) = match (&before, &after) {
        (Input::Snapshot(x), Input::Snapshot(y)) => {
            let devices = match a.device {
                Some(_) => {
                    super::snapshot_devices(&a.before, x, a.device)?;
                    super::snapshot_devices(&a.after, y, a.device)?
                }
                None => {
                    let mut d = x.devices();
                    d.extend(y.devices());
                    d.sort_unstable();
                    d.dedup();
                    d
                }
            };
            let d = snapshot_diff(x, y, &devices, a.top, a.fail_over);
            let failed = d.gate.as_ref().is_some_and(|g| g.failed);
            (
                render::snapshot::snapshot_diff(&d, &title, a.common.format, a.common.units),
                failed,
            )
        }
        (Input::Tracker(x), Input::Tracker(y)) => {
            if a.device.is_some() {
                return Err(Error::Usage(
                    "--device applies to allocator snapshots; these are stats files".into(),
                ));
            }
            let d = stats_diff(x, y, a.top, a.fail_over);
            let failed = d.gate.as_ref().is_some_and(|g| g.failed);
            (
                render::snapshot::stats_diff(&d, &title, a.common.format, a.common.units),
                failed,
            )
        }
        (x, y) => {
            return Err(Error::Usage(format!(
                "diff compares two files of one kind: {} is {}, {} is {}",
                a.before.display(),
                x.kind(),
                a.after.display(),
                y.kind()
            )))
        }
    };
    output::emit(&a.common.output, text.as_bytes())?;
    if failed {
        return Err(Error::CheckFailed(
            "diff: peak allocated grew past --fail-over".into(),
        ));
    }
    Ok(())
}
