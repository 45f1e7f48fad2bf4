use crate::analysis::segments::segment_map;
use crate::cli::SegmentsArgs;
use crate::error::Result;
use crate::{formats, output, render};

pub fn run(a: SegmentsArgs) -> Result<()> {
    // the map needs no trace events
    let snap = formats::load_snapshot_parts(&a.file, formats::SnapshotParts::SegmentsOnly)?;
    let devices = super::snapshot_devices(&a.file, &snap, a.device)?;
    let map = segment_map(&snap, &devices);
    let title = super::display_name(&a.file);
    let is_svg = a
        .output
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("svg"));
    if is_svg {
        let svg = render::segments_svg::svg(&snap, &map, &title);
        output::emit(&a.output, svg.as_bytes())?;
        eprintln!("memtrack: wrote {}", a.output.display());
        return Ok(());
    }
    let text = render::snapshot::segments(&map, &title, a.format, a.units);
    output::emit(&a.output, text.as_bytes())
}
