use crate::analysis::summary::tracker_summary;
use crate::cli::SummaryArgs;
use crate::error::Result;
use crate::{formats, output, render};

pub fn run(a: SummaryArgs) -> Result<()> {
    let stats = formats::load_tracker(&a.file)?;
    let summary = tracker_summary(&stats, a.top);
    let title = super::display_name(&a.file);
    let text = render::summary::tracker(&summary, &title, a.common.format, a.common.units);
    output::emit(&a.common.output, text.as_bytes())
}
