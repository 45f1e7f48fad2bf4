//! `memtrack attach PID --dump`: each process writes an allocator snapshot now
//! (`torch.cuda.memory._dump_snapshot`, `NAME.pid<PID>.dump.pickle`) and sends its
//! `memory_stats()`, which lands beside it as `….dump.memory_stats.json`; nothing is
//! installed in the process.

use std::path::PathBuf;
use std::time::Duration;

use super::connection::Connection;
use crate::model::units::{format_bytes, Units};

/// How long a process may take to write its snapshot (the allocator's whole state).
const DUMP_TIMEOUT: Duration = Duration::from_secs(300);

/// Say what each process wrote, or why it did not: the exit code (2 where one did not).
pub fn report(pids: &[u32], conns: Vec<Connection>) -> i32 {
    let mut code = 0;
    for mut conn in conns {
        let pid = conn.process(pids);
        let m = conn.first_answer(pid, DUMP_TIMEOUT);
        match m.as_ref().map(|m| (&m["dumped"], &m["error"])) {
            Some((d, _)) if d.is_object() => {
                if let Err(why) = write_stats(pid, d) {
                    eprintln!("memtrack: {why}");
                    code = 2;
                }
            }
            Some((_, e)) if e.is_string() => {
                eprintln!(
                    "memtrack: attach: process {pid} cannot be dumped: {}; nothing was \
                     installed, it runs on as it was",
                    e.as_str().unwrap_or("?")
                );
                code = 2;
            }
            _ => {
                eprintln!("memtrack: attach: process {pid} did not say whether it dumped");
                code = 2;
            }
        }
    }
    code
}

/// `memory_stats()` beside the snapshot, and a line saying what the two hold.
fn write_stats(pid: u32, d: &serde_json::Value) -> Result<(), String> {
    let snapshot = PathBuf::from(d["snapshot"].as_str().unwrap_or_default());
    let stats = &d["memory_stats"];
    let path = snapshot.with_extension("memory_stats.json");
    let text = serde_json::to_string_pretty(stats).unwrap_or_default() + "\n";
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", crate::quote::path(&path)))?;
    let figure = |key: &str| match stats[key].as_f64() {
        Some(v) => format_bytes(v, Units::Auto),
        None => "?".into(),
    };
    eprintln!(
        "memtrack: process {pid}: allocated {} (peak {}), reserved {} (peak {}); allocator \
         snapshot {}{}, memory_stats() in {}",
        figure("allocated_bytes.all.current"),
        figure("allocated_bytes.all.peak"),
        figure("reserved_bytes.all.current"),
        figure("reserved_bytes.all.peak"),
        crate::quote::path(&snapshot),
        if d["history"] == true {
            " (with the history the program was recording)"
        } else {
            " (segments and blocks; no history: the program did not record one)"
        },
        crate::quote::path(&path)
    );
    Ok(())
}
