use clap::CommandFactory;

use crate::cli::{Cli, ManArgs};
use crate::error::{Error, Result};
use crate::output;

/// `memtrack man`: one page with every subcommand's synopsis and options; with `--dir`, also
/// `memtrack-<sub>.1` for each subcommand.
pub fn run(a: ManArgs) -> Result<()> {
    let cmd = Cli::command();
    let page = page(&cmd)?;
    if let Some(dir) = &a.dir {
        std::fs::create_dir_all(dir).map_err(|e| Error::output(dir, e))?;
        output::emit(&dir.join("memtrack.1"), &page)?;
        for sub in cmd.get_subcommands() {
            let name = format!("memtrack-{}", sub.get_name());
            let sub = sub
                .clone()
                .name(name.clone())
                .version(env!("CARGO_PKG_VERSION"));
            let mut out = Vec::new();
            clap_mangen::Man::new(sub).render(&mut out).map_err(fail)?;
            output::emit(&dir.join(format!("{name}.1")), &out)?;
        }
        eprintln!("memtrack: wrote man pages into {}", crate::quote::path(dir));
        return Ok(());
    }
    output::emit(std::path::Path::new("-"), &page)
}

fn fail(e: std::io::Error) -> Error {
    Error::Usage(format!("cannot render the man page: {e}"))
}

/// The page for `memtrack`, then a section per subcommand (its synopsis, description and
/// options as subsections), so one file documents the whole command line.
fn page(cmd: &clap::Command) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let man = clap_mangen::Man::new(cmd.clone());
    man.render_title(&mut out).map_err(fail)?;
    man.render_name_section(&mut out).map_err(fail)?;
    man.render_synopsis_section(&mut out).map_err(fail)?;
    man.render_description_section(&mut out).map_err(fail)?;
    man.render_options_section(&mut out).map_err(fail)?;
    man.render_subcommands_section(&mut out).map_err(fail)?;
    for sub in cmd.get_subcommands() {
        let full = format!("memtrack {}", sub.get_name());
        let sub = sub.clone().name(full.clone()).bin_name(full.clone());
        let m = clap_mangen::Man::new(sub.clone());
        let mut part = Vec::new();
        m.render_synopsis_section(&mut part).map_err(fail)?;
        m.render_description_section(&mut part).map_err(fail)?;
        if sub.get_arguments().any(|a| !a.is_hide_set()) {
            m.render_options_section(&mut part).map_err(fail)?;
        }
        if sub.get_after_help().is_some() {
            m.render_extra_section(&mut part).map_err(fail)?;
        }
        let part = String::from_utf8_lossy(&part).replace("\n.SH ", "\n.SS ");
        let part = part
            .strip_prefix(".SH ")
            .map_or(part.clone(), |p| format!(".SS {p}"));
        out.extend_from_slice(format!(".SH \"{}\"\n", full.to_uppercase()).as_bytes());
        out.extend_from_slice(part.as_bytes());
    }
    out.extend_from_slice(EXIT_STATUS.as_bytes());
    man.render_version_section(&mut out).map_err(fail)?;
    Ok(out)
}

/// The exit codes every command keeps (docs/architecture.md, "Errors and exit codes"), in roff.
const EXIT_STATUS: &str = r#".SH "EXIT STATUS"
.TP
\fB0\fR
Success.
.TP
\fB1\fR
A check failed: \fBmemtrack diff \-\-fail\-over\fR found growth over its threshold.
.TP
\fB2\fR
Bad usage or an input memtrack cannot read; the message names the file and what was wrong, and nothing already written is lost.
.TP
\fB3\fR
A drawing memtrack could not make (a chart or PNG that failed to render): not the input's fault.
.TP
\fBany other\fR
\fBmemtrack record\fR exits with the recorded program's own exit code (128 + the signal's number when a signal ended it).
"#;
