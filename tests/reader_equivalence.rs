//! The fast paths read exactly what the generic document reader reads: the streaming
//! MemoryTracker reader on every file it accepts, and the snapshot reader that streams trace
//! events straight from the opcodes (`formats::snapshot`) on every snapshot.

mod common;

use common::fixture;
use memtrack::formats::snapshot::{self, Streamed};
use memtrack::formats::{tracker, tracker_stream, Input, SnapshotParts};
use memtrack::model::snapshot::{EventAux, StackId, TraceEvent};
use memtrack::model::trace::TraceSink;
use memtrack::model::{Snapshot, TrackerStats};

fn both(bytes: &[u8]) -> (Option<TrackerStats>, Result<TrackerStats, String>) {
    let fast = tracker_stream::read(bytes, &mut ());
    let generic = memtrack::pickle::parse(bytes)
        .map_err(|e| e.to_string())
        .and_then(|doc| tracker::from_document(doc).map_err(String::from));
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

/// Records how far a reading got.
#[derive(Default)]
struct Furthest(usize);

impl memtrack::pickle::Progress for Furthest {
    fn advanced(&mut self, consumed: usize) {
        self.0 = self.0.max(consumed);
    }
}

#[test]
fn record_files_are_read_once() {
    // a record file as `record` writes it: the fast stats path sees at its first key that the
    // file has the `memtrack` extension and leaves it to the generic reader at once, instead of
    // reading its series first (the fixture, written before, has `memtrack` last)
    let path = fixture("record/h100_gpt2_train.pkl");
    let old = std::fs::read(&path).unwrap();
    let stats = match memtrack::formats::load(&path).unwrap() {
        memtrack::formats::Input::Tracker(t) => *t,
        _ => panic!("a record file"),
    };
    assert!(stats.record.is_some());
    let mut furthest = Furthest::default();
    assert!(tracker_stream::read(&old, &mut furthest).is_none());
    assert!(
        furthest.0 > old.len() / 2,
        "the old layout is read past its series ({} of {} bytes) before the extension shows",
        furthest.0,
        old.len()
    );
    let new = tracker::to_pickle_bytes(&stats);
    let mut furthest = Furthest::default();
    assert!(tracker_stream::read(&new, &mut furthest).is_none());
    assert!(
        furthest.0 < 64,
        "the fast path gave up at byte {} of {}",
        furthest.0,
        new.len()
    );
    // and the file reads back the same, MemoryTracker's keys and the extension
    let again = memtrack::pickle::parse(&new)
        .map_err(|e| e.to_string())
        .and_then(|doc| tracker::from_document(doc).map_err(String::from))
        .unwrap();
    assert_same(&stats, &again);
    let json = |s: &TrackerStats| serde_json::to_string(&memtrack::formats::json::TrackerJson(s));
    assert_eq!(json(&again).unwrap(), json(&stats).unwrap());
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

const SNAPSHOTS: [&str; 11] = [
    "cs336_medium_512_training.pickle",
    "cs336_small_mem_snapshot.pickle",
    "cs336_windows_partial_frames.pickle",
    "flexgen_oom_snapshot_legacy.pickle",
    "synthetic_bare_segment_list.pickle",
    "synthetic_multi_device_oom.pickle",
    "verl_mem_no_trace_multi_pool.pickle",
    "synthetic_flat_events.pickle",
    "synthetic_event_reused.pickle",
    "synthetic_event_elsewhere.pickle",
    "synthetic_trace_elsewhere.pickle",
];

/// The snapshot as `formats::load_with` reads it (streamed first) and as the generic path reads
/// it.
fn snapshot_both_ways(name: &str, parts: SnapshotParts) -> (String, String) {
    let path = fixture(&format!("snapshots/{name}"));
    let loaded = match memtrack::formats::load_with(&path, parts) {
        Ok(Input::Snapshot(s)) => s,
        _ => panic!("{name}: not read as a snapshot"),
    };
    let doc = memtrack::pickle::parse(&std::fs::read(&path).unwrap()).unwrap();
    let generic = snapshot::from_document_parts(&doc, parts).unwrap();
    (format!("{loaded:?}"), format!("{generic:?}"))
}

#[test]
fn snapshots_read_the_same_streamed_and_generic() {
    for name in SNAPSHOTS {
        for parts in [
            SnapshotParts::All,
            SnapshotParts::EventsWithoutStacks,
            SnapshotParts::SegmentsOnly,
        ] {
            let (fast, generic) = snapshot_both_ways(name, parts);
            assert!(
                fast == generic,
                "{name} ({parts:?}): the two readings differ"
            );
        }
    }
}

/// Whether the streamed reading of a fixture stands (else the file is read again).
fn streamed_stands(name: &str) -> bool {
    let bytes = std::fs::read(fixture(&format!("snapshots/{name}"))).unwrap();
    match snapshot::read(&bytes, &mut (), SnapshotParts::All) {
        Streamed::Snapshot(s) => {
            let doc = memtrack::pickle::parse(&bytes).unwrap();
            let generic = snapshot::from_document(&doc).unwrap();
            assert_eq!(format!("{s:?}"), format!("{generic:?}"), "{name}");
            true
        }
        Streamed::Other(_) => panic!("{name}: a snapshot with a trace read as something else"),
        Streamed::ReadAgain => false,
    }
}

#[test]
fn traces_stream_and_step_aside_when_they_must() {
    // real captures and files as gen_data.py writes them: streamed
    for name in [
        "cs336_medium_512_training.pickle",
        "cs336_small_mem_snapshot.pickle",
        "cs336_windows_partial_frames.pickle",
        "synthetic_multi_device_oom.pickle",
        "synthetic_flat_events.pickle",
    ] {
        assert!(streamed_stands(name), "{name}: not streamed");
    }
    // an event listed twice, or used elsewhere too, or a whole trace used elsewhere too: the
    // streamed reading is dropped and the file read the generic way
    for name in [
        "synthetic_event_reused.pickle",
        "synthetic_event_elsewhere.pickle",
        "synthetic_trace_elsewhere.pickle",
    ] {
        assert!(
            !streamed_stands(name),
            "{name}: the streamed reading must not stand"
        );
    }
    // no trace list at all: the document, read once
    let bytes = std::fs::read(fixture("snapshots/synthetic_bare_segment_list.pickle")).unwrap();
    assert!(matches!(
        snapshot::read(&bytes, &mut (), SnapshotParts::All),
        Streamed::Other(_)
    ));
}

/// A snapshot pickle, protocol 4, written opcode by opcode: `events` allocations of 512
/// bytes, each with a fresh empty frame list, then a `free_completed` whose frames are a memo
/// reference to the list of the allocation `back` events before it (as a real capture shares
/// a free's frame list with its completion).
fn snapshot_sharing_a_frame_list(events: u32, back: u32) -> Vec<u8> {
    fn text(out: &mut Vec<u8>, s: &str) {
        out.push(0x8c); // SHORT_BINUNICODE
        out.push(s.len() as u8);
        out.extend_from_slice(s.as_bytes());
        out.push(0x94); // MEMOIZE
    }
    let mut memo = 0u32;
    let mut out = vec![0x80, 4, b'}', 0x94, b'('];
    memo += 1;
    text(&mut out, "segments");
    out.extend_from_slice(&[b']', 0x94]);
    text(&mut out, "device_traces");
    out.extend_from_slice(&[b']', 0x94, b']', 0x94, b'(']);
    memo += 5; // "segments", its list, "device_traces", the list of devices, device 0's
    let mut frame_lists = Vec::new();
    for i in 0..=events {
        out.extend_from_slice(&[b'}', 0x94, b'(']);
        memo += 1;
        text(&mut out, "action");
        text(
            &mut out,
            if i < events {
                "alloc"
            } else {
                "free_completed"
            },
        );
        text(&mut out, "addr");
        let addr = if i < events { i } else { events - back };
        out.push(b'J');
        out.extend_from_slice(&(addr * 512).to_le_bytes());
        text(&mut out, "size");
        out.extend_from_slice(&[b'M', 0, 2]);
        text(&mut out, "frames");
        memo += 5;
        if i < events {
            out.extend_from_slice(&[b']', 0x94]);
            frame_lists.push(memo);
            memo += 1;
        } else {
            out.push(b'j'); // LONG_BINGET
            out.extend_from_slice(&frame_lists[(events - back) as usize].to_le_bytes());
        }
        out.push(b'u'); // SETITEMS
    }
    out.extend_from_slice(b"eau."); // APPENDS, APPEND, SETITEMS, STOP
    out
}

#[test]
fn a_frame_list_shared_from_far_back_is_read_again_the_generic_way() {
    // the streamed reading keeps its handles for the last 65,536 memo ids: a reference from
    // closer stands, one from further back (never seen in a real capture) makes the file be
    // read again, with the same result either way
    for (back, stands) in [(1, true), (70_000, false)] {
        let bytes = snapshot_sharing_a_frame_list(70_001, back);
        let doc = memtrack::pickle::parse(&bytes).unwrap();
        let generic = snapshot::from_document(&doc).unwrap();
        assert_eq!(generic.trace(0).unwrap().events.len(), 70_002);
        match snapshot::read(&bytes, &mut (), SnapshotParts::All) {
            Streamed::Snapshot(s) => {
                assert!(stands, "a reference {back} events back must not stand");
                assert_eq!(format!("{s:?}"), format!("{generic:?}"));
            }
            Streamed::ReadAgain => assert!(!stands, "a reference {back} events back must stand"),
            Streamed::Other(_) => panic!("not read as a snapshot"),
        }
        let path = std::env::temp_dir().join(format!("memtrack_shared_frames_{back}.pickle"));
        std::fs::write(&path, &bytes).unwrap();
        let loaded = match memtrack::formats::load(&path) {
            Ok(Input::Snapshot(s)) => s,
            _ => panic!("not loaded as a snapshot"),
        };
        std::fs::remove_file(&path).ok();
        assert_eq!(format!("{loaded:?}"), format!("{generic:?}"));
    }
}

/// Rounds for the second core: one over the whole file, and a few (each taken over mid-list,
/// where the next round starts).
fn rounds(bytes: &[u8]) -> [usize; 2] {
    [usize::MAX, bytes.len() / 5]
}

const ALL_PARTS: [SnapshotParts; 3] = [
    SnapshotParts::All,
    SnapshotParts::EventsWithoutStacks,
    SnapshotParts::SegmentsOnly,
];

/// Every snapshot fixture, read with the back half of its trace on a second core (as `load`
/// reads large files), is the snapshot the generic reading makes; on the real captures with
/// more than one batch of events the second core did take part, in every round (the first
/// started with the file, from a skim of the bytes before the trace), and its reader read
/// some of the main reading's shares too.
#[test]
fn a_trace_read_on_two_cores_is_the_one_core_reading() {
    let real_multi_batch = [
        "cs336_medium_512_training.pickle",
        "h100/gpt_default.pickle",
        "h100/gpt_expandable_segments.pickle",
        "h100_gpt2_train_exit.pickle",
    ];
    let extra = [
        "h100/gpt_max_split_size_mb.pickle",
        "h100/oom_default.pickle",
        "h100/oom_expandable_segments.pickle",
        "h100_resnet18_train_exit.pickle",
    ];
    for name in SNAPSHOTS.iter().chain(&real_multi_batch).chain(&extra) {
        let bytes = std::fs::read(fixture(&format!("snapshots/{name}"))).unwrap();
        let doc = memtrack::pickle::parse(&bytes).unwrap();
        for (parts, round) in ALL_PARTS
            .into_iter()
            .flat_map(|p| rounds(&bytes).map(|r| (p, r)))
        {
            let generic = snapshot::from_document_parts(&doc, parts).unwrap();
            let (read, by) = snapshot::read_on_two_cores(&bytes, parts, round, None);
            let (second, own) = (by.second_core_events, by.own_share_events);
            // a real capture is never read again the generic way
            assert!(
                matches!(read, Streamed::Snapshot(_))
                    || !(real_multi_batch.contains(name) || extra.contains(name)),
                "{name} ({parts:?}, rounds of {round} bytes): read again the generic way"
            );
            if let Streamed::Snapshot(s) = read {
                assert_eq!(
                    format!("{s:?}"),
                    format!("{generic:?}"),
                    "{name} ({parts:?}, rounds of {round} bytes)"
                );
            }
            eprintln!(
                "{name} ({parts:?}, rounds of {round} bytes): the second core read {second} \
                 events, its reader {own} of the main reading's shares"
            );
            // (with stacks, a frame first written in the back half leaves it to the main
            // reading: real captures write new frames late)
            if real_multi_batch.contains(name) && parts != SnapshotParts::All {
                assert!(
                    second > 0 && own > 0,
                    "{name} ({parts:?}, rounds of {round} bytes): the second core read {second} \
                     events, its reader {own} of the main reading's shares"
                );
                // its first round started with the file, before the main reading came to the
                // trace (a skim found where it begins)
                assert!(
                    by.early_round_events > 0,
                    "{name} ({parts:?}, rounds of {round} bytes): no early round was taken over"
                );
                // in rounds of a fifth of the file it reads in each round, not only the first
                // (the last may be too short to start)
                if round != usize::MAX {
                    assert!(
                        by.second_core_rounds >= 3,
                        "{name} ({parts:?}): in rounds of {round} bytes the second core's part \
                         of {} round(s) was taken over",
                        by.second_core_rounds
                    );
                }
            }
        }
    }
}

/// A snapshot as Python's pickler writes it (batches of 1000, frames, memo sharing), with what
/// the second core must leave to the main reading or hand back unresolved: action names and
/// metadata strings first written late (fetched again from the memo), frame lists shared with
/// the segments' blocks and between events, frames first written late and fetched by the next
/// device's events, one-frame stacks, None frames, float times, two devices, and (`odd`) a
/// frame holding a tuple, which the second core does not read, or (`keys`) events whose keys
/// after "action" come in another order, or one more or one less, now and then (the second
/// core expects the keys of the event before).
const LATE_STRINGS_PY: &str = r#"
import pickle, random, sys
odd = sys.argv[1] == "odd"
keys = sys.argv[1] == "keys"

def varied(i, e):
    if not keys or i % 37 not in (0, 1, 5):
        return e
    items = list(e.items())
    if i % 37 == 0:
        items[1:5] = items[4:0:-1]  # (a trace's events list "action" first, "frames" late)
    elif i % 37 == 1:
        items.insert(3, ("device_free", 1 << 30))
    else:
        items = [kv for kv in items if kv[0] != "user_metadata"]
    return dict(items)
rnd = random.Random(7)
pool = [{"filename": f"f{i}.py", "line": i, "name": f"fn{i}"} for i in range(300)]
stacks = [[rnd.choice(pool) for _ in range(rnd.randrange(1, 30))] for _ in range(200)]
late = [{"filename": "late.py", "line": i, "name": f"late{i}"} for i in range(50)]
blocks, traces = [], []
for dev in range(2):
    trace, live = [], []
    n = 12000 if dev == 0 else 6000
    for i in range(n):
        t = 1000 + i * 3 + (0.5 if i % 7 == 0 else 0)
        frames = list(rnd.choice(stacks)) if i < n // 2 else [rnd.choice(late)] + list(rnd.choice(stacks))
        if i % 997 == 0:
            frames = None
        if i == n - 10 and odd:
            frames = [{"filename": "odd.py", "line": 1, "name": "odd", "extra": (1, 2)}]
        meta = f"step {i // 3000}" if i > n * 0.6 and i % 5 == 0 else ""
        if live and rnd.random() < 0.45:
            addr, size, fr = live.pop(rnd.randrange(len(live)))
            trace.append(varied(i, {"action": "free_requested", "addr": addr, "size": size, "stream": 0,
                          "time_us": t, "compile_context": "N/A", "user_metadata": meta, "frames": fr}))
            trace.append(varied(i + 1, {"action": "free_completed", "addr": addr, "size": size, "stream": 0,
                          "time_us": t, "compile_context": "N/A", "user_metadata": meta, "frames": fr}))
        else:
            action = "alloc"
            if i > n * 0.7 and i % 500 == 0:
                action = "segment_unmap" if dev == 0 else "snapshot"
            size = rnd.choice((512, 4096, 1 << 20))
            addr = 0x7000000 + i * 4096 + dev * (1 << 40)
            stream = 7 if i % 1500 == 0 else 0
            trace.append(varied(i, {"action": action, "addr": addr, "size": size, "stream": stream,
                          "time_us": t, "compile_context": "ctx 1" if i > n * 0.8 else "N/A",
                          "user_metadata": meta, "frames": frames}))
            if action == "alloc" and frames is not None:
                live.append((addr, size, frames))
    traces.append(trace)
    blocks += [{"address": a, "size": s, "requested_size": s, "state": "active_allocated",
                "frames": fr} for a, s, fr in live[:100]]
segments = [{"device": 0, "address": 0x7000000, "total_size": 1 << 30, "allocated_size": 0,
             "active_size": 0, "requested_size": 0, "stream": 0, "segment_type": "large",
             "segment_pool_id": (0, 0), "is_expandable": False, "frames": [], "blocks": blocks}]
snap = {"segments": segments, "device_traces": traces, "allocator_settings": {},
        "external_annotations": []}
sys.stdout.buffer.write(pickle.dumps(snap, 4))
"#;

/// The bytes `LATE_STRINGS_PY` writes for `variant` ("plain" or "odd").
fn late_strings_file(variant: &str) -> Vec<u8> {
    let out = std::process::Command::new("python3")
        .args(["-c", LATE_STRINGS_PY, variant])
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

#[test]
fn strings_frames_and_lists_the_second_core_leaves_open_resolve_as_one_core_reads_them() {
    for variant in ["plain", "odd", "keys"] {
        let bytes = late_strings_file(variant);
        let doc = memtrack::pickle::parse(&bytes).unwrap();
        for (parts, round) in ALL_PARTS
            .into_iter()
            .flat_map(|p| rounds(&bytes).map(|r| (p, r)))
        {
            let generic = snapshot::from_document_parts(&doc, parts).unwrap();
            let (read, by) = snapshot::read_on_two_cores(&bytes, parts, round, None);
            let second = by.second_core_events;
            let Streamed::Snapshot(s) = read else {
                panic!("{variant} ({parts:?}, rounds of {round} bytes): the streamed reading did not stand");
            };
            assert_eq!(
                format!("{s:?}"),
                format!("{generic:?}"),
                "{variant} ({parts:?}, rounds of {round} bytes)"
            );
            if variant != "odd" {
                assert!(
                    second > 0,
                    "{variant} ({parts:?}, rounds of {round} bytes): the second core read nothing"
                );
            }
        }
    }
}

/// Damaged bytes where the second core reads (a flipped byte, a cut): whatever the readings
/// make of them, a streamed reading that stands is the generic one, and nothing panics.
#[test]
fn damage_in_the_back_half_never_makes_the_two_core_reading_differ() {
    let clean = late_strings_file("plain");
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for round in 0..24 {
        let mut bytes = clean.clone();
        let at = clean.len() / 3 + (next() as usize) % (clean.len() * 2 / 3 - 1);
        if round % 6 == 5 {
            bytes.truncate(at);
        } else {
            bytes[at] ^= 1 << (next() % 8);
        }
        let generic = memtrack::pickle::parse(&bytes);
        for (parts, round) in ALL_PARTS
            .into_iter()
            .flat_map(|p| rounds(&clean).map(|r| (p, r)))
        {
            if let (Streamed::Snapshot(s), _) =
                snapshot::read_on_two_cores(&bytes, parts, round, None)
            {
                let doc = generic
                    .as_ref()
                    .expect("a streamed reading stands on bytes that do not parse");
                let plain = snapshot::from_document_parts(doc, parts).expect("and they convert");
                assert_eq!(
                    format!("{s:?}"),
                    format!("{plain:?}"),
                    "round {round}, byte {at}"
                );
            }
        }
    }
}

/// What a `TraceSink` was given.
#[derive(Default)]
struct Recorder {
    events: Vec<(u32, TraceEvent, i64, Option<EventAux>)>,
    restarts: usize,
    renumbered: usize,
}

impl Recorder {
    fn lines(&self) -> Vec<String> {
        (self.events.iter())
            .map(|(device, e, stream, aux)| format!("{device} {e:?} {stream} {aux:?}"))
            .collect()
    }
}

impl TraceSink for Recorder {
    fn event(&mut self, device: u32, e: &TraceEvent, stream: i64, aux: Option<&EventAux>) {
        self.events.push((device, *e, stream, aux.cloned()));
    }

    fn restart(&mut self) {
        self.events.clear();
        self.restarts += 1;
    }

    fn renumber_stacks(&mut self, ids: &[StackId]) {
        for (_, e, _, _) in &mut self.events {
            if !e.stack.is_missing() {
                e.stack = ids[e.stack.0 as usize];
            }
        }
        self.renumbered += 1;
    }
}

/// The snapshot without its events, as a reading with a sink leaves it.
fn without_events(mut s: Snapshot) -> String {
    for t in &mut s.traces {
        t.events.clear();
        t.aux.clear();
    }
    format!("{s:?}")
}

/// A reading that gives the events to a sink gives it exactly the events the generic reading
/// keeps, in order (whatever the second core's rounds), their stacks once renumbered too, and
/// the same snapshot otherwise.
#[test]
fn a_sink_gets_the_events_the_generic_reading_keeps() {
    let late = late_strings_file("plain");
    let mut files: Vec<(String, Vec<u8>)> = SNAPSHOTS
        .iter()
        .chain(&[
            "cs336_medium_512_training.pickle",
            "h100/oom_default.pickle",
        ])
        .map(|n| {
            (
                n.to_string(),
                std::fs::read(fixture(&format!("snapshots/{n}"))).unwrap(),
            )
        })
        .collect();
    files.push(("late strings".into(), late));
    let parts = [SnapshotParts::EventsWithoutStacks, SnapshotParts::All];
    for ((name, bytes), parts) in files.iter().flat_map(|f| parts.map(|p| (f, p))) {
        let doc = memtrack::pickle::parse(bytes).unwrap();
        let generic = snapshot::from_document_parts(&doc, parts).unwrap();
        let mut expected = Recorder::default();
        memtrack::model::trace::feed(&generic, &mut expected);
        for round in rounds(bytes) {
            let mut got = Recorder::default();
            let (read, by) = snapshot::read_on_two_cores(bytes, parts, round, Some(&mut got));
            let second = by.second_core_events;
            if name == "late strings" {
                assert!(
                    second > 0,
                    "rounds of {round} bytes: the second core read nothing"
                );
            }
            let Streamed::Snapshot(s) = read else {
                continue; // (read again the generic way: `load_streaming` feeds the sink then)
            };
            assert_eq!(
                got.lines(),
                expected.lines(),
                "{name} ({parts:?}), rounds of {round} bytes"
            );
            let with_stacks = parts == SnapshotParts::All;
            assert_eq!(
                got.renumbered,
                usize::from(with_stacks),
                "{name} ({parts:?})"
            );
            assert_eq!(
                without_events(s),
                without_events(generic.clone()),
                "{name} ({parts:?})"
            );
        }
    }
}

/// A streamed reading dropped at its end (a frame list shared from too far back) has given
/// the sink every event once: the sink is told to start again, and gets them all again.
#[test]
fn a_sink_starts_again_when_the_reading_is_read_again() {
    let bytes = snapshot_sharing_a_frame_list(70_001, 70_000);
    let path = std::env::temp_dir().join("memtrack_sink_restart.pickle");
    std::fs::write(&path, &bytes).unwrap();
    let doc = memtrack::pickle::parse(&bytes).unwrap();
    for parts in [SnapshotParts::EventsWithoutStacks, SnapshotParts::All] {
        let mut got = Recorder::default();
        let loaded = memtrack::formats::load_streaming(&path, parts, &mut got);
        let Ok(Input::Snapshot(s)) = loaded else {
            panic!("not loaded as a snapshot");
        };
        let generic = snapshot::from_document_parts(&doc, parts).unwrap();
        let mut expected = Recorder::default();
        memtrack::model::trace::feed(&generic, &mut expected);
        assert_eq!(got.restarts, 1, "{parts:?}");
        assert_eq!(got.events.len(), 70_002, "{parts:?}");
        // (fed from the kept trace: the snapshot's own stack ids, nothing to renumber)
        assert_eq!(got.renumbered, 0, "{parts:?}");
        assert_eq!(got.lines(), expected.lines(), "{parts:?}");
        assert_eq!(without_events(*s), without_events(generic), "{parts:?}");
    }
    std::fs::remove_file(&path).ok();
}
