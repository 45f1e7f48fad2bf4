use crate::analysis::simulate::{label_oom_sites, scenarios, simulation};
use crate::cli::SimulateArgs;
use crate::error::{Error, Result};
use crate::{formats, output, render};

pub fn run(a: SimulateArgs) -> Result<()> {
    // the replay needs the events (it walks them back and forth); their stacks name where OOMs
    // would happen: read with them, once (the file is not read again for them)
    let snap = formats::load_snapshot(&a.file)?;
    super::warn_inconsistent(
        &a.file,
        &snap,
        matches!(a.common.format, crate::render::Format::Json),
    );
    let devices = super::devices_with_trace_events(&a.file, &snap, a.device)?;
    if devices.is_empty() {
        return Err(super::no_trace_events(&a.file, "no trace events to replay"));
    }
    let scenarios = scenarios(&snap, &a.set).map_err(|e| Error::Usage(format!("--set {e}")))?;
    let mut sim = simulation(&snap, &devices, &scenarios, a.memory);
    if sim.has_ooms() {
        label_oom_sites(&mut sim, &snap);
    }
    for d in &sim.devices {
        if let Some(warning) = render::simulate::mismatch_warning(d, a.common.units) {
            eprintln!("memtrack: warning: {warning}");
        }
    }
    let title = super::display_name(&a.file);
    let text = render::simulate::simulation(&sim, &title, a.common.format, a.common.units);
    output::emit(&a.common.output, text.as_bytes())
}
