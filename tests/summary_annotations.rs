//! `summary`'s usage by annotation: allocated bytes at each `external_annotations` start and
//! end, checked against tests/py/annotation_usage.py, which reads the pickle with Python's own
//! `pickle` and runs the events backwards from the final segments (memtrack runs forwards).

mod common;

use std::path::Path;

use serde_json::Value;

fn replay(file: &Path) -> Value {
    common::python_json("annotation_usage.py", &[file])
}

#[test]
fn allocated_at_each_annotation_equals_a_backward_replay() {
    for rel in [
        "snapshots/h100_gpt2_train_exit.pickle",
        "snapshots/h100/gpt_default.pickle",
        "snapshots/synthetic_step_leak.pickle",
    ] {
        let file = common::fixture(rel);
        let expected = replay(&file);
        let got = common::json_out(&["summary", file.to_str().unwrap(), "--format", "json"]);
        let mut compared = 0;
        for d in got["devices"].as_array().unwrap() {
            let want = expected[d["device"].to_string()].as_array().unwrap();
            let have = d["annotation_usage"].as_array().map_or(&[][..], |v| v);
            assert_eq!(have.len(), want.len(), "{rel}: device {}", d["device"]);
            for (h, w) in have.iter().zip(want) {
                assert_eq!(h["name"], w["name"], "{rel}");
                assert_eq!(h["stage"], w["stage"], "{rel}");
                assert_eq!(h["time_us"], w["time_us"], "{rel}");
                assert_eq!(
                    h["allocated_bytes"], w["allocated_bytes"],
                    "{rel}: {} {} at {}",
                    w["name"], w["stage"], w["time_us"]
                );
                compared += 1;
            }
        }
        assert!(compared >= 10, "{rel}: {compared} annotations compared");
    }
}

#[test]
fn the_text_summary_lists_usage_by_annotation() {
    let file = common::fixture("snapshots/h100_gpt2_train_exit.pickle");
    let text = common::stdout(&["summary", file.to_str().unwrap()]);
    assert!(text.contains("Usage by annotation"), "{text}");
    assert!(text.contains("Optimizer.step#AdamW.step"), "{text}");
}
