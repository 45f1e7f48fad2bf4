//! The driver-level (NVML) series of a `record` file: `summary` shows its peak beside
//! reserved and what the caching allocator did not see; `plot` draws it with its own colour
//! and legend entry; files without it are unchanged. The file is built through the library
//! (no GPU here), as `record` writes it.

mod common;

use common::memtrack;
use memtrack::formats::tracker;
use memtrack::model::{DeviceSample, DeviceSeries, ExitInfo, OpNames, RecordInfo, TrackerStats};

const MIB: f64 = 1024.0 * 1024.0;

fn cuda_file_with_driver_series() -> TrackerStats {
    let mut names = OpNames::default();
    let n = 200;
    for i in 0..n {
        names.push(&format!("Net.forward.mm.default_{i}"));
    }
    let allocated: Vec<f64> = (0..n).map(|i| (i % 50) as f64 * MIB).collect();
    let reserved: Vec<f64> = (0..n)
        .map(|i| if i < 100 { 64.0 } else { 96.0 } * MIB)
        .collect();
    // the driver: reserved plus a 500 MiB CUDA context, plus 20 MiB of cuBLAS workspace
    // from op 150 on; a sample every 10 ops
    let samples = (0..=n / 10)
        .map(|k| {
            let op = (k * 10) as i64;
            let at = (op as usize).clamp(1, n) - 1;
            let extra = if op >= 150 { 20.0 * MIB } else { 0.0 };
            DeviceSample {
                op_index: op,
                time_s: k as f64 * 0.05,
                bytes: (reserved[at] + 500.0 * MIB + extra) as i64,
            }
        })
        .collect();
    TrackerStats {
        names,
        active: allocated.clone(),
        allocated,
        reserved,
        record: Some(RecordInfo {
            version: "test".into(),
            backend: "cuda".into(),
            device_name: Some("NVIDIA H100 80GB HBM3".into()),
            device_uuid: Some("GPU-8c1f0a9e-0000-4000-8000-000000000001".into()),
            device_memory: vec![DeviceSeries {
                nvml_index: 3,
                name: Some("NVIDIA H100 80GB HBM3".into()),
                uuid: Some("GPU-8c1f0a9e-0000-4000-8000-000000000001".into()),
                samples,
            }],
            exit: Some(ExitInfo {
                ended: Some("exit".into()),
                ..ExitInfo::default()
            }),
            ..RecordInfo::default()
        }),
        ..TrackerStats::default()
    }
}

#[test]
fn summary_and_plot_show_the_driver_level_series() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gpu.pkl");
    tracker::write(&cuda_file_with_driver_series(), &file).unwrap();

    let o = memtrack().arg("summary").arg(&file).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(text.contains("device (driver, GPU 3)"), "{text}");
    assert!(
        text.contains("616.00 MiB"),
        "peak: 96 + 500 + 20 MiB\n{text}"
    );
    assert!(
        text.contains("where the allocator had 96.00 MiB reserved: 520.00 MiB outside PyTorch's caching allocator"),
        "{text}"
    );

    let o = memtrack()
        .args(["summary", "--format", "json"])
        .arg(&file)
        .output()
        .unwrap();
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let d = &j["device_peaks"][0];
    assert_eq!(d["bytes"].as_f64(), Some(616.0 * MIB));
    assert_eq!(d["op_index"], 149, "sampled after op 149");
    assert_eq!(d["op"], "Net.forward.mm.default_149");
    assert_eq!(d["outside_allocator_bytes"].as_f64(), Some(520.0 * MIB));

    // the export carries the samples
    let o = memtrack().arg("export").arg(&file).output().unwrap();
    let e: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let s = &e["memtrack"]["device_memory"][0];
    assert_eq!(s["samples"].as_array().unwrap().len(), 21);
    assert_eq!(s["nvml_index"], 3);

    // plot: drawn by default, with a legend entry; and alone
    let svg = dir.path().join("gpu.svg");
    let o = memtrack()
        .arg("plot")
        .arg(&file)
        .arg("-o")
        .arg(&svg)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&svg).unwrap();
    roxmltree::Document::parse(&text).unwrap();
    assert!(text.contains("device_memory (driver)"));
    assert!(text.contains("reserved_memory"));
    let o = memtrack()
        .args(["plot", "--series", "reserved,device", "--split", "-o", "-"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(o.status.success());
}

#[test]
fn files_without_the_series_are_unchanged_and_say_so_when_asked() {
    let mt = common::fixture("tracker/memory_tracker_cpu_torch2.15.0.pkl");
    let o = memtrack()
        .args(["plot", "--series", "device", "-o", "-"])
        .arg(&mt)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("no driver-level (device) series"), "{err}");
    let o = memtrack()
        .args(["summary", "--format", "json"])
        .arg(&mt)
        .output()
        .unwrap();
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(j.get("device_peaks").is_none());
}
