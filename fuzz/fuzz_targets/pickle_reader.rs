//! Any bytes: the generic reader errors or decodes, never panics or runs away; the streaming
//! MemoryTracker reader, when it accepts the bytes, agrees with the generic one.
#![no_main]

use libfuzzer_sys::fuzz_target;
use memtrack::formats::{tracker, tracker_stream};

fuzz_target!(|data: &[u8]| {
    let generic = memtrack::pickle::parse(data);
    if let Ok(doc) = generic.as_ref() {
        // walk the top level as the formats layer would
        let _ = doc.type_name(doc.root());
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
