use crate::analysis::moment::Moment;
use crate::analysis::rewind::{moment_index, rewind_to};
use crate::analysis::segments::{segment_map, DeviceEvent, SegmentsAt};
use crate::cli::SegmentsArgs;
use crate::error::{Error, Result};
use crate::model::snapshot::Action;
use crate::render::picture::PictureKind;
use crate::{formats, output, render};

pub fn run(a: SegmentsArgs) -> Result<()> {
    let moment = a.at.clone().filter(|m| *m != Moment::End);
    // the map at the end needs no trace events; at another moment they are undone
    let parts = match moment {
        None => formats::SnapshotParts::SegmentsOnly,
        Some(_) => formats::SnapshotParts::All,
    };
    let mut snap = formats::load_snapshot_parts(&a.file, parts)?;
    super::warn_inconsistent(
        &a.file,
        &snap,
        matches!(a.format, crate::render::Format::Json),
    );
    let devices = super::snapshot_devices(&a.file, &snap, a.device)?;
    let mut title = super::display_name(&a.file);
    let mut at = None;
    if let Some(m) = &moment {
        let mut events = Vec::new();
        for &d in &devices {
            let capture = m
                .capture(&snap.annotations, d)
                .map_err(|why| Error::input(&a.file, why))?;
            let Some(index) = moment_index(&snap, d, capture) else {
                let (events, ooms) = snap.trace(d).map_or((0, 0), |t| {
                    let ooms = t.events.iter().filter(|e| e.action == Action::Oom).count();
                    (t.events.len(), ooms)
                });
                return Err(Error::input(&a.file, m.not_found(d, events, ooms)));
            };
            rewind_to(&mut snap, d, index);
            events.push(DeviceEvent {
                device: d,
                event_index: index,
            });
        }
        let said: Vec<String> = (events.iter())
            .map(|e| format!("cuda:{} event {}", e.device, e.event_index))
            .collect();
        title = format!("{title} at {m} ({})", said.join(", "));
        at = Some(SegmentsAt {
            moment: m.to_string(),
            events,
        });
    }
    let mut map = segment_map(&snap, &devices);
    map.at = at;
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
