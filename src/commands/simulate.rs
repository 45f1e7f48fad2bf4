use crate::analysis::simulate::{label_oom_sites, scenarios, simulation};
use crate::analysis::timeline::Timelines;
use crate::cli::SimulateArgs;
use crate::error::{Error, Result};
use crate::formats::{self, event_spool::EventSpool};
use crate::{output, render};

pub fn run(a: SimulateArgs) -> Result<()> {
    // the replays walk the events several times (back once to the state before the trace,
    // forward to replay them): they are put aside on disk as they are read, with their stacks
    // (which name where OOMs would happen), so memory does not grow with the trace
    let spool = EventSpool::new().map_err(super::spool_error("simulate"))?;
    let mut sink = (Timelines::new(false), spool);
    let snap = formats::load_snapshot_streaming(&a.file, formats::SnapshotParts::All, &mut sink)?;
    let (mut timelines, mut events) = sink;
    events.finish().map_err(super::spool_error("simulate"))?;
    super::warn_inconsistent(
        &a.file,
        &snap,
        matches!(a.common.format, crate::render::Format::Json),
    );
    let devices = super::devices_with_trace_events(&a.file, &snap, a.device)?;
    if devices.is_empty() {
        return Err(super::no_trace_events(&a.file, "no trace events to replay"));
    }
    let recorded: Vec<_> = devices
        .iter()
        .map(|&d| timelines.take(d).finish(&snap, d))
        .collect();
    let scenarios = scenarios(&snap, &a.set).map_err(|e| Error::Usage(format!("--set {e}")))?;
    let mut sim = simulation(
        &snap,
        &devices,
        &recorded,
        &mut events,
        &scenarios,
        a.memory,
    )
    .map_err(super::spool_error("simulate"))?;
    if sim.has_ooms() {
        label_oom_sites(&mut sim, &snap, &mut events).map_err(super::spool_error("simulate"))?;
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
