use crate::analysis::segments::segment_map;
use crate::cli::SegmentsArgs;
use crate::error::Result;
use crate::render::picture::PictureKind;
use crate::{formats, output, render};

pub fn run(a: SegmentsArgs) -> Result<()> {
    // the map needs no trace events
    let snap = formats::load_snapshot_parts(&a.file, formats::SnapshotParts::SegmentsOnly)?;
    super::warn_inconsistent(
        &a.file,
        &snap,
        matches!(a.format, crate::render::Format::Json),
    );
    let devices = super::snapshot_devices(&a.file, &snap, a.device)?;
    let map = segment_map(&snap, &devices);
    let title = super::display_name(&a.file);
    // a picture for .svg and .png; any other name gets the text (or --format) output
    let picture = match a.output.extension() {
        Some(e) if e.eq_ignore_ascii_case("svg") => Some(PictureKind::Svg),
        Some(e) if e.eq_ignore_ascii_case("png") => Some(PictureKind::Png),
        _ => None,
    };
    if let Some(kind) = picture {
        let svg = render::segments_svg::svg(&snap, &map, &title);
        return super::write_picture(&a.output, kind, &svg, String::new);
    }
    let text = render::segments::segments(&map, &title, a.format, a.units);
    output::emit(&a.output, text.as_bytes())
}
