//! `memtrack summary --format json` outputs read back: the figures of the snapshots they
//! summarized, so that the table of a job's ranks is built from outputs written where each
//! capture lies (docs/snapshots.md, "Many ranks"). Two shapes are read: one snapshot's
//! summary (its `figures`) and a table of several (`kind: "snapshot_ranks"`, its `files`), so
//! tables can be reduced again (per node, then for the job).

use std::path::Path;

use crate::formats::kind::Looks;

use crate::error::{Error, Result};
use crate::model::ranks::RankFigures;

/// Whether `path` holds JSON rather than a pickle: its first byte that is not white space is
/// `{` (a pickle starts with its PROTO opcode, 0x80, or an opcode that is not `{`).
pub fn is_json(path: &Path) -> bool {
    crate::inputs::open(path).is_ok_and(|i| {
        matches!(
            i.looks,
            Looks::Json {
                gzip: false,
                object: true,
                ..
            }
        )
    })
}

const WHAT: &str = "memtrack reads back the JSON of `memtrack summary --format json` of one \
    allocator snapshot (written by this version or later: it has a `figures` key) or of \
    several (`kind: \"snapshot_ranks\"`)";

/// The snapshots' figures in a summary's JSON output.
pub fn read_figures(path: &Path) -> Result<Vec<RankFigures>> {
    let bytes = crate::inputs::open(path)
        .and_then(|i| i.read_all())
        .map_err(|m| Error::input(path, m))?;
    let value: serde_json::Value = serde_json::from_slice(&bytes)
        .map_err(|e| Error::input(path, format!("not valid JSON ({e}); {WHAT}")))?;
    let bad = |why: String| Error::input(path, format!("{why}; {WHAT}"));
    match value.get("kind").and_then(|k| k.as_str()) {
        Some("allocator_snapshot") => {
            let figures = value.get("figures").ok_or_else(|| {
                bad("a snapshot summary without `figures` (an older memtrack's?)".into())
            })?;
            let one = serde_json::from_value(figures.clone())
                .map_err(|e| bad(format!("`figures` is not as memtrack writes it: {e}")))?;
            Ok(vec![one])
        }
        Some("snapshot_ranks") => {
            let files = value
                .get("files")
                .ok_or_else(|| bad("a table of ranks without `files`".into()))?;
            serde_json::from_value(files.clone())
                .map_err(|e| bad(format!("`files` is not as memtrack writes it: {e}")))
        }
        Some(other) => Err(bad(format!("JSON of kind {other:?}"))),
        // a stats file's summary has no kind
        None => Err(bad(
            "JSON without a `kind` (a stats file's summary? tables of stats files are built \
             from the stats files themselves)"
                .into(),
        )),
    }
}
