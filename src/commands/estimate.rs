use crate::cli::EstimateArgs;
use crate::error::{Error, Result};
use crate::estimate::{self, gpus, program};
use crate::render::{self, Format};
use crate::{formats, output};

/// Runs the program as if on the GPU, writes the file, prints the verdict; exits with the
/// program's code when it failed, 1 when the run does not fit the device, else 0.
pub fn run(a: EstimateArgs) -> Result<()> {
    let (gpu, named) = gpus::resolve(&a.gpu).map_err(Error::Usage)?;
    if !matches!(a.format, Format::Text | Format::Json) {
        return Err(Error::Usage("estimate: --format text or json".into()));
    }
    let modified = |p: &std::path::Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let before = modified(&a.output);
    let run = program::run(&a.command, &gpu, named, &a.output)?;
    // no file written (the program did not start, or never imported torch): record said why
    if modified(&a.output).is_none() || modified(&a.output) == before {
        std::process::exit(if run.code == 0 { 2 } else { run.code });
    }
    let stats = formats::load_tracker(&a.output)?;
    let verdict = estimate::verdict(&stats).ok_or_else(|| {
        Error::input(
            &a.output,
            "not an estimate's file (its backend is not `estimate`)",
        )
    })?;
    let text = match a.format {
        Format::Json => render::json(&render::estimate::Report {
            file: a.output.display().to_string(),
            exit_code: run.code,
            verdict: &verdict,
            values_read: &run.reads,
        }),
        _ => render::estimate::text(&a.output, &verdict, &run.reads, run.code),
    };
    output::emit(std::path::Path::new("-"), text.as_bytes())?;
    std::process::exit(if run.code != 0 {
        run.code
    } else if verdict.fits {
        0
    } else {
        1
    })
}
