use clap::CommandFactory;

use crate::cli::{Cli, CompletionsArgs};
use crate::error::Result;
use crate::output;

pub fn run(a: CompletionsArgs) -> Result<()> {
    let mut cmd = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(a.shell, &mut cmd, "memtrack", &mut out);
    output::emit(std::path::Path::new("-"), &out)
}
