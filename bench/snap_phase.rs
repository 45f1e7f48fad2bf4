//! Where the time of `memtrack summary SNAPSHOT` goes: parse (with the trace-event sink, as
//! `formats::load` reads), conversion to the model, summary.
//!
//!   cargo run --release --example snap_phase bench/data/snapshot_1000000.pickle
use std::time::Instant;

use memtrack::formats::snapshot::{from_document_taken, EventSink};
use memtrack::formats::SnapshotParts;

fn main() {
    let p = std::path::PathBuf::from(std::env::args().nth(1).expect("a snapshot file"));
    let file = memtrack::pickle::map_file(&p).unwrap();
    // fault the file in first, so that parse times the parse and not the disk
    let sum: u64 = file.bytes().iter().step_by(4096).map(|&b| b as u64).sum();
    eprintln!("mapped (checksum {sum})");
    let parts = SnapshotParts::EventsWithoutStacks;
    // REPEAT=N parses N times first and reports the fastest (the machine may be shared)
    let repeat: usize = std::env::var("REPEAT")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(0);
    let mut best = std::time::Duration::MAX;
    for _ in 0..repeat {
        let t = Instant::now();
        let mut sink = EventSink::for_parts(parts, file.bytes().len());
        let doc = memtrack::pickle::parse_mapped_with_sink(&file, &mut (), &mut sink).unwrap();
        best = best.min(t.elapsed());
        drop(doc);
    }
    if repeat > 0 {
        eprintln!("parse, fastest of {repeat}: {best:?}");
    }
    let t = Instant::now();
    let mut sink = EventSink::for_parts(parts, file.bytes().len());
    let doc = memtrack::pickle::parse_mapped_with_sink(&file, &mut (), &mut sink).unwrap();
    eprintln!(
        "parse {:?} ({} events taken)",
        t.elapsed(),
        doc.taken_dicts()
    );
    let t = Instant::now();
    let snap = from_document_taken(&doc, sink, parts).expect("the sink's events add up");
    eprintln!("convert {:?}", t.elapsed());
    let t = Instant::now();
    drop(doc);
    eprintln!("drop doc {:?}", t.elapsed());
    let t = Instant::now();
    let s = memtrack::analysis::snapshot_summary::snapshot_summary(&snap, &snap.devices());
    eprintln!(
        "summary {:?} ({} bytes)",
        t.elapsed(),
        std::mem::size_of_val(&s)
    );
}
