use crate::cli::{ExportArgs, ExportFormat};
use crate::error::Result;
use crate::formats::event_spool::EventSpool;
use crate::formats::json::{write_snapshot, TrackerJson};
use crate::formats::{self, Input, SnapshotParts};
use crate::output;
use crate::progress::Stage;

pub fn run(a: ExportArgs) -> Result<()> {
    if super::profile::any_trace(std::slice::from_ref(&a.file)) {
        return super::profile::export(a);
    }
    let ExportFormat::Json = a.format;
    // a snapshot's trace events are put aside on disk as they are read and written from
    // there: the JSON, as large as the file or larger, is written as it is made
    let mut spool = EventSpool::new().map_err(super::spool_error("export"))?;
    let input = formats::load_streaming(&a.file, SnapshotParts::All, &mut spool)?;
    super::warn_inconsistent_input(&a.file, &input, true);
    spool.finish().map_err(super::spool_error("export"))?;
    // (a spinner only when the JSON goes to a file: on stdout it would mix with it)
    let _writing = (a.output.as_os_str() != "-").then(|| Stage::new("writing JSON"));
    output::emit_with(&a.output, |w| {
        match &input {
            Input::Tracker(t) => serde_json::to_writer(&mut *w, &TrackerJson(t))?,
            Input::Snapshot(s) => write_snapshot(w, s, &mut spool)?,
        }
        w.write_all(b"\n")
    })
}
