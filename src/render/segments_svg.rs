pub fn svg(_s: &crate::model::Snapshot, _m: &crate::analysis::segments::SegmentMap, _t: &str) -> String { String::new() }
