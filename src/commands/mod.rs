//! One file per subcommand: each wires formats, analysis and render, with no logic of its own.

mod allocator;
mod attach;
mod common;
mod completions;
mod cycles;
mod diff;
mod estimate;
mod export;
mod gpus;
mod man;
mod modules;
mod plot;
mod profile;
mod record;
mod segments;
mod simulate;
mod summary;
mod top;
mod trace;
mod view;

use crate::cli::{Cli, Command};
use crate::error::Result;
// what several commands do alike, named here for them as `super::…`
use common::{
    aside_error, backend, devices_with_trace_events, display_name, group_by, inconsistency_warning,
    live_at, no_trace_events, observer, replay, snapshot_devices, spool_error, warn_inconsistent,
    warn_inconsistent_input, write_picture,
};

pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Summary(a) => summary::run(a),
        Command::Plot(a) => plot::run(a),
        Command::Export(a) => export::run(a),
        Command::Record(a) => record::run(a),
        Command::Attach(a) => attach::run(a),
        Command::Modules(a) => modules::run(a),
        Command::Segments(a) => segments::run(a),
        Command::Top(a) => top::run(a),
        Command::Trace(a) => trace::run(a),
        Command::Diff(a) => diff::run(a),
        Command::Gpus(a) => gpus::run(a),
        Command::Allocator(a) => allocator::run(a),
        Command::Cycles(a) => cycles::run(a),
        Command::Simulate(a) => simulate::run(a),
        Command::Estimate(a) => estimate::run(a),
        Command::View(a) => view::run(a),
        Command::Completions(a) => completions::run(a),
        Command::Man(a) => man::run(a),
    }
}
