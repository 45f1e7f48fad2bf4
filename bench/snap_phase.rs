use std::time::Instant;
fn main() {
    let p = std::path::PathBuf::from(std::env::args().nth(1).unwrap());
    let file = memtrack::pickle::map_file(&p).unwrap();
    let sum: u64 = file.bytes().iter().step_by(4096).map(|&b| b as u64).sum();
    eprintln!("mapped {sum}");
    let t = Instant::now();
    let doc = memtrack::pickle::parse_mapped(&file, &mut ()).unwrap();
    eprintln!("parse {:?}", t.elapsed());
    let t = Instant::now();
    let snap = memtrack::formats::snapshot::from_document_parts(
        &doc,
        memtrack::formats::SnapshotParts::EventsWithoutStacks,
    )
    .unwrap();
    eprintln!("convert {:?}", t.elapsed());
    let t = Instant::now();
    drop(doc);
    eprintln!("drop doc {:?}", t.elapsed());
    let t = Instant::now();
    let devices: Vec<u32> = (0..1).collect();
    let s = memtrack::analysis::snapshot_summary::snapshot_summary(&snap, &devices);
    eprintln!("summary {:?} {}", t.elapsed(), std::mem::size_of_val(&s));
}
