//! One file per subcommand: each wires formats, analysis and render, with no logic of its own.

mod allocator;
mod completions;
mod cycles;
mod export;
mod gpus;
mod man;
mod modules;
mod plot;
mod record;
mod summary;

use crate::cli::{Cli, Command};
use crate::error::Result;

pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Summary(a) => summary::run(a),
        Command::Plot(a) => plot::run(a),
        Command::Export(a) => export::run(a),
        Command::Record(a) => record::run(a),
        Command::Modules(a) => modules::run(a),
        Command::Gpus(a) => gpus::run(a),
        Command::Allocator(a) => allocator::run(a),
        Command::Cycles(a) => cycles::run(a),
        Command::Completions(a) => completions::run(a),
        Command::Man(a) => man::run(a),
    }
}

/// The name a file is shown under in titles: its file name.
pub(crate) fn display_name(path: &std::path::Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}
