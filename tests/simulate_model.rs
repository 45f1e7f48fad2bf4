//! The allocator model replayed over real snapshots under their own settings must reproduce
//! what the allocator recorded.

use std::path::Path;

use memtrack::analysis::caching_allocator::Settings;
use memtrack::analysis::simulate::{simulate, DeviceSimulation, Note, Validation};

fn load(file: &str) -> memtrack::model::Snapshot {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    memtrack::formats::load_snapshot(&path).unwrap()
}

fn own(file: &str) -> DeviceSimulation {
    let snap = load(file);
    let settings = snap
        .allocator_settings
        .as_deref()
        .map(Settings::from_recorded)
        .unwrap_or_default();
    let device = snap.devices()[0];
    simulate(&snap, device, &[settings], None)
}

#[test]
fn cs336_small_reproduces_every_segment_alloc_and_the_final_segments() {
    let sim = own("fixtures/snapshots/cs336_small_mem_snapshot.pickle");
    let v = &sim.validation;
    eprintln!("{v:#?}");
    assert_eq!(v.segment_events_recorded, 9);
    assert_eq!(v.segment_events_matched, 9);
    assert_eq!(v.segment_events_simulated, 9);
    assert!(v.first_mismatch.is_none());
    assert!(v.final_segments_match);
}

#[test]
fn cs336_medium_reproduces_final_segments_and_peak_reserved() {
    let sim = own("fixtures/snapshots/cs336_medium_512_training.pickle");
    let v = &sim.validation;
    eprintln!("{v:#?} {:?}", sim.notes);
    assert!(v.final_segments_match);
    assert_eq!(
        Some(sim.scenarios[0].peak_reserved_bytes as i64),
        v.recorded_peak_reserved_bytes
    );
    assert_eq!(v.segment_events_matched, v.segment_events_recorded);
}

const H100: [&str; 5] = [
    "gpt_default",
    "gpt_expandable_segments",
    "gpt_max_split_size_mb",
    "oom_default",
    "oom_expandable_segments",
];

fn h100(name: &str) -> String {
    format!("fixtures/snapshots/h100/{name}.pickle")
}

/// Every recorded segment event replayed, nothing more, and the same final segments.
fn assert_reproduced(name: &str, v: &Validation) {
    assert_eq!(
        v.segment_events_matched, v.segment_events_recorded,
        "{name}: {v:?}"
    );
    assert_eq!(
        v.segment_events_simulated, v.segment_events_recorded,
        "{name}: {v:?}"
    );
    assert!(v.final_segments_match, "{name}: {v:?}");
}

#[test]
fn h100_captures_reproduce_every_segment_event_under_their_own_settings() {
    for name in H100 {
        let sim = own(&h100(name));
        let v = &sim.validation;
        assert!(v.segment_events_recorded > 60, "{name}: {v:?}");
        assert_reproduced(name, v);
        assert_eq!(
            Some(sim.scenarios[0].peak_reserved_bytes as i64),
            v.recorded_peak_reserved_bytes,
            "{name}"
        );
        // the OOM runs fail where they failed
        let ooms = &sim.scenarios[0].ooms;
        assert_eq!(
            ooms.len(),
            usize::from(name.starts_with("oom")),
            "{name}: {ooms:?}"
        );
        assert!(ooms.iter().all(|o| o.recorded));
    }
}

fn with(set: &str) -> Settings {
    let mut s = Settings::default();
    s.apply_all(set).unwrap();
    s
}

/// The floor: the default run, replayed under the other settings, predicts the peak
/// reserved those runs recorded (same requests, scripts/capture_gpu_snapshots.py) within 2%.
#[test]
fn default_capture_predicts_the_other_settings_peak_reserved() {
    let snap = load(&h100("gpt_default"));
    let scenarios = [
        Settings::default(),
        with("expandable_segments:True"),
        with("max_split_size_mb:128"),
    ];
    let sim = simulate(&snap, 0, &scenarios, None);
    for (k, other) in [(1, "gpt_expandable_segments"), (2, "gpt_max_split_size_mb")] {
        let real = own(&h100(other))
            .validation
            .recorded_peak_reserved_bytes
            .unwrap() as f64;
        let predicted = sim.scenarios[k].peak_reserved_bytes as f64;
        assert!(
            (predicted - real).abs() / real <= 0.02,
            "{other}: predicted {predicted}, recorded {real}"
        );
        // same requests: the same peak of requested bytes in every scenario
        assert_eq!(
            sim.scenarios[k].peak_allocated_bytes,
            sim.scenarios[0].peak_allocated_bytes
        );
    }
}

/// Under the cap the OOM runs had (0.03 of the H100's 81559 MiB), expandable segments would not
/// have avoided the OOM: the replay fails at the same request, with the peak the expandable run
/// recorded.
#[test]
fn oom_capture_under_expandable_segments_fails_as_the_expandable_run_did() {
    let snap = load(&h100("oom_default"));
    let cap = (0.03 * (81559u64 << 20) as f64) as u64;
    let sim = simulate(
        &snap,
        0,
        &[Settings::default(), with("expandable_segments:True")],
        Some(cap),
    );
    let real = own(&h100("oom_expandable_segments")).validation;
    let exp = &sim.scenarios[1];
    assert_eq!(exp.ooms.len(), 1, "{:?}", exp.ooms);
    assert!(exp.ooms[0].recorded);
    assert_eq!(
        Some(exp.peak_reserved_bytes as i64),
        real.recorded_peak_reserved_bytes
    );
    // without --memory the limit comes from the recorded failures, and the note says so
    let inferred = simulate(&snap, 0, &[Settings::default()], None);
    assert_eq!(inferred.memory_limit_bytes, Some(2_485_125_120));
    assert!(inferred
        .notes
        .iter()
        .any(|n| matches!(n, Note::LimitRange { capped: true, .. })));
}

/// Synthetic snapshots written by fixtures/snapshots/allocator_reference.py, a separate plain
/// reading of the allocator's rules: the replay reproduces every segment event they record, and
/// under the default settings it would not (each file exercises its setting).
#[test]
fn python_reference_of_the_rules_is_reproduced() {
    for (name, changes_something) in [
        ("split_merge", false),
        ("max_split_size", true),
        ("roundup_power2", true),
        ("expandable", true),
    ] {
        let file = format!("fixtures/snapshots/reference_{name}.pickle");
        let snap = load(&file);
        let own = Settings::from_recorded(snap.allocator_settings.as_deref().unwrap());
        let sim = simulate(&snap, 0, &[own.clone(), Settings::default()], None);
        let v = &sim.validation;
        assert!(v.segment_events_recorded >= 3, "{name}: {v:?}");
        assert_reproduced(name, v);
        assert_eq!(own != Settings::default(), changes_something, "{name}");
        if changes_something {
            let (a, b) = (&sim.scenarios[0], &sim.scenarios[1]);
            assert!(
                a.peak_reserved_bytes != b.peak_reserved_bytes
                    || a.segments_created != b.segments_created
                    || a.ooms.len() != b.ooms.len(),
                "{name}: the defaults replay the same: {a:?}"
            );
        }
    }
    // the capped file ends in an OOM the replay finds too, after releasing oversize segments
    let sim = own("fixtures/snapshots/reference_max_split_size.pickle");
    assert_eq!(sim.memory_limit_bytes, Some(400 << 20));
    assert_eq!(sim.scenarios[0].ooms.len(), 1);
}

/// The recorded segment events of a trace, independently of the model: (action, size).
fn recorded_segment_events(snap: &memtrack::model::Snapshot, device: u32) -> Vec<(String, u64)> {
    snap.trace(device)
        .map(|t| {
            t.events
                .iter()
                .filter(|e| e.action.name().starts_with("segment_"))
                .map(|e| (e.action.name().to_string(), e.size))
                .collect()
        })
        .unwrap_or_default()
}

/// A trace recorded mid-run (kkaitlyn111/cs336-a2-systems): it opens with an `empty_cache()`
/// giving back 459 segments made before recording began, then a new segment. Replayed from the
/// state the trace implies at its start, with that release as `empty_cache()` (its stack says
/// so), every recorded segment event is reproduced, and no limit is inferred from it.
#[test]
fn trace_starting_mid_run_with_empty_cache_reproduces_every_segment_event() {
    let file = "fixtures/snapshots/cs336_ctx256_forward_empty_cache_start.pickle";
    let snap = load(file);
    let recorded = recorded_segment_events(&snap, 0);
    let frees = recorded
        .iter()
        .take_while(|e| e.0 == "segment_free")
        .count();
    assert_eq!((recorded.len(), frees), (1057, 459));
    let sim = own(file);
    let v = &sim.validation;
    assert_reproduced(file, v);
    assert_eq!(v.segment_events_recorded, recorded.len());
    assert_eq!(sim.memory_limit_bytes, None, "{:?}", sim.notes);
    assert!(sim.scenarios[0].ooms.is_empty());
    assert!(
        sim.notes.iter().any(|n| matches!(n,
            Note::StartState { segments, .. } if *segments >= frees)),
        "{:?}",
        sim.notes
    );
    for n in &sim.notes {
        if let Note::LimitRange { lower, upper, .. } = n {
            assert!(*lower as i64 <= *upper, "{n}");
        }
    }
}

/// The same capture read as if recorded without stacks (`context=None`): nothing says the
/// opening release was `empty_cache()`, and a new segment follows it, as after the allocator's
/// free-and-retry. A retry would mean a limit below 24.3 GB, under the 28.8 GB the run reserved
/// later: no limit allows it, so it is replayed as `empty_cache()` and every event reproduces.
#[test]
fn empty_cache_without_stacks_is_told_from_a_retry_by_what_the_run_reserved() {
    let file = "fixtures/snapshots/cs336_ctx256_forward_empty_cache_start.pickle";
    let mut snap = load(file);
    for t in &mut snap.traces {
        for e in &mut t.events {
            e.stack = memtrack::model::snapshot::StackId::MISSING;
        }
    }
    let settings = Settings::from_recorded(snap.allocator_settings.as_deref().unwrap());
    let sim = simulate(&snap, 0, &[settings], None);
    assert_reproduced(file, &sim.validation);
    assert_eq!(sim.memory_limit_bytes, None, "{:?}", sim.notes);
}

/// Expandable segments with an OOM (Constructor-Sun/code_location, device 1 of three): the
/// trace maps ranges inside segments the final state lists as one mapped range each, and
/// unmaps some. Undoing those maps page by page gives the empty start the trace implies (its
/// maps less its unmaps are the final segments' bytes): every recorded segment event is
/// reproduced, and the one OOM is the recorded one.
#[test]
fn expandable_segments_mapped_inside_final_ranges_reproduce_with_the_recorded_oom_only() {
    let file = "fixtures/snapshots/code_location_expandable_oom_device1.pickle";
    let snap = load(file);
    let trace = snap.trace(1).unwrap();
    let net: i64 = trace
        .events
        .iter()
        .map(|e| match e.action.name() {
            "segment_map" => e.size as i64,
            "segment_unmap" => -(e.size as i64),
            _ => 0,
        })
        .sum();
    let final_bytes: u64 = snap.segments_on(1).map(|s| s.total_size).sum();
    assert_eq!(net, final_bytes as i64, "the trace starts from nothing");
    let recorded_oom = trace
        .events
        .iter()
        .position(|e| e.action.name() == "oom")
        .unwrap();
    let settings = Settings::from_recorded(snap.allocator_settings.as_deref().unwrap());
    let sim = simulate(&snap, 1, &[settings], None);
    assert_reproduced(file, &sim.validation);
    assert_eq!(recorded_segment_events(&snap, 1).len(), 46);
    let ooms: Vec<(usize, bool)> = sim.scenarios[0]
        .ooms
        .iter()
        .map(|o| (o.index, o.recorded))
        .collect();
    assert_eq!(ooms, vec![(recorded_oom, true)]);
    assert!(
        !sim.notes
            .iter()
            .any(|n| matches!(n, Note::StartState { .. })),
        "{:?}",
        sim.notes
    );
}
