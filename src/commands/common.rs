//! What several commands do alike: the name a file is shown under, the devices a snapshot
//! command covers, the errors of a spool or a snapshot without trace events, writing a
//! picture, `--group-by`, the live set at a moment, warnings about a snapshot that
//! contradicts itself, and `--backend` / `--observer`.

use crate::cli::{BackendArg, ObserverArg};
use crate::error::Result;
use crate::record::{Backend, Observer};

/// The name a file is shown under in titles: its file name, quoted when a terminal would act
/// on a character of it (`quote::title`).
pub(crate) fn display_name(path: &std::path::Path) -> String {
    crate::quote::title(path.file_name().unwrap_or(path.as_os_str())).into_owned()
}

/// The devices a snapshot command covers: `--device N` (which the file must have), or all.
pub(crate) fn snapshot_devices(
    path: &std::path::Path,
    snap: &crate::model::Snapshot,
    device: Option<u32>,
) -> Result<Vec<u32>> {
    let have = snap.devices();
    match device {
        None => Ok(have),
        Some(d) if have.contains(&d) => Ok(vec![d]),
        Some(d) => {
            let list = if have.is_empty() {
                "no device holds segments or trace events".to_string()
            } else {
                format!(
                    "it has device{} {}",
                    if have.len() == 1 { "" } else { "s" },
                    have.iter()
                        .map(|d| d.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            Err(crate::error::Error::input(
                path,
                format!("no device {d} in this snapshot: {list}"),
            ))
        }
    }
}

/// Of the devices a snapshot command covers ([`snapshot_devices`]), those whose trace has
/// events: what the commands over trace events (plot, trace, simulate) work on.
pub(crate) fn devices_with_trace_events(
    path: &std::path::Path,
    snap: &crate::model::Snapshot,
    device: Option<u32>,
) -> Result<Vec<u32>> {
    Ok(snapshot_devices(path, snap, device)?
        .into_iter()
        .filter(|&d| snap.trace_lengths.get(d as usize).is_some_and(|&n| n > 0))
        .collect())
}

/// The error of a command that could not put trace events aside in a temporary file
/// (`formats::event_spool`).
pub(crate) fn spool_error(
    command: &str,
) -> impl Fn(std::io::Error) -> crate::error::Error + Copy + '_ {
    move |e| {
        crate::error::Error::Unavailable(format!(
            "{command}: cannot keep the trace events in a temporary file ({}): {e}; set TMPDIR to a directory with room",
            crate::quote::path(&std::env::temp_dir())
        ))
    }
}

/// The error of a command that needs trace events when the snapshot (or `--device N`) has
/// none: `what` says what it would have done ("no trace events to plot").
pub(crate) fn no_trace_events(path: &std::path::Path, what: &str) -> crate::error::Error {
    crate::error::Error::input(
        path,
        format!(
            "{what}: the snapshot was taken without memory history; call {}",
            crate::formats::snapshot::RECORD_HISTORY_CALL
        ),
    )
}

/// Write a drawing as `kind` (SVG, PNG from the SVG, or the command's HTML) and say where.
pub(crate) fn write_picture(
    out: &std::path::Path,
    kind: crate::render::picture::PictureKind,
    svg: &str,
    html: impl FnOnce() -> String,
) -> Result<()> {
    let bytes = crate::render::picture::encode(kind, svg, html)?;
    crate::output::emit(out, &bytes)?;
    if out.as_os_str() != "-" {
        eprintln!("memtrack: wrote {}", crate::quote::path(out));
    }
    Ok(())
}

/// The grouping `--group-by` and `--rules` ask for (the rules file read and checked).
pub(crate) fn group_by(
    by: crate::cli::GroupByArg,
    rules: Option<&std::path::Path>,
) -> Result<crate::analysis::groups::GroupBy> {
    use crate::analysis::groups::{parse_rules, GroupBy};
    use crate::cli::GroupByArg;
    if let Some(path) = rules {
        let text = std::fs::read_to_string(path)
            .map_err(|e| crate::error::Error::input(path, format!("cannot read the rules: {e}")))?;
        let rules = parse_rules(&text).map_err(|e| {
            crate::error::Error::input(
                path,
                format!("{e}; a rules file holds `name = regex` lines"),
            )
        })?;
        return Ok(GroupBy::Rules(rules));
    }
    Ok(match by {
        GroupByArg::Site => GroupBy::Site,
        GroupByArg::User => GroupBy::User,
        GroupByArg::Category => GroupBy::Category,
        GroupByArg::Annotation => GroupBy::Annotation,
        GroupByArg::Metadata => GroupBy::Metadata,
        GroupByArg::Compile => GroupBy::Compile,
    })
}

/// A snapshot, the devices asked for, and on each what was live at `moment` and at the end,
/// with what `group` needs of each allocation. The events stream by, none kept; when finding
/// the moment needs the annotations (the file holds them after its trace) or the groups need
/// the whole file (annotations, categories judged with the snapshot's stacks), the events are
/// put aside in a temporary file and replayed. `required`: a moment no event of a
/// device's trace is, is an error (else that device's report has no moment).
pub(crate) fn live_at(
    path: &std::path::Path,
    device: Option<u32>,
    moment: &crate::analysis::moment::Moment,
    group: &crate::analysis::groups::GroupBy,
    required: bool,
) -> Result<(
    crate::model::Snapshot,
    Vec<u32>,
    Vec<crate::analysis::sites::LiveAtMoment>,
)> {
    use crate::analysis::sites::{LiveAtMoments, LiveConfig};
    use crate::error::Error;
    use crate::formats::{self, event_spool::EventSpool, SnapshotParts};
    let io = aside_error(path);
    let (snap, devices, gathered) = if moment.needs_annotations() || group.needs_replay() {
        let mut spool = EventSpool::new().map_err(io)?;
        let snap = formats::load_snapshot_streaming(path, SnapshotParts::All, &mut spool)?;
        spool.finish().map_err(io)?;
        let devices = snapshot_devices(path, &snap, device)?;
        let gathered = replay(path, &snap, &devices, &mut spool, moment, group, required)?;
        (snap, devices, gathered)
    } else {
        let config = LiveConfig {
            capture: moment
                .capture(&[], 0)
                .expect("a moment that needs no annotations"),
            extra: group.extra(&[], 0),
            phases: None,
        };
        let mut sink = LiveAtMoments::new(config);
        let snap = formats::load_snapshot_streaming(path, SnapshotParts::All, &mut sink)?;
        let devices = snapshot_devices(path, &snap, device)?;
        let gathered = devices.iter().map(|&d| sink.take(&snap, d)).collect();
        (snap, devices, gathered)
    };
    if required && *moment != crate::analysis::moment::Moment::End {
        for (&d, g) in devices.iter().zip(&gathered) {
            if g.at.is_none() {
                return Err(Error::input(
                    path,
                    moment.not_found(d, g.timeline.events, g.ooms),
                ));
            }
        }
    }
    Ok((snap, devices, gathered))
}

/// The error of putting `path`'s trace events aside in a temporary file.
pub(crate) fn aside_error(
    path: &std::path::Path,
) -> impl Fn(std::io::Error) -> crate::error::Error + Copy + '_ {
    move |e| crate::error::Error::input(path, format!("putting trace events aside: {e}"))
}

/// What was live at `moment` and at the end on each of `devices`, from the events `spool` put
/// aside (with the snapshot's stacks: the annotations and the stacks' phases are known).
/// `required`: a moment the annotations cannot place is an error (else no moment).
pub(crate) fn replay(
    path: &std::path::Path,
    snap: &crate::model::Snapshot,
    devices: &[u32],
    spool: &mut crate::formats::event_spool::EventSpool,
    moment: &crate::analysis::moment::Moment,
    group: &crate::analysis::groups::GroupBy,
    required: bool,
) -> Result<Vec<crate::analysis::sites::LiveAtMoment>> {
    use crate::analysis::sites::{gather, Capture, LiveConfig};
    use crate::error::Error;
    let io = aside_error(path);
    let phases = group.phases(snap);
    let mut gathered = Vec::new();
    for &d in devices {
        let capture = match moment.capture(&snap.annotations, d) {
            Ok(c) => c,
            Err(m) if required => return Err(Error::input(path, m)),
            Err(_) => Capture::End,
        };
        let config = LiveConfig {
            capture,
            extra: group.extra(&snap.annotations, d),
            phases: phases.clone(),
        };
        gathered.push(gather(spool, snap, d, config).map_err(io)?);
    }
    Ok(gathered)
}

/// Say, once per file read, where a snapshot contradicts itself (`analysis::consistency`):
/// a warning on stderr, one JSON line there under `--format json` (stdout keeps the command's
/// own document). The command goes on with the figures the file gives.
pub(crate) fn warn_inconsistent(path: &std::path::Path, snap: &crate::model::Snapshot, json: bool) {
    if let Some(warning) = inconsistency_warning(path, snap, json) {
        eprintln!("{warning}");
    }
}

/// The line `warn_inconsistent` writes, if any (for a command that reads files on several
/// threads and says their warnings in the files' order).
pub(crate) fn inconsistency_warning(
    path: &std::path::Path,
    snap: &crate::model::Snapshot,
    json: bool,
) -> Option<String> {
    let found = crate::analysis::consistency::check(snap);
    if found.is_empty() {
        return None;
    }
    if json {
        let doc = serde_json::json!({
            "kind": "warning",
            "warning": "inconsistent_snapshot",
            "file": path.display().to_string(),
            "segments": found,
        });
        return Some(doc.to_string());
    }
    const SHOWN: usize = 3;
    let mut said: Vec<String> = found.iter().take(SHOWN).map(|d| d.describe()).collect();
    if found.len() > SHOWN {
        said.push(format!("and {} more", found.len() - SHOWN));
    }
    Some(format!(
        "memtrack: warning: {}: the capture contradicts itself in {} segment(s); the figures \
         shown are the file's: {}",
        crate::quote::quote(path.file_name().unwrap_or(path.as_os_str())),
        found.len(),
        said.join("; ")
    ))
}

/// `warn_inconsistent` for any input read (a snapshot is checked; tracker stats are not).
pub(crate) fn warn_inconsistent_input(
    path: &std::path::Path,
    input: &crate::formats::Input,
    json: bool,
) {
    if let crate::formats::Input::Snapshot(s) = input {
        warn_inconsistent(path, s, json);
    }
}

/// `--backend` as `record` and `attach` take it.
pub(crate) fn backend(a: BackendArg) -> Backend {
    match a {
        BackendArg::Auto => Backend::Auto,
        BackendArg::Cuda => Backend::Cuda,
        BackendArg::Cpu => Backend::Cpu,
    }
}

/// `--observer` as `record` and `attach` take it.
pub(crate) fn observer(a: ObserverArg) -> Observer {
    match a {
        ObserverArg::Auto => Observer::Auto,
        ObserverArg::Python => Observer::Python,
        ObserverArg::Compiled => Observer::Compiled,
    }
}
