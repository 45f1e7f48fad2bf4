//! The streaming MemoryTracker reader and the generic document reader agree on every file the
//! streaming one accepts.

mod common;

use common::fixture;
use memtrack::formats::{tracker, tracker_stream};
use memtrack::model::TrackerStats;

fn both(bytes: &[u8]) -> (Option<TrackerStats>, Result<TrackerStats, String>) {
    let fast = tracker_stream::read(bytes, &mut ());
    let generic = memtrack::pickle::parse(bytes)
        .map_err(|e| e.to_string())
        .and_then(tracker::from_document);
    (fast, generic)
}

fn assert_same(a: &TrackerStats, b: &TrackerStats) {
    assert_eq!(a.op_count(), b.op_count());
    assert!(a.names.iter().eq(b.names.iter()));
    for (x, y) in [
        (&a.allocated, &b.allocated),
        (&a.active, &b.active),
        (&a.reserved, &b.reserved),
    ] {
        assert!(x
            .iter()
            .zip(y.iter())
            .all(|(p, q)| p.to_bits() == q.to_bits() || (p.is_nan() && q.is_nan())));
        assert_eq!(x.len(), y.len());
    }
    assert_eq!(a.markers, b.markers);
    assert_eq!(a.num_alloc_retries, b.num_alloc_retries);
    assert_eq!(a.op_index, b.op_index);
}

#[test]
fn fixtures_read_the_same_both_ways() {
    for f in [
        "memory_tracker_cpu_torch2.15.0.pkl",
        "memory_tracker_without_op_index.pkl",
        "synthetic_2000_ops.pkl",
    ] {
        let bytes = std::fs::read(fixture(&format!("tracker/{f}"))).unwrap();
        let (fast, generic) = both(&bytes);
        let fast = fast.unwrap_or_else(|| {
            panic!("{f}: the streaming reader should take PyTorch's own layout")
        });
        assert_same(&fast, &generic.unwrap());
    }
}

#[test]
fn memtracks_own_files_take_the_stream_path_too() {
    let bytes = std::fs::read(fixture("tracker/synthetic_2000_ops.pkl")).unwrap();
    let stats = tracker_stream::read(&bytes, &mut ()).unwrap();
    let (fast, generic) = both(&tracker::to_pickle_bytes(&stats));
    assert_same(
        &fast.expect("the writer's layout is one the stream reader takes"),
        &generic.unwrap(),
    );
}

#[test]
fn files_the_stream_reader_declines_still_read() {
    // protocol 2, as older tools write: generic path only
    let py = "import pickle,sys; pickle.dump({'memories_allocated': {0: ('a', 1.0), 1: ('b', 3.0)}, 'memories_active': {0: ('a', 1.0), 1: ('b', 3.0)}, 'memories_reserved': {0: ('a', 2.0), 1: ('b', 4.0)}, 'markers': {'fw_start': 0}, 'num_alloc_retries': 0}, sys.stdout.buffer, 2)";
    let out = std::process::Command::new("python3")
        .args(["-c", py])
        .output()
        .unwrap();
    let (fast, generic) = both(&out.stdout);
    assert!(fast.is_none());
    let generic = generic.unwrap();
    assert_eq!(generic.op_count(), 2);
    assert_eq!(generic.reserved[1], 4.0 * 1024.0 * 1024.0);
}
