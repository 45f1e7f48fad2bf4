//! The commands users know, over torch.profiler traces (docs/profiler.md): each command's
//! `run` hands a trace here when `formats::profiler_trace::sniff` says its input is one.

use std::path::{Path, PathBuf};

use crate::analysis::profile_diff::profile_diff;
use crate::analysis::profile_summary::{device_memory, profile_summary, Indexed};
use crate::cli::{DiffArgs, ExportArgs, GroupByArg, PlotArgs, SummaryArgs, TopArgs};
use crate::error::{Error, Result};
use crate::formats::profiler_trace::{self, json::ProfileJson};
use crate::model::profile::RangeKind;
use crate::render::picture::{self, PictureKind};
use crate::{output, render};

/// Whether any of `paths` is a trace (or a folder of them).
pub fn any_trace(paths: &[PathBuf]) -> bool {
    paths.iter().any(|p| profiler_trace::sniff(p))
}

/// Whether every path is a trace (or a folder of them): `summary` of several files compares
/// files of one kind, and a JSON beside snapshots is a summary of one, read back.
pub fn all_traces(paths: &[PathBuf]) -> bool {
    !paths.is_empty() && paths.iter().all(|p| profiler_trace::sniff(p))
}

fn no_device(device: Option<u32>) -> Result<()> {
    match device {
        Some(_) => Err(Error::Usage(
            "--device applies to allocator snapshots; a torch.profiler trace lists each of its devices".into(),
        )),
        None => Ok(()),
    }
}

/// Every trace the paths name (folders expanded), each with the name it is shown under.
fn traces(paths: &[PathBuf]) -> Result<Vec<(String, PathBuf)>> {
    let mut out = Vec::new();
    for p in paths {
        for f in profiler_trace::files(p)? {
            out.push((super::display_name(&f), f));
        }
    }
    Ok(out)
}

/// One file, for the commands that read one trace.
fn one(path: &Path, command: &str) -> Result<PathBuf> {
    let mut files = profiler_trace::files(path)?;
    if files.len() != 1 {
        return Err(Error::input(
            path,
            format!(
                "a folder of {} traces: `{command}` reads one; name one of its files (`summary` of the folder compares them)",
                files.len()
            ),
        ));
    }
    Ok(files.remove(0))
}

pub fn summary(a: SummaryArgs) -> Result<()> {
    no_device(a.device)?;
    let (format, units) = (a.common.format, a.common.units);
    let files = traces(&a.files)?;
    let text = if let [(name, file)] = files.as_slice() {
        let trace = profiler_trace::load(file)?;
        render::profile::summary(&profile_summary(&trace, a.top), name, format, units)
    } else {
        let mut each = Vec::with_capacity(files.len());
        for (name, file) in &files {
            // one trace at a time: each is let go of once summarized
            let trace = profiler_trace::load(file)?;
            each.push((name.clone(), profile_summary(&trace, a.top)));
        }
        render::profile::ranks(&each, format, units)
    };
    output::emit(&a.common.output, text.as_bytes())
}

pub fn top(a: TopArgs) -> Result<()> {
    no_device(a.device)?;
    let file = one(&a.file, "top")?;
    if a.folded || a.at.is_some() || a.rules.is_some() || a.group_by != GroupByArg::Site {
        return Err(Error::Usage(format!(
            "{}: --folded, --at, --group-by and --rules apply to allocator snapshots; `top` of a torch.profiler trace lists bytes by op, Python function and annotation",
            crate::quote::path(&file)
        )));
    }
    let trace = profiler_trace::load(&file)?;
    let ix = Indexed::new(&trace);
    let keep = |mut rows: Vec<_>| {
        let mut rows: Vec<crate::analysis::profile_summary::Within> = std::mem::take(&mut rows);
        rows.truncate(a.top);
        rows
    };
    let ops = keep(ix.attribute(RangeKind::Op).0);
    let functions = keep(ix.attribute(RangeKind::Python).0);
    let annotations = keep(ix.attribute(RangeKind::Annotation).0);
    let groups = [
        ("ops", ops.as_slice()),
        ("functions", functions.as_slice()),
        ("annotations", annotations.as_slice()),
    ];
    let text = render::profile::top(
        &groups,
        &super::display_name(&file),
        a.common.format,
        a.common.units,
    );
    output::emit(&a.common.output, text.as_bytes())
}

pub fn diff(a: DiffArgs) -> Result<()> {
    no_device(a.device)?;
    if a.rules.is_some() || a.group_by != GroupByArg::Site {
        return Err(Error::Usage(
            "--group-by and --rules apply to allocator snapshots; `diff` of torch.profiler traces compares peaks and ops".into(),
        ));
    }
    for p in [&a.before, &a.after] {
        if !profiler_trace::sniff(p) {
            return Err(Error::Usage(format!(
                "diff compares two files of one kind: {} is a torch.profiler trace, {} is not",
                crate::quote::path(if p == &a.before { &a.after } else { &a.before }),
                crate::quote::path(p)
            )));
        }
    }
    let side = |p: &Path| -> Result<_> {
        let trace = profiler_trace::load(&one(p, "diff")?)?;
        let ix = Indexed::new(&trace);
        Ok((device_memory(&ix), ix.attribute(RangeKind::Op).0))
    };
    let (b, a2) = (side(&a.before)?, side(&a.after)?);
    let d = profile_diff((&b.0, &b.1), (&a2.0, &a2.1), a.top, a.fail_over);
    let title = format!(
        "{} → {}",
        super::display_name(&a.before),
        super::display_name(&a.after)
    );
    let text = render::profile::diff(&d, &title, a.common.format, a.common.units);
    output::emit(&a.common.output, text.as_bytes())?;
    if d.gate.as_ref().is_some_and(|g| g.failed) {
        return Err(Error::CheckFailed(
            "diff: peak allocated grew past --fail-over".into(),
        ));
    }
    Ok(())
}

pub fn plot(a: PlotArgs, out: PathBuf) -> Result<()> {
    no_device(a.device)?;
    let file = one(&a.file, "plot")?;
    if a.stacked || a.split || !a.series.is_empty() {
        return Err(Error::Usage(format!(
            "{}: --stacked, --split and --series apply to snapshots and stats files; a torch.profiler trace is drawn as allocated and reserved bytes per device",
            crate::quote::path(&file)
        )));
    }
    let kind = picture::kind_of(&out, &[PictureKind::Svg, PictureKind::Png])?;
    let trace = profiler_trace::load(&file)?;
    let ix = Indexed::new(&trace);
    let title = a
        .title
        .clone()
        .unwrap_or_else(|| super::display_name(&file));
    let chart = render::profile_chart::chart(&ix, a.units, title);
    let svg = render::plot::svg(&chart)?;
    super::write_picture(&out, kind, &svg, String::new)
}

pub fn export(a: ExportArgs) -> Result<()> {
    let file = one(&a.file, "export")?;
    let trace = profiler_trace::load(&file)?;
    output::emit_with(&a.output, |w| {
        serde_json::to_writer(&mut *w, &ProfileJson(&trace))?;
        w.write_all(b"\n")
    })
}
