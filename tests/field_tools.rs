//! Field tools without a GPU: `gpus` on a machine without the NVIDIA driver, `allocator` on
//! recorded counters (checked against PyTorch's own memory_summary), completions, the man
//! page, and no colour under NO_COLOR.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::{fixture, memtrack, python_with_torch};
use memtrack::formats::tracker;
use memtrack::model::{ExitInfo, OpNames, RecordInfo, TrackerStats};

fn run(args: &[&str]) -> (i32, String, String) {
    let o = memtrack().args(args).output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn gpus_without_a_driver_says_so_and_exits_2() {
    // a library that cannot be there stands for a machine without the NVIDIA driver
    let o = memtrack()
        .env("MEMTRACK_NVML_LIB", "/nonexistent/libnvidia-ml.so.1")
        .args(["gpus"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("no NVIDIA driver"), "{err}");
    assert!(
        err.contains("libnvidia-ml.so.1") && err.contains("NVML"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(o.stdout.is_empty());

    // and this machine as it is: a listing, or the same kind of message (never a crash)
    let (code, out, err) = run(&["gpus", "--format", "json"]);
    match code {
        0 => {
            let j: serde_json::Value = serde_json::from_str(&out).unwrap();
            assert!(j["gpus"].is_array());
        }
        2 => assert!(
            err.contains("NVIDIA driver") || err.contains("NVML"),
            "{err}"
        ),
        c => panic!("gpus exited {c}: {err}"),
    }
}

/// `torch.cuda.memory_stats()` keys as PyTorch names them, with values that differ per key
/// and cross the units memory_summary switches at.
fn realistic_memory_stats() -> BTreeMap<String, i64> {
    let mut s = BTreeMap::new();
    let metrics = [
        "allocation",
        "allocated_bytes",
        "active",
        "active_bytes",
        "inactive_split",
        "inactive_split_bytes",
        "reserved_bytes",
        "segment",
        "requested_bytes",
    ];
    for (m, metric) in metrics.iter().enumerate() {
        let bytes = metric.ends_with("_bytes");
        for (p, pool) in ["all", "large_pool", "small_pool"].iter().enumerate() {
            for (k, kind) in ["current", "peak", "allocated", "freed"].iter().enumerate() {
                let base: i64 = if bytes {
                    [3_221_225_472 + 12_345, 900 << 20, 5_000, 123 << 40][k]
                } else {
                    [12, 800_000, 2_000_000_000, 999][k]
                };
                let v = match p {
                    0 => base,
                    1 => base / 3 * 2,
                    _ => base / 3,
                } + m as i64;
                s.insert(format!("{metric}.{pool}.{kind}"), v);
            }
        }
    }
    for (m, metric) in ["oversize_allocations", "oversize_segments"]
        .iter()
        .enumerate()
    {
        for (k, kind) in ["current", "peak", "allocated", "freed"].iter().enumerate() {
            s.insert(format!("{metric}.{kind}"), (m * 10 + k) as i64);
        }
    }
    for (k, v) in [
        ("num_alloc_retries", 3),
        ("num_ooms", 1),
        ("num_sync_all_streams", 4),
        ("num_device_alloc", 17),
        ("num_device_free", 5),
        ("max_split_size", -1),
    ] {
        s.insert(k.to_string(), v);
    }
    s
}

fn recorded(backend: &str, memory_stats: BTreeMap<String, i64>) -> TrackerStats {
    let mut names = OpNames::default();
    names.push("Net.forward.mm.default_0");
    TrackerStats {
        names,
        allocated: vec![1024.0],
        active: vec![1024.0],
        reserved: vec![2048.0],
        record: Some(RecordInfo {
            version: "test".into(),
            backend: backend.into(),
            device_name: (backend == "cuda").then(|| "NVIDIA H100 80GB HBM3".to_string()),
            device_index: Some(1),
            memory_stats,
            exit: Some(ExitInfo {
                ended: Some("exit".into()),
                ..ExitInfo::default()
            }),
            ..RecordInfo::default()
        }),
        ..TrackerStats::default()
    }
}

fn write(dir: &Path, name: &str, stats: &TrackerStats) -> String {
    let p = dir.join(name);
    tracker::write(stats, &p).unwrap();
    p.to_str().unwrap().to_string()
}

#[test]
fn allocator_prints_memory_summary_from_recorded_counters() {
    let dir = tempfile::tempdir().unwrap();
    let counters = realistic_memory_stats();
    let file = write(dir.path(), "cuda.pkl", &recorded("cuda", counters.clone()));

    let (code, text, err) = run(&["allocator", &file]);
    assert_eq!(code, 0, "{err}");
    assert!(
        text.starts_with("cuda.pkl: CUDA caching allocator counters at exit (NVIDIA H100"),
        "{text}"
    );
    let box_text = text.split_once('\n').unwrap().1;
    assert!(
        box_text.contains("PyTorch CUDA memory summary, device ID 1"),
        "{text}"
    );
    assert!(box_text.contains("CUDA OOMs: 1 "), "{text}");
    assert!(box_text.contains("cudaMalloc retries: 3 "), "{text}");
    // 3 GiB + 12345 B in MiB, 123 TiB in GiB: memory_summary's units (it steps up while the
    // `all` value is at least 768 of the next unit)
    assert!(
        box_text.contains(
            "| Allocated memory      |   3072 MiB |    900 MiB |   5001 B   | 125952 GiB |"
        ),
        "{text}"
    );

    // JSON: the counters themselves
    let (code, j, _) = run(&["allocator", &file, "--format", "json"]);
    assert_eq!(code, 0);
    let j: serde_json::Value = serde_json::from_str(&j).unwrap();
    let m = &j["metrics"][0];
    assert_eq!(m["key"], "allocated_bytes");
    assert_eq!(
        m["rows"][0]["current"].as_i64(),
        Some(counters["allocated_bytes.all.current"])
    );
    assert_eq!(
        m["rows"][2]["freed"].as_i64(),
        Some(counters["allocated_bytes.small_pool.freed"])
    );
    assert_eq!(j["other"]["num_device_alloc"], 17);

    // CSV: bytes; Markdown: units
    let (_, csv, _) = run(&["allocator", &file, "--format", "csv"]);
    let row = format!(
        "Allocated memory,all,{},{},",
        counters["allocated_bytes.all.current"], counters["allocated_bytes.all.peak"]
    );
    assert!(csv.contains(&row), "{csv}");
    let (_, md, _) = run(&["allocator", &file, "--format", "markdown", "--units", "MiB"]);
    assert!(md.contains("| Allocated memory"), "{md}");
    assert!(md.contains("MiB"), "{md}");
    let (_, abbreviated, _) = run(&["allocator", &file, "--abbreviated"]);
    assert!(!abbreviated.contains("from large pool"));

    // the same counters through PyTorch's own memory_summary, character for character
    let Some(py) = python_with_torch() else {
        return;
    };
    let json_path = dir.path().join("stats.json");
    std::fs::write(&json_path, serde_json::to_vec(&counters).unwrap()).unwrap();
    for (abbreviated, args) in [
        (false, vec!["allocator", file.as_str()]),
        (true, vec!["allocator", file.as_str(), "--abbreviated"]),
    ] {
        let o = std::process::Command::new(&py)
            .args([
                "-c",
                "import json, sys\n\
                 import torch.cuda.memory as m\n\
                 stats = json.load(open(sys.argv[1]))\n\
                 m.memory_stats = lambda device=None: stats\n\
                 sys.stdout.write(m.memory_summary(1, abbreviated=sys.argv[2] == '1'))\n",
                json_path.to_str().unwrap(),
                if abbreviated { "1" } else { "0" },
            ])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let theirs = String::from_utf8(o.stdout).unwrap();
        let (_, ours, _) = run(&args);
        assert_eq!(ours.split_once('\n').unwrap().1, theirs);
    }
}

#[test]
fn allocator_explains_files_without_counters() {
    let dir = tempfile::tempdir().unwrap();
    let cpu = write(dir.path(), "cpu.pkl", &recorded("cpu", BTreeMap::new()));
    let (code, _, err) = run(&["allocator", &cpu]);
    assert_eq!(code, 2);
    assert!(
        err.contains("cpu.pkl: recorded on the cpu backend") && err.contains("no allocator"),
        "{err}"
    );

    let cuda = write(
        dir.path(),
        "cuda.pkl",
        &recorded("cuda", realistic_memory_stats()),
    );
    let (code, _, err) = run(&["allocator", &cuda, "--at", "oom"]);
    assert_eq!(code, 2);
    assert!(err.contains("did not run out of CUDA memory"), "{err}");

    let mt = fixture("tracker/memory_tracker_cpu_torch2.15.0.pkl");
    let (code, _, err) = run(&["allocator", mt.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("MemoryTracker stats keep only"), "{err}");
}

#[test]
fn completions_and_man_page() {
    for shell in ["bash", "zsh", "fish"] {
        let (code, out, err) = run(&["completions", shell]);
        assert_eq!(code, 0, "{err}");
        assert!(out.len() > 1000, "{shell}: {} bytes", out.len());
        for sub in ["record", "gpus", "cycles", "allocator"] {
            assert!(out.contains(sub), "{shell} completions lack {sub}");
        }
    }
    let (code, page, _) = run(&["man"]);
    assert_eq!(code, 0);
    assert!(page.contains(".TH memtrack 1"), "{}", &page[..200]);
    for section in ["MEMTRACK RECORD", "MEMTRACK GPUS", "MEMTRACK CYCLES"] {
        assert!(page.contains(section), "no {section}");
    }
    assert!(
        page.contains("device\\-interval"),
        "record's options are on the page"
    );
    // it renders, where man is installed
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("memtrack.1");
    std::fs::write(&file, &page).unwrap();
    if let Ok(o) = std::process::Command::new("man")
        .arg("-l")
        .arg(&file)
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "100")
        .output()
    {
        if o.status.success() {
            let text = String::from_utf8_lossy(&o.stdout);
            assert!(text.contains("MEMTRACK GPUS"), "{text}");
        }
    }
    // one page per subcommand
    let (code, _, _) = run(&["man", "--dir", dir.path().to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(dir.path().join("memtrack-cycles.1").exists());
}

#[test]
fn no_colour_under_no_color() {
    // help on a terminal would be styled; with NO_COLOR it is plain (`script` gives a pty)
    let exe = env!("CARGO_BIN_EXE_memtrack");
    let Ok(o) = std::process::Command::new("script")
        .args(["-qec", &format!("{exe} --help"), "/dev/null"])
        .env("NO_COLOR", "1")
        .output()
    else {
        eprintln!("SKIPPED: no `script` to give memtrack a terminal");
        return;
    };
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("Usage"), "{out}");
    assert!(
        !out.contains('\u{1b}'),
        "escape codes under NO_COLOR: {out:?}"
    );
    // the control: the same on a terminal without NO_COLOR is styled
    let o = std::process::Command::new("script")
        .args(["-qec", &format!("{exe} --help"), "/dev/null"])
        .env_remove("NO_COLOR")
        .env_remove("CLICOLOR")
        .env("TERM", "xterm")
        .output()
        .unwrap();
    let styled = String::from_utf8_lossy(&o.stdout);
    assert!(
        styled.contains('\u{1b}'),
        "a terminal gets styles: {styled:?}"
    );
}
