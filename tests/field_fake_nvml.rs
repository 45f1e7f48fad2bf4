//! `gpus` and `record`'s driver-level sampling end to end, without a GPU: a stand-in NVML
//! library (tests/fake_nvml/fake_nvml.c, built here with `cc`) is loaded through
//! MEMTRACK_NVML_LIB. It reports two 16 GiB GPUs and the processes FAKE_NVML_PROCESSES names,
//! or every `python*` process with its resident memory as GPU memory (FAKE_NVML_SCAN_COMM).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

/// Build the fake library into `dir`; None (after a loud SKIPPED) without a C compiler.
fn fake_nvml(dir: &Path) -> Option<PathBuf> {
    let src = common::root().join("tests/fake_nvml/fake_nvml.c");
    let lib = dir.join("libfake_nvml.so");
    let built = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&lib)
        .arg(&src)
        .status()
        .is_ok_and(|s| s.success());
    if built {
        return Some(lib);
    }
    if std::env::var_os("CI").is_some() {
        panic!("cannot build {} with cc, and CI is set", src.display());
    }
    eprintln!("\n*** SKIPPED: no C compiler to build the fake NVML library ***\n");
    None
}

#[test]
fn gpus_lists_devices_and_processes_through_nvml() {
    let dir = tempfile::tempdir().unwrap();
    let Some(lib) = fake_nvml(dir.path()) else {
        return;
    };
    let me = std::process::id();
    let run = |args: &[&str]| {
        common::memtrack()
            .env("MEMTRACK_NVML_LIB", &lib)
            .env(
                "FAKE_NVML_PROCESSES",
                format!("0:{me}:2147483648;1:4000000:1048576"),
            )
            .args(args)
            .output()
            .unwrap()
    };
    let o = run(&["gpus"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        text.starts_with("NVIDIA driver 999.99.99-fake, CUDA 12.4, 2 GPUs"),
        "{text}"
    );
    assert!(text.contains("Fake GPU 1"), "{text}");
    // this test's own process, named from /proc; a pid /proc does not know shows `?`
    assert!(
        text.contains(&format!("{me}   compute     2.00 GiB   ")),
        "{text}"
    );
    assert!(text.contains("field_fake_nvml"), "{text}");

    let o = run(&["gpus", "--format", "json"]);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let g0 = &j["gpus"][0];
    assert_eq!(g0["uuid"], "GPU-00000000-0000-4000-8000-000000000000");
    assert_eq!(g0["total_bytes"], 16u64 << 30);
    assert_eq!(g0["used_bytes"], 2u64 << 30);
    assert_eq!(g0["free_bytes"], (16u64 << 30) - (256 << 20) - (2 << 30));
    assert_eq!(g0["processes"][0]["pid"], me);
    assert_eq!(j["gpus"][1]["processes"][0]["used_bytes"], 1 << 20);

    // --watch: JSON Lines, one listing per period
    let o = run(&[
        "gpus", "--watch", "0.05", "--count", "3", "--format", "json",
    ]);
    let lines: Vec<&str> = std::str::from_utf8(&o.stdout).unwrap().lines().collect();
    assert_eq!(lines.len(), 3);
    for l in lines {
        serde_json::from_str::<serde_json::Value>(l).unwrap();
    }
    let o = run(&["gpus", "--watch", "0"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn record_samples_driver_level_memory_among_the_ops() {
    let Some(py) = common::python_with_torch() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let Some(lib) = fake_nvml(dir.path()) else {
        return;
    };
    let o = common::memtrack_process()
        .current_dir(dir.path())
        .env("MEMTRACK_NVML_LIB", &lib)
        .env("FAKE_NVML_SCAN_COMM", "python")
        .args([
            "record",
            "--backend",
            "cpu",
            "--device-interval",
            "10",
            "-o",
            "run.pkl",
            "--",
        ])
        .arg(&py)
        .args([
            &common::example("mlp_batchnorm.py"),
            "--steps",
            "2",
            "--blocks",
            "2",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let file = dir.path().join("run.pkl");
    let j = common::export(&file);
    let ops = j["op_count"].as_i64().unwrap();
    let series = j["memtrack"]["device_memory"].as_array().unwrap();
    assert_eq!(
        series.len(),
        1,
        "one GPU, only the recorded process: {series:?}"
    );
    let s = &series[0];
    assert_eq!(s["nvml_index"], 0);
    assert_eq!(s["name"], "Fake GPU 0");
    let samples = s["samples"].as_array().unwrap();
    assert!(samples.len() >= 10, "{} samples", samples.len());
    let op_at: Vec<i64> = samples
        .iter()
        .map(|x| x["op_index"].as_i64().unwrap())
        .collect();
    assert!(
        op_at.windows(2).all(|w| w[0] <= w[1]),
        "in op order: {op_at:?}"
    );
    assert!(*op_at.last().unwrap() <= ops);
    assert!(
        op_at.iter().any(|&o| o > 0 && o < ops),
        "samples fall among the ops: {op_at:?}"
    );
    let times: Vec<f64> = samples
        .iter()
        .map(|x| x["time_s"].as_f64().unwrap())
        .collect();
    assert!(times.windows(2).all(|w| w[0] < w[1]));
    // the stand-in reports the process's resident memory: far above the tensors' bytes
    let peak = samples
        .iter()
        .map(|x| x["bytes"].as_i64().unwrap())
        .max()
        .unwrap();
    assert!(peak > 50 << 20, "{peak}");

    let o = common::memtrack_process()
        .arg("summary")
        .arg(&file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("device (driver, GPU 0)"), "{text}");
    assert!(
        text.contains("outside PyTorch's caching allocator"),
        "{text}"
    );
    let o = common::memtrack_process()
        .args(["plot", "-o", "-"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&o.stdout).contains("device_memory (driver)"));

    // --device-interval 0: no series
    let o = common::memtrack_process()
        .current_dir(dir.path())
        .env("MEMTRACK_NVML_LIB", &lib)
        .env("FAKE_NVML_SCAN_COMM", "python")
        .args([
            "record",
            "--backend",
            "cpu",
            "--device-interval",
            "0",
            "-o",
            "off.pkl",
            "--",
        ])
        .arg(&py)
        .args([
            &common::example("mlp_batchnorm.py"),
            "--steps",
            "1",
            "--blocks",
            "1",
        ])
        .output()
        .unwrap();
    assert!(o.status.success());
    let j = common::export(&dir.path().join("off.pkl"));
    assert_eq!(j["memtrack"]["device_memory"].as_array().unwrap().len(), 0);
}
