//! `memtrack record --backend cuda` files captured on a real H100 (fixtures/record/README.md):
//! what the file says must agree with the model that was trained and with the allocator's own
//! counters, read through the commands a user runs.

mod common;

use common::{fixture, json_out};
use serde_json::Value;

fn path(name: &str) -> String {
    fixture(&format!("record/{name}"))
        .to_str()
        .unwrap()
        .to_string()
}

/// The whole-model peak table's cell for `device`/`category`, in bytes.
fn peak_category(file: &str, device: &str, category: &str) -> u64 {
    let m = json_out(&["modules", file, "--format", "json"]);
    m["peak"][device][category].as_u64().unwrap()
}

/// A `summary --format json` series peak, in bytes.
fn series_peak(summary: &Value, series: &str) -> f64 {
    let p = summary["peaks"].as_array().unwrap();
    let p = p.iter().find(|p| p["series"] == series).unwrap();
    p["bytes"].as_f64().unwrap()
}

/// GPT-2's parameter count from its configuration (gpt2_train.py): the head is tied to the
/// token embedding, so it adds nothing.
fn gpt2_parameters(layers: u64, d: u64, vocab: u64, positions: u64) -> u64 {
    let linear = |i: u64, o: u64| i * o + o;
    let layer =
        2 * d + linear(d, 3 * d) + linear(d, d) + 2 * d + linear(d, 4 * d) + linear(4 * d, d);
    vocab * d + positions * d + layers * layer + 2 * d
}

#[test]
fn gpt2_recording_counts_the_models_parameters_and_adamw_state() {
    let f = path("h100_gpt2_train.pkl");
    let params = gpt2_parameters(4, 512, 8192, 512) * 4; // fp32
    assert_eq!(peak_category(&f, "cuda:0", "Parameter"), params);
    // AdamW keeps exp_avg and exp_avg_sq, each the size of the parameters (step is a CPU scalar)
    assert_eq!(peak_category(&f, "cuda:0", "Optstate"), 2 * params);
}

#[test]
fn resnet18_recording_counts_the_models_parameters() {
    let f = path("h100_resnet18_train.pkl");
    // torchvision resnet18 has 11,689,512 parameters with a 1000-class head; this one has 100
    let params = 11_689_512 - (512 * 1000 + 1000) + (512 * 100 + 100);
    // MemTracker counts a CUDA storage rounded up to 512 bytes, as the caching allocator
    // hands it out; resnet18 has 62 parameter tensors (BatchNorm's 256-byte ones among them)
    let counted = peak_category(&f, "cuda:0", "Parameter");
    assert!(
        counted >= params * 4 && counted < params * 4 + 62 * 512,
        "{counted}"
    );
    // SGD with momentum keeps one buffer shaped as each parameter
    assert_eq!(peak_category(&f, "cuda:0", "Optstate"), counted);
}

#[test]
fn per_op_peaks_stay_within_the_allocators_own_peak_counters() {
    // The per-op samples and the `memory_stats()` kept at exit are read separately by the agent.
    // A sample is taken after each op, so an op's transient memory (ResNet's cuDNN workspaces)
    // can lift the counter's peak above every sample, never the other way round.
    for name in ["h100_gpt2_train.pkl", "h100_resnet18_train.pkl"] {
        let f = path(name);
        let summary = json_out(&["summary", &f, "--format", "json"]);
        let alloc = json_out(&["allocator", &f, "--format", "json"]);
        let counter = |key: &str| {
            let m = alloc["metrics"].as_array().unwrap();
            let m = m.iter().find(|m| m["key"] == key).unwrap();
            m["rows"][0]["peak"].as_f64().unwrap()
        };
        for (series, key) in [
            ("allocated", "allocated_bytes"),
            ("reserved", "reserved_bytes"),
        ] {
            let sampled = series_peak(&summary, series);
            assert!(
                sampled > 0.0 && sampled <= counter(key),
                "{name}: {series} {sampled} vs {}",
                counter(key)
            );
        }
    }
    // GPT-2's peak falls between ops: there the two agree exactly
    let f = path("h100_gpt2_train.pkl");
    let summary = json_out(&["summary", &f, "--format", "json"]);
    assert_eq!(series_peak(&summary, "allocated"), 1_066_114_048.0);
    assert!(summary.get("peaks_inside_ops").is_none());
}

#[test]
fn summary_says_when_the_peak_was_inside_an_op() {
    let f = path("h100_resnet18_train.pkl");
    let summary = json_out(&["summary", &f, "--format", "json"]);
    let inside = summary["peaks_inside_ops"].as_array().unwrap();
    let allocated = inside.iter().find(|p| p["series"] == "allocated").unwrap();
    assert_eq!(allocated["counter_peak_bytes"], 912_932_352);
    assert_eq!(
        allocated["sampled_peak_bytes"],
        series_peak(&summary, "allocated")
    );
    // reserved peaked between ops: no line for it
    assert!(inside.iter().all(|p| p["series"] != "reserved"));
    let text = common::stdout(&["summary", &f]);
    assert!(
        text.contains("allocated and active: the allocator's own peak counter reached 870.64 MiB"),
        "{text}"
    );
}
