//! torch.profiler traces: the Chrome trace JSON that `prof.export_chrome_trace()` and
//! `tensorboard_trace_handler` write (`*.pt.trace.json`, `.json.gz`), plain or gzip, one file or
//! a folder of them (one per rank or worker). Read as a stream (`scan`), never whole.

mod build;
pub mod error;
mod fast;
pub mod json;
pub mod scan;
pub mod source;
pub mod text;

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::formats::kind::Looks;
use crate::model::profile::ProfileTrace;
pub use error::ScanError;
use source::Source;
use text::Budget;

/// What to record a trace with, for messages.
pub const PROFILE_MEMORY_CALL: &str =
    "torch.profiler.profile(activities=[...], profile_memory=True, record_shapes=True, with_stack=True)";

/// Whether `path` is a trace memtrack should read as one: a folder (of traces), or a file
/// whose text (inflated, for gzip) starts as JSON does (`kind::of_head` decides). Pickles
/// start otherwise.
pub fn sniff(path: &Path) -> bool {
    crate::inputs::open(path).is_ok_and(|i| i.looks.is_trace())
}

/// The traces a path names: the file itself, or a folder's `*.json` and `*.json.gz` files in
/// name order (one per rank or worker, as `tensorboard_trace_handler` writes them).
pub fn files(path: &Path) -> Result<Vec<PathBuf>> {
    if !path.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let entries =
        std::fs::read_dir(path).map_err(|e| Error::input(path, format!("cannot list: {e}")))?;
    let mut out: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
            p.is_file() && name.is_some_and(|n| n.ends_with(".json") || n.ends_with(".json.gz"))
        })
        .collect();
    out.sort();
    if out.is_empty() {
        return Err(Error::input(
            path,
            "a folder without traces (*.json or *.json.gz files): name a torch.profiler trace, or the folder tensorboard_trace_handler wrote them to",
        ));
    }
    Ok(out)
}

/// Reads a trace that must have memory events.
pub fn load(path: &Path) -> Result<ProfileTrace> {
    let trace = load_any(path)?;
    if trace.memory.is_empty() && trace.ooms.is_empty() {
        let flag = match trace.profile_memory {
            Some(false) => " (its profile_memory flag is off)",
            _ => "",
        };
        return Err(Error::input(
            path,
            format!(
                "a Chrome trace of {} events without memory events{flag}: memtrack reads the allocator's [memory] events, which the profiler records only when asked; profile with {PROFILE_MEMORY_CALL}",
                trace.events
            ),
        ));
    }
    Ok(trace)
}

/// Reads a trace, memory events or not.
pub fn load_any(path: &Path) -> Result<ProfileTrace> {
    let input = crate::inputs::open(path).map_err(|m| Error::input(path, m))?;
    let gzip = matches!(input.looks, Looks::Json { gzip: true, .. });
    let bytes = input
        .stream()
        .map_err(|e| Error::input(path, format!("cannot read: {e}")))?;
    let mut source = Source::new(bytes, gzip);
    let name = crate::quote::quote(path.file_name().unwrap_or(path.as_os_str())).into_owned();
    let mut bar =
        crate::progress::Bar::bytes(input.file_size().unwrap_or(0), format!("reading {name}"));
    let mut progress = |read: u64| {
        use crate::pickle::Progress;
        bar.advanced(read as usize);
    };
    let budget = gzip.then_some(Budget::GZIP);
    let mut trace = scan::read(&mut source, &mut progress, budget)
        .map_err(|e| Error::input(path, describe(&e, gzip)))?;
    trace.drop_agent_ranges();
    Ok(trace)
}

/// The user's message for a reading that failed.
fn describe(e: &ScanError, gzip: bool) -> String {
    let text = if gzip { " of the inflated text" } else { "" };
    match e {
        ScanError::CutShort { offset, events } => format!(
            "the file ends inside its JSON (byte {offset}{text}, after {events} trace events): it was cut short (a trace written by a program that was killed, or a copy that did not finish?); profile again or copy it whole"
        ),
        ScanError::Syntax {
            offset,
            expected,
            found,
        } => format!("not valid JSON at byte {offset}{text}: expected {expected}, found {found}"),
        ScanError::NoTraceEvents { keys } => format!(
            "JSON, but not a Chrome trace: it has no `traceEvents` ({}); memtrack reads torch.profiler traces (export_chrome_trace, tensorboard_trace_handler) and {}",
            if keys.is_empty() {
                "an empty object".to_string()
            } else {
                format!("its keys: {}", keys.join(", "))
            },
            super::READS.trim_start_matches("memtrack reads ")
        ),
        ScanError::NotObject { found } => format!(
            "not a Chrome trace: {}the JSON is {found}, where a trace is an object with `traceEvents` or an array of events",
            if gzip { "gzip-compressed, and inflated " } else { "" }
        ),
        ScanError::EventNotObject { index, found } => format!(
            "not a Chrome trace: trace event {index} is {found}, not an object"
        ),
        ScanError::ItemTooLarge { offset, index, limit } => format!(
            "trace event {index} has more than {} MiB of names and figures memtrack keeps (past byte {offset}{text}), where real events have a few KiB: a damaged or hand-made trace; memtrack does not read it",
            limit >> 20
        ),
        ScanError::Expansion {
            text: n,
            compressed,
            what,
        } => {
            let b = Budget::GZIP;
            let (amount, allowed) = if *what == "bytes" {
                (format!("{} MiB", n >> 20), format!("{}x the compressed size and {} MiB more", b.ratio, b.floor >> 20))
            } else {
                (format!("{n} kept events"), format!("one kept event per {} compressed bytes and {} more", b.compressed_per_event, b.event_floor))
            };
            format!(
                "the gzip data expands past what a trace of its size holds: {amount} from its first {compressed} compressed bytes (memtrack allows {allowed}; real traces inflate 9 to 13 times); a compression bomb or a damaged file? If it is a real trace, decompress it (`gunzip -k`) and read the .json, which has no such limit"
            )
        }
        ScanError::BadEvent {
            offset,
            index,
            message,
        } => format!(
            "trace event {index} (at byte {offset}{text}) is {message}"
        ),
        ScanError::Io(e) if gzip => format!(
            "the gzip data is damaged or cut short ({e}): a trace whose writing did not finish? Profile again or copy it whole"
        ),
        ScanError::Io(e) => format!("cannot read: {e}"),
    }
}
