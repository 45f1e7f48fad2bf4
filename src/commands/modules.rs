use crate::analysis::modules::{parse_states, select, Query, QueryError};
use crate::cli::ModulesArgs;
use crate::error::{Error, Result};
use crate::render::Format;
use crate::{formats, output, render};

pub fn run(a: ModulesArgs) -> Result<()> {
    let stats = formats::load_tracker(&a.file)?;
    let Some(record) = stats.record.as_ref() else {
        return Err(Error::input(
            &a.file,
            "MemoryTracker stats have no module breakdown; record one with `memtrack record -o FILE -- python train.py`",
        ));
    };
    let query = Query {
        // JSON and CSV are for scripts: every module unless asked otherwise
        depth: a.depth.unwrap_or(match a.format {
            Format::Json | Format::Csv => usize::MAX,
            Format::Text | Format::Markdown => 2,
        }),
        states: parse_states(&a.state).map_err(usage)?,
        iteration: a.iteration.parse().map_err(usage)?,
    };
    let view = select(record, &query).map_err(usage)?;
    let title = super::display_name(&a.file);
    let text = render::modules::modules(&view, &title, a.format, a.units);
    output::emit(&a.output, text.as_bytes())
}

/// A query error as the user's message: the argument that gave the value, then what is wrong.
fn usage(e: QueryError) -> Error {
    Error::Usage(match &e {
        QueryError::BadIteration(_) => format!("--iteration: {e}"),
        QueryError::UnknownState { .. } => format!("--state: {e}"),
        QueryError::NoSuchIteration { asked, .. } => format!("--iteration {asked}: {e}"),
    })
}
