//! Any bytes: the reader errors or decodes, never panics or runs away; its fused fast paths
//! decode exactly what executing opcode by opcode does; the streaming MemoryTracker reader,
//! when it accepts the bytes, agrees with the generic one; and a snapshot read with the trace
//! event sink, when that reading stands (on one core or two), is the generic path's snapshot.
#![no_main]

use libfuzzer_sys::fuzz_target;
use memtrack::formats::snapshot::{self, Streamed};
use memtrack::formats::{tracker, tracker_stream, SnapshotParts};
use memtrack::pickle::{self, Document, Value, View};

/// Structural equality of two decoded values, to a bounded depth and size (values may be
/// cyclic or shared).
fn same(a: &Document, x: Value, b: &Document, y: Value, depth: usize, budget: &mut usize) -> bool {
    if depth > 64 || *budget == 0 {
        return true;
    }
    *budget -= 1;
    let seq = |p: &[Value], q: &[Value], budget: &mut usize| {
        p.len() == q.len() && p.iter().zip(q).all(|(&m, &n)| same(a, m, b, n, depth + 1, budget))
    };
    match (a.view(x), b.view(y)) {
        (View::Float(p), View::Float(q)) => p.to_bits() == q.to_bits() || (p.is_nan() && q.is_nan()),
        (View::Tuple(p), View::Tuple(q)) | (View::List(p), View::List(q)) | (View::Set(p), View::Set(q)) => {
            seq(p, q, budget)
        }
        (View::Dict(p), View::Dict(q)) => {
            p.len() == q.len()
                && p.iter().zip(q.iter()).all(|((k1, v1), (k2, v2))| {
                    same(a, k1, b, k2, depth + 1, budget) && same(a, v1, b, v2, depth + 1, budget)
                })
        }
        (View::Object(p), View::Object(q)) => {
            p.kind == q.kind
                && same(a, p.callable, b, q.callable, depth + 1, budget)
                && same(a, p.args, b, q.args, depth + 1, budget)
                && same(a, p.state, b, q.state, depth + 1, budget)
                && same(a, p.items, b, q.items, depth + 1, budget)
        }
        (p, q) => format!("{p:?}") == format!("{q:?}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let generic = pickle::parse(data);
    let reference = pickle::parse_opcode_by_opcode(data);
    match (&generic, &reference) {
        (Ok(d), Ok(r)) => assert!(same(d, d.root(), r, r.root(), 0, &mut 100_000), "fused and opcode-by-opcode decoding differ"),
        // both fail (the offsets may differ: a fused step reports where it began)
        (Err(_), Err(_)) => {}
        _ => panic!("fused and opcode-by-opcode decoding disagree on success: {:?} / {:?}", generic.is_ok(), reference.is_ok()),
    }
    for parts in [SnapshotParts::All, SnapshotParts::EventsWithoutStacks, SnapshotParts::SegmentsOnly] {
        if let Streamed::Snapshot(fast) = snapshot::read(data, &mut (), parts) {
            let plain = generic.as_ref().expect("the streamed reading stands on bytes the generic reader rejects");
            let slow = snapshot::from_document_parts(plain, parts).expect("and the generic path converts them");
            assert_eq!(format!("{fast:?}"), format!("{slow:?}"), "the streamed reading differs");
        }
        if parts != SnapshotParts::All {
            if let (Streamed::Snapshot(fast), _) = snapshot::read_on_two_cores(data, parts, data.len() / 3, None) {
                let plain = generic.as_ref().expect("the two-core reading stands on bytes the generic reader rejects");
                let slow = snapshot::from_document_parts(plain, parts).expect("and the generic path converts them");
                assert_eq!(format!("{fast:?}"), format!("{slow:?}"), "the two-core reading differs");
            }
        }
    }
    if let Some(fast) = tracker_stream::read(data, &mut ()) {
        let doc = generic.expect("the stream reader accepted bytes the generic reader rejects");
        let slow = tracker::from_document(doc).expect("and the generic path reads them as stats");
        assert_eq!(fast.op_count(), slow.op_count());
        assert!(fast.names.iter().eq(slow.names.iter()));
        for (a, b) in [(&fast.allocated, &slow.allocated), (&fast.active, &slow.active), (&fast.reserved, &slow.reserved)] {
            assert!(a.iter().zip(b.iter()).all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan())));
        }
        assert_eq!(fast.markers, slow.markers);
        assert_eq!(fast.op_index, slow.op_index);
        assert_eq!(fast.num_alloc_retries, slow.num_alloc_retries);
    }
});
