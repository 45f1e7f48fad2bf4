use std::path::Path;

use crate::analysis::diff::{snapshot_diff, snapshot_side, stats_diff, SnapshotSide};
use crate::analysis::groups::GroupBy;
use crate::analysis::moment::Moment;
use crate::analysis::sites::{LiveAtMoments, LiveConfig};
use crate::cli::DiffArgs;
use crate::error::{Error, Result};
use crate::formats::{self, event_spool::EventSpool, Input};
use crate::model::TrackerStats;
use crate::{output, render};

/// One file as `diff` keeps it: a snapshot reduced to what is compared (its devices too), or
/// a stats file whole (small).
enum Side {
    Snapshot(SnapshotSide, Vec<u32>),
    Stats(Box<TrackerStats>),
}

/// A file read: what is compared and the kind of file.
type Read = (Side, &'static str);

/// A file read and its inconsistency warning, if any (said before whatever went wrong after
/// the reading).
type Reading = Result<(Option<String>, Result<Read>)>;

/// Read `path` and keep what `diff` compares; a snapshot is let go of when that is taken,
/// and its trace events as they are read (its totals and what was live at its peak are
/// gathered from them as they go by; put aside and replayed when categories are judged).
fn read_side(path: &Path, device: Option<u32>, by: &GroupBy, json: bool) -> Reading {
    let peaks = (!by.needs_replay()).then(|| {
        LiveAtMoments::new(LiveConfig {
            extra: by.extra(&[], 0),
            ..LiveConfig::default()
        })
    });
    let spool = match by.needs_replay() {
        true => Some(EventSpool::new().map_err(super::aside_error(path))?),
        false => None,
    };
    let mut sink = (peaks, spool);
    let input = formats::load_streaming(path, formats::SnapshotParts::All, &mut sink)?;
    let (mut peaks, mut spool) = sink;
    let kind = input.kind();
    Ok(match input {
        Input::Snapshot(s) => {
            let warning = super::inconsistency_warning(path, &s, json);
            let side = super::snapshot_devices(path, &s, device).and_then(|devices| {
                let gathered = match (&mut peaks, &mut spool) {
                    (Some(peaks), _) => devices.iter().map(|&d| peaks.take(&s, d)).collect(),
                    (None, Some(spool)) => {
                        spool.finish().map_err(super::aside_error(path))?;
                        super::replay(path, &s, &devices, spool, &Moment::Peak, by, false)?
                    }
                    (None, None) => unreachable!("one of them gathers"),
                };
                let side = snapshot_side(&s, &devices, gathered, by);
                Ok((Side::Snapshot(side, devices), kind))
            });
            (warning, side)
        }
        Input::Tracker(t) => (None, Ok((Side::Stats(t), kind))),
    })
}

/// Files that together are at most this large are read both at once, one a thread (the
/// machine's second core otherwise idles through part of each reading); larger ones one after
/// the other, so that two large snapshots are never held at once (a reading of a 10 GB capture
/// holds about 650 MiB at its peak).
const BOTH_AT_ONCE_BYTES: u64 = 2_500_000_000;

/// Both files read: each one's warning said (in the files' order), the first error returned as
/// reading them one after the other would.
fn read_sides(a: &DiffArgs, by: &GroupBy, json: bool) -> Result<(Read, Read)> {
    let size = |p: &Path| std::fs::metadata(p).map_or(u64::MAX, |m| m.len());
    let said = |r: Reading| -> Result<Read> {
        let (warning, read) = r?;
        if let Some(w) = warning {
            eprintln!("{w}");
        }
        read
    };
    let small = size(&a.before).saturating_add(size(&a.after)) <= BOTH_AT_ONCE_BYTES;
    let multi = std::thread::available_parallelism().is_ok_and(|n| n.get() > 1);
    if !(small && multi) {
        let before = said(read_side(&a.before, a.device, by, json))?;
        let after = said(read_side(&a.after, a.device, by, json))?;
        return Ok((before, after));
    }
    let (before, after) = std::thread::scope(|scope| {
        let after = scope.spawn(|| read_side(&a.after, a.device, by, json));
        let before = read_side(&a.before, a.device, by, json);
        // a panic in a reading is a bug: let it surface as on one thread
        let after = after
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        (before, after)
    });
    let before = said(before)?;
    let after = said(after)?;
    Ok((before, after))
}

pub fn run(a: DiffArgs) -> Result<()> {
    if super::profile::any_trace(&[a.before.clone(), a.after.clone()]) {
        return super::profile::diff(a);
    }
    let by = super::group_by(a.group_by, a.rules.as_deref())?;
    if by.needs_annotations() {
        return Err(Error::Usage(
            "diff groups by site, user, category, metadata, compile or --rules; annotation \
             ranges are read after the trace, which diff does not keep"
                .into(),
        ));
    }
    let json = matches!(a.common.format, crate::render::Format::Json);
    let ((before, before_kind), (after, after_kind)) = read_sides(&a, &by, json)?;
    let title = format!(
        "{} → {}",
        super::display_name(&a.before),
        super::display_name(&a.after)
    );
    let (text, failed) = match (before, after) {
        (Side::Snapshot(x, mut devices), Side::Snapshot(y, theirs)) => {
            devices.extend(theirs);
            devices.sort_unstable();
            devices.dedup();
            let d = snapshot_diff(x, y, &devices, a.top, a.fail_over);
            let failed = d.gate.as_ref().is_some_and(|g| g.failed);
            (
                render::diff::snapshot_diff(&d, &title, a.common.format, a.common.units),
                failed,
            )
        }
        (Side::Stats(x), Side::Stats(y)) => {
            if a.device.is_some() {
                return Err(Error::Usage(
                    "--device applies to allocator snapshots; these are stats files".into(),
                ));
            }
            let d = stats_diff(&x, &y, a.top, a.fail_over);
            let failed = d.gate.as_ref().is_some_and(|g| g.failed);
            (
                render::diff::stats_diff(&d, &title, a.common.format, a.common.units),
                failed,
            )
        }
        _ => {
            return Err(Error::Usage(format!(
                "diff compares two files of one kind: {} is {}, {} is {}",
                crate::quote::path(&a.before),
                before_kind,
                crate::quote::path(&a.after),
                after_kind
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
