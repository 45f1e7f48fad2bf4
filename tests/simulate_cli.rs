//! `memtrack simulate` end to end: the report, its JSON contract, and bad input.

mod common;

use common::{fixture, golden, json_out, memtrack};

fn snap(name: &str) -> String {
    fixture(&format!("snapshots/{name}.pickle"))
        .to_string_lossy()
        .into_owned()
}

#[test]
fn text_report_of_the_default_h100_capture() {
    let out = common::stdout(&[
        "simulate",
        &snap("h100/gpt_default"),
        "--set",
        "expandable_segments:True",
        "--set",
        "max_split_size_mb:128",
    ]);
    golden("h100_gpt_default/simulate.txt", &out);
}

#[test]
fn json_has_the_documented_contract() {
    let v = json_out(&[
        "simulate",
        &snap("cs336_small_mem_snapshot"),
        "--set",
        "expandable_segments:True,max_split_size_mb:128",
        // a list's commas belong to it
        "--set",
        "roundup_power2_divisions:[1:2,>:8],garbage_collection_threshold:0.5",
        "--format",
        "json",
    ]);
    assert_eq!(v["kind"], "allocator_simulation");
    let d = &v["devices"][0];
    let val = &d["validation"];
    assert_eq!(val["segment_events_recorded"], 9);
    assert_eq!(val["segment_events_matched"], 9);
    assert_eq!(val["final_segments_match"], true);
    let sc = d["scenarios"].as_array().unwrap();
    assert_eq!(sc.len(), 3);
    assert_eq!(
        sc[1]["settings"],
        "expandable_segments:True,max_split_size_mb:128"
    );
    let div = &sc[2]["settings_detail"]["roundup_power2_divisions"];
    assert_eq!((div[0].as_u64(), div[15].as_u64()), (Some(2), Some(8)));
    assert_eq!(
        sc[2]["settings_detail"]["garbage_collection_threshold"],
        0.5
    );
    for s in sc {
        for key in [
            "peak_reserved_bytes",
            "end_reserved_bytes",
            "peak_allocated_bytes",
            "segments_created",
        ] {
            assert!(s[key].as_u64().is_some(), "{key} in {s}");
        }
        assert!(s["ooms"].as_array().unwrap().is_empty());
    }
    assert_eq!(sc[0]["peak_allocated_bytes"], sc[1]["peak_allocated_bytes"]);
    // without a limit the threshold has nothing to act on, and a note says so
    assert!(d["notes"][0]
        .as_str()
        .unwrap()
        .contains("garbage_collection_threshold"));
}

#[test]
fn an_oom_that_another_setting_avoids_under_a_larger_memory() {
    // 2.6 GB, a little above the run's cap (0.03 of 81559 MiB = 2.566 GB): the default
    // settings still fail at the recorded OOM (2.49 GB reserved + 224 MiB), expandable
    // segments (2.36 GB reserved there) fit
    let v = json_out(&[
        "simulate",
        &snap("h100/oom_default"),
        "--memory",
        "2.6GB",
        "--set",
        "expandable_segments:True",
        "--format",
        "json",
    ]);
    let d = &v["devices"][0];
    assert_eq!(d["memory_limit_source"], "--memory");
    let sc = d["scenarios"].as_array().unwrap();
    assert_eq!(sc[0]["ooms"][0]["index"], 1709);
    assert_eq!(sc[0]["ooms"][0]["recorded"], true);
    assert_eq!(sc[1]["ooms"].as_array().unwrap().len(), 0, "{}", sc[1]);
}

#[test]
fn bad_settings_and_sizes_are_usage_errors() {
    let f = snap("cs336_small_mem_snapshot");
    for (args, needle) in [
        (vec!["--set", "expandable_segments:maybe"], "True or False"),
        (vec!["--set", "pinned_memory:True"], "unknown setting"),
        (vec!["--set", "max_split_size_mb:10"], "above 20"),
        (vec!["--set", "roundup_power2_divisions:3"], "power of two"),
        (vec!["--memory", "lots"], "80GiB"),
    ] {
        let mut a = vec!["simulate", f.as_str()];
        a.extend(args);
        let out = memtrack().args(&a).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{a:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{a:?}: {err}");
    }
}

#[test]
fn a_snapshot_without_a_trace_says_how_to_record_one() {
    let f = snap("verl_mem_no_trace_multi_pool");
    let out = memtrack().args(["simulate", &f]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("verl_mem_no_trace_multi_pool.pickle"), "{err}");
    assert!(err.contains("_record_memory_history"), "{err}");
}

#[test]
fn summary_ends_with_the_setting_the_replay_found_best() {
    let out = common::stdout(&["summary", &snap("h100/gpt_default")]);
    let last = out.lines().last().unwrap();
    assert!(
        last.starts_with(
            "Try: memtrack simulate gpt_default.pickle --set expandable_segments:True"
        ),
        "{last}"
    );
    assert!(
        last.contains("peak reserved 2.69 GiB instead of 3.69 GiB"),
        "{last}"
    );
    let v = json_out(&["summary", &snap("h100/gpt_default"), "--format", "json"]);
    let g = &v["simulate_suggestions"][0];
    assert_eq!(g["settings"], "expandable_segments:True");
    assert_eq!(g["peak_reserved_bytes"], 2_889_875_456u64);
    // an OOM no candidate avoids under the smallest cap the recording allows: no suggestion
    let v = json_out(&["summary", &snap("h100/oom_default"), "--format", "json"]);
    assert!(v.get("simulate_suggestions").is_none(), "{v}");
    // expandable segments already: little fragmentation, nothing to suggest
    let out = common::stdout(&["summary", &snap("h100/gpt_expandable_segments")]);
    assert!(!out.contains("Try: memtrack simulate"), "{out}");
}
