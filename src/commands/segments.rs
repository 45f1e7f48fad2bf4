use crate::analysis::moment::Moment;
use crate::analysis::rewind::{find_moment, rewind_with};
use crate::analysis::segments::{segment_map, DeviceEvent, SegmentsAt};
use crate::analysis::timeline::Timelines;
use crate::cli::SegmentsArgs;
use crate::error::{Error, Result};
use crate::formats::event_spool::EventSpool;
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
    // at a moment, the events are put aside on disk as they are read (with the timeline's
    // peak), then undone from the end: memory holds the segments, not the trace
    let mut rewind = None;
    let mut snap = match moment {
        None => formats::load_snapshot_parts(&a.file, parts)?,
        Some(_) => {
            let spool = EventSpool::new().map_err(super::spool_error("segments"))?;
            let mut sink = (Timelines::new(false), spool);
            let snap = formats::load_snapshot_streaming(&a.file, parts, &mut sink)?;
            let (timelines, mut spool) = sink;
            spool.finish().map_err(super::spool_error("segments"))?;
            rewind = Some((timelines, spool));
            snap
        }
    };
    super::warn_inconsistent(
        &a.file,
        &snap,
        matches!(a.format, crate::render::Format::Json),
    );
    let devices = super::snapshot_devices(&a.file, &snap, a.device)?;
    let mut title = super::display_name(&a.file);
    let mut at = None;
    if let (Some(m), Some((timelines, spool))) = (&moment, rewind.as_mut()) {
        let mut events = Vec::new();
        for &d in &devices {
            let capture = m
                .capture(&snap.annotations, d)
                .map_err(|why| Error::input(&a.file, why))?;
            let timeline = timelines.take(d);
            let found = find_moment(spool, d, capture, timeline.peak_allocated_index())
                .map_err(super::spool_error("segments"))?;
            let Some(index) = found else {
                let ooms = timeline.action_counts()[Action::Oom as usize];
                return Err(Error::input(
                    &a.file,
                    m.not_found(d, timeline.events(), ooms),
                ));
            };
            rewind_with(&mut snap, d, index, spool).map_err(super::spool_error("segments"))?;
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
