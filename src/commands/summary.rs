use crate::analysis::summary::{cross_rank, tracker_summary};
use crate::cli::SummaryArgs;
use crate::error::Result;
use crate::{formats, output, render};

pub fn run(a: SummaryArgs) -> Result<()> {
    let (format, units) = (a.common.format, a.common.units);
    let text = if let [file] = a.files.as_slice() {
        let stats = formats::load_tracker(file)?;
        let summary = tracker_summary(&stats, a.top);
        render::summary::tracker(&summary, &super::display_name(file), format, units)
    } else {
        let mut loaded = Vec::with_capacity(a.files.len());
        for f in &a.files {
            loaded.push((super::display_name(f), formats::load_tracker(f)?));
        }
        let refs: Vec<(String, &_)> = loaded.iter().map(|(n, s)| (n.clone(), s)).collect();
        let c = cross_rank(&refs);
        let each: Vec<_> = loaded
            .iter()
            .map(|(n, s)| (n.clone(), tracker_summary(s, a.top)))
            .collect();
        render::summary::cross_rank(&c, &each, format, units)
    };
    output::emit(&a.common.output, text.as_bytes())
}
