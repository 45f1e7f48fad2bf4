use crate::cli::{ExportArgs, ExportFormat};
use crate::error::{Error, Result};
use crate::formats::{self, json::TrackerJson, Input};
use crate::output;

pub fn run(a: ExportArgs) -> Result<()> {
    let input = formats::load(&a.file)?;
    let ExportFormat::Json = a.format;
    let mut bytes = match &input {
        Input::Tracker(t) => serde_json::to_vec(&TrackerJson(t)),
        Input::Snapshot(s) => serde_json::to_vec(&crate::formats::json::SnapshotJson(s)),
    }
    .map_err(|e| Error::Usage(format!("cannot encode JSON: {e}")))?;
    bytes.push(b'\n');
    output::emit(&a.output, &bytes)
}
