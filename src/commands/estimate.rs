use std::path::Path;

use crate::analysis::estimate_verdict::{self, Ending, Verdict};
use crate::cli::EstimateArgs;
use crate::error::{Error, Result};
use crate::estimate::{gpus, launch, program};
use crate::model::units::parse_size;
use crate::render::{self, Format};
use crate::{formats, output};

/// Runs the program (each rank asked for) as if on the GPU, writes the files, prints the
/// verdicts; exits 0 when the run fits, 1 when it does not, 4 when it fits on the path values
/// it did not have chose, 5 when the program did not finish (docs/estimate.md, "Exit codes"),
/// the worst of them over the ranks.
pub fn run(a: EstimateArgs) -> Result<()> {
    let (gpu, named) = gpus::resolve(&a.gpu).map_err(Error::Usage)?;
    if !matches!(a.format, Format::Text | Format::Json) {
        return Err(Error::Usage("estimate: --format text or json".into()));
    }
    if a.max_repeats == 0 {
        return Err(Error::Usage(
            "estimate: --max-repeats must be at least 1".into(),
        ));
    }
    if a.world_size == Some(0) || a.gpus_per_node == Some(0) {
        return Err(Error::Usage(
            "estimate: --world-size and --gpus-per-node must be at least 1".into(),
        ));
    }
    let nccl_allowance = parse_size(&a.nccl_allowance).map_err(|e| {
        Error::Usage(format!(
            "estimate: --nccl-allowance {}: {e}",
            a.nccl_allowance
        ))
    })?;
    let job = launch::job(&a.command, a.world_size, a.gpus_per_node.unwrap_or(8))
        .map_err(|e| Error::Usage(format!("estimate: {e}")))?;
    let ranks = launch::ranks(&a.ranks, job.world_size)
        .map_err(|e| Error::Usage(format!("estimate: {e}")))?;
    let settings = program::Settings {
        gpu: &gpu,
        named,
        max_repeats: a.max_repeats,
        job: &job,
        ranks: &ranks,
        nccl_allowance,
        devices: a.gpus_per_node.filter(|_| !job.distributed()),
    };
    let runs = program::run(&settings, &a.output)?;
    let mut reports = Vec::new();
    let mut code = 0;
    for run in &runs {
        // no file written (the program did not start, or never imported torch): record said
        // why; the program's own exit code is in its message
        if run.files.is_empty() {
            code = worst(code, 2);
            continue;
        }
        let mut verdicts = Vec::new();
        for file in &run.files {
            let stats = formats::load_tracker(file)?;
            let verdict = estimate_verdict::verdict(&stats).ok_or_else(|| {
                Error::input(
                    file,
                    "not an estimate's file (its backend is not `estimate`)",
                )
            })?;
            verdicts.push((file.clone(), verdict, estimate_verdict::facts(&stats)));
        }
        // the program's own file, then its own processes' that used the device (mp.spawn's
        // workers) or raised; its own, where it used none and they did, is a verdict of the
        // run only if it did not finish
        let used = |v: &Verdict| v.peak_allocated_bytes > 0;
        let raised = |v: &Verdict| matches!(v.ending, Some(Ending::Exception { .. }));
        let others_used = verdicts[1..].iter().any(|(_, v, _)| used(v));
        for (k, (file, verdict, facts)) in verdicts.into_iter().enumerate() {
            let shown = if k == 0 {
                used(&verdict) || !others_used || !verdict.finished
            } else {
                used(&verdict) || raised(&verdict)
            };
            if !shown {
                continue;
            }
            code = worst(code, exit_code(&verdict));
            reports.push((file, run.code, verdict, facts));
        }
    }
    let text = match a.format {
        Format::Json => {
            let r: Vec<render::estimate::Report> = reports
                .iter()
                .map(|(file, code, verdict, facts)| render::estimate::Report {
                    file: file.display().to_string(),
                    exit_code: *code,
                    verdict,
                    values_read: &facts.reads,
                    upper_bounds: &facts.upper_bounds,
                    unwritten: &facts.unwritten,
                })
                .collect();
            match r.as_slice() {
                [one] => render::json(one),
                _ => render::json(&render::estimate::Ranks { ranks: r }),
            }
        }
        _ => {
            let mut t = String::new();
            for (file, _, verdict, facts) in &reports {
                if !t.is_empty() {
                    t.push('\n');
                }
                t.push_str(&render::estimate::text(Path::new(file), verdict, facts));
            }
            if reports.len() > 1 {
                t.push('\n');
                t.push_str(&render::estimate::ranks_table(&reports));
            }
            t
        }
    };
    if !reports.is_empty() {
        output::emit(Path::new("-"), text.as_bytes())?;
    }
    std::process::exit(code)
}

/// `estimate`'s exit codes beyond 0 (fits) and 2 (bad usage or input).
const EXIT_DOES_NOT_FIT: i32 = 1;
/// It fits on the path the program took; values the estimate does not have chose it.
const EXIT_PATH_TAKEN: i32 = 4;
/// The program did not run to its end: no verdict.
const EXIT_DID_NOT_FINISH: i32 = 5;

/// The exit code of one verdict: a run that did not finish says so first.
fn exit_code(v: &Verdict) -> i32 {
    match (v.finished, v.fits) {
        (false, _) | (true, None) => EXIT_DID_NOT_FINISH,
        (true, Some(false)) => EXIT_DOES_NOT_FIT,
        (true, Some(true)) if v.path_taken_only => EXIT_PATH_TAKEN,
        (true, Some(true)) => 0,
    }
}

/// The exit code over ranks: did not finish, then a failure of its own, then does not fit,
/// then the path taken, then fits.
fn worst(a: i32, b: i32) -> i32 {
    let rank = |c: i32| match c {
        0 => 0,
        EXIT_PATH_TAKEN => 1,
        EXIT_DOES_NOT_FIT => 2,
        EXIT_DID_NOT_FINISH => 4,
        _ => 3,
    };
    if rank(b) > rank(a) {
        b
    } else {
        a
    }
}
