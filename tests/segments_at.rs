//! `segments --at`: the segments as they stood at a moment, rebuilt from the end by undoing
//! the events after it, checked against tests/py/state_at.py, which runs the totals back with
//! Python's own reading of the pickle.

mod common;

use serde_json::Value;

fn expected(rel: &str, device: u32, index: u64) -> Value {
    let file = common::fixture(rel);
    let args = [
        file.to_string_lossy().into_owned(),
        device.to_string(),
        index.to_string(),
    ];
    common::python_json("state_at.py", &args)
}

#[test]
fn the_segments_at_a_moment_add_up_to_what_the_trace_says() {
    for (rel, device, moments) in [
        (
            "snapshots/h100_gpt2_train_exit.pickle",
            0,
            &["peak", "0", "500", "Optimizer.step#AdamW.step:end@2"][..],
        ),
        (
            "snapshots/h100/gpt_expandable_segments.pickle",
            0,
            &["peak", "1000"][..],
        ),
        ("snapshots/h100/oom_default.pickle", 0, &["oom"][..]),
        // a trace that starts mid-run with an empty_cache() (459 segment frees first)
        (
            "snapshots/cs336_ctx256_forward_empty_cache_start.pickle",
            0,
            &["0", "459", "peak"][..],
        ),
        // expandable segments and an OOM (Constructor-Sun/code_location, device 1 only)
        (
            "snapshots/code_location_expandable_oom_device1.pickle",
            1,
            &["oom", "peak", "10"][..],
        ),
    ] {
        let dev = device.to_string();
        let file = common::fixture(rel);
        for at in moments {
            let got = common::json_out(&[
                "segments",
                file.to_str().unwrap(),
                "--at",
                at,
                "--device",
                &dev,
                "--format",
                "json",
            ]);
            // the event the moment fell on
            let index = got["at"]["events"][0]["event_index"]
                .as_u64()
                .unwrap_or_else(|| panic!("{rel} --at {at}: {}", got["at"]));
            assert_eq!(got["at"]["events"][0]["device"], device);
            let want = expected(rel, device, index);
            let totals = &got["totals"];
            assert_eq!(
                totals["allocated_bytes"], want["allocated"],
                "{rel} --at {at}"
            );
            assert_eq!(
                totals["reserved_bytes"], want["reserved"],
                "{rel} --at {at}"
            );
            let whole = got["segments"].as_array().unwrap().len();
            if !rel.contains("expandable") {
                assert_eq!(
                    whole as i64,
                    want["segments"].as_i64().unwrap(),
                    "{rel} --at {at}"
                );
            }
        }
    }
}

#[test]
fn a_moment_the_trace_lacks_is_refused_with_what_it_has() {
    let file = common::fixture("snapshots/h100_gpt2_train_exit.pickle");
    let (code, _, stderr) = common::run(&["segments", file.to_str().unwrap(), "--at", "oom"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("no oom event"), "{stderr}");
    // a snapshot without a trace has only its end
    let bare = common::fixture("snapshots/verl_mem_no_trace_multi_pool.pickle");
    let (code, _, stderr) = common::run(&["segments", bare.to_str().unwrap(), "--at", "peak"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("only the end"), "{stderr}");
}
