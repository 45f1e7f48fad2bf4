use std::time::Instant;
fn main() {
    let p = std::path::PathBuf::from(std::env::args().nth(1).unwrap());
    let t = Instant::now();
    let doc = memtrack::pickle::read_file(&p, &mut ()).unwrap();
    eprintln!("parse {:?}", t.elapsed());
    let sm = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap();
    for l in sm.lines().filter(|l| l.starts_with("AnonHuge") || l.starts_with("Rss")) { eprintln!("{l}"); }
    let t = Instant::now();
    let stats = memtrack::formats::tracker::from_document(doc).unwrap();
    eprintln!("model {:?}", t.elapsed());
    let t = Instant::now();
    let s = memtrack::analysis::summary::tracker_summary(&stats, 20);
    eprintln!("summary {:?} {}", t.elapsed(), s.top_ops.len());
    let t = Instant::now();
    drop(stats);
    eprintln!("drop {:?}", t.elapsed());
}
