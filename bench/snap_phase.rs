//! Where the time of `memtrack summary SNAPSHOT` goes: the read (trace events streamed, as
//! `formats::load` reads), then the summary.
//!
//!   cargo run --release --example snap_phase bench/data/snapshot_1000000.pickle
//!
//! Env: REPEAT=N reads N times first and reports the fastest (the machine may be shared);
//! PARTS=all|events|segments (default events, what `summary` reads).
use std::time::Instant;

use memtrack::formats::snapshot::{self, Streamed};
use memtrack::formats::SnapshotParts;

fn read(bytes: &[u8], parts: SnapshotParts) -> memtrack::model::Snapshot {
    match snapshot::read(bytes, &mut (), parts) {
        Streamed::Snapshot(s) => s,
        Streamed::Other(_) => panic!("not a snapshot with a trace"),
        Streamed::ReadAgain => panic!("the streamed reading does not stand on this file"),
    }
}

fn main() {
    let p = std::path::PathBuf::from(std::env::args().nth(1).expect("a snapshot file"));
    let file = memtrack::pickle::map_file(&p).unwrap();
    // fault the file in first, so that the read times the parse and not the disk
    let sum: u64 = file.bytes().iter().step_by(4096).map(|&b| b as u64).sum();
    eprintln!("mapped (checksum {sum})");
    let parts = match std::env::var("PARTS").as_deref() {
        Ok("all") => SnapshotParts::All,
        Ok("segments") => SnapshotParts::SegmentsOnly,
        _ => SnapshotParts::EventsWithoutStacks,
    };
    let repeat: usize = std::env::var("REPEAT")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(0);
    let mut best = std::time::Duration::MAX;
    for _ in 0..repeat {
        let t = Instant::now();
        drop(read(file.bytes(), parts));
        best = best.min(t.elapsed());
    }
    if repeat > 0 {
        eprintln!("read, fastest of {repeat}: {best:?}");
    }
    let t = Instant::now();
    let snap = read(file.bytes(), parts);
    eprintln!(
        "read {:?} ({} events, {} stacks)",
        t.elapsed(),
        snap.traces.iter().map(|t| t.events.len()).sum::<usize>(),
        snap.stacks.stack_count()
    );
    let t = Instant::now();
    let mut timelines = memtrack::analysis::timeline::Timelines::new(false);
    memtrack::model::trace::feed(&snap, &mut timelines);
    let s = memtrack::analysis::snapshot_summary::snapshot_summary(
        &snap,
        &snap.devices(),
        &mut timelines,
    );
    eprintln!("summary {:?} ({} devices)", t.elapsed(), s.devices.len());
}
