use crate::analysis::modules::{parse_states, select, Query};
use crate::cli::ModulesArgs;
use crate::error::{Error, Result};
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
        depth: a.depth,
        states: parse_states(&a.state).map_err(Error::Usage)?,
        iteration: a.iteration.parse().map_err(Error::Usage)?,
    };
    let view = select(record, &query).map_err(Error::Usage)?;
    let title = super::display_name(&a.file);
    let text = render::modules::modules(&view, &title, a.format, a.units);
    output::emit(&a.output, text.as_bytes())
}
