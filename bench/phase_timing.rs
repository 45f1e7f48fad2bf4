//! Times each stage of reading a tracker stats file (developer tool: `cargo run --release
//! --example phase_timing FILE`).
use std::time::Instant;
fn main() {
    let p = std::path::PathBuf::from(std::env::args().nth(1).expect("usage: phase_timing FILE"));
    let file = memtrack::pickle::map_file(&p).unwrap();
    // touch the mapping first so neither reader pays its page faults
    let sum: u64 = file.bytes().iter().step_by(4096).map(|&b| b as u64).sum();
    eprintln!("mapped ({sum})");
    let t = Instant::now();
    let fast = memtrack::formats::tracker_stream::read(file.bytes(), &mut ());
    eprintln!(
        "stream reader {:?} ({})",
        t.elapsed(),
        if fast.is_some() {
            "read"
        } else {
            "not its layout"
        }
    );
    let t = Instant::now();
    let doc = memtrack::pickle::parse_mapped(&file, &mut ()).unwrap();
    eprintln!("generic parse {:?}", t.elapsed());
    let t = Instant::now();
    let stats = memtrack::formats::tracker::from_document(doc).unwrap();
    eprintln!("model {:?}", t.elapsed());
    let t = Instant::now();
    let s = memtrack::analysis::summary::tracker_summary(&stats, 20);
    eprintln!("summary {:?} ({} top ops)", t.elapsed(), s.top_ops.len());
}
