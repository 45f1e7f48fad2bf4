use crate::cli::EstimateArgs;
use crate::error::{Error, Result};
use crate::estimate::{self, gpus, program};
use crate::render::{self, Format};
use crate::{formats, output};

/// Runs the program as if on the GPU, writes the file, prints the verdict; exits 0 when the
/// run fits, 1 when it does not, 4 when it fits on the path values it did not have chose,
/// 5 when the program did not finish (docs/estimate.md, "Exit codes").
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
    let modified = |p: &std::path::Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let before = modified(&a.output);
    let settings = program::Settings {
        gpu: &gpu,
        named,
        max_repeats: a.max_repeats,
    };
    let code = program::run(&a.command, &settings, &a.output)?;
    // no file written (the program did not start, or never imported torch): record said why
    if modified(&a.output).is_none() || modified(&a.output) == before {
        std::process::exit(if code == 0 { 2 } else { code });
    }
    let stats = formats::load_tracker(&a.output)?;
    let verdict = estimate::verdict(&stats).ok_or_else(|| {
        Error::input(
            &a.output,
            "not an estimate's file (its backend is not `estimate`)",
        )
    })?;
    let facts = estimate::verdict::facts(&stats);
    let text = match a.format {
        Format::Json => render::json(&render::estimate::Report {
            file: a.output.display().to_string(),
            exit_code: code,
            verdict: &verdict,
            values_read: &facts.reads,
            upper_bounds: &facts.upper_bounds,
            unwritten: &facts.unwritten,
        }),
        _ => render::estimate::text(&a.output, &verdict, &facts),
    };
    output::emit(std::path::Path::new("-"), text.as_bytes())?;
    std::process::exit(verdict.exit_code())
}
