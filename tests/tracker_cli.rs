//! `summary`, `plot` and `export` over real MemoryTracker files.

mod common;

use common::{fixture, golden, json_out as json, memtrack, stdout};

const FIXTURES: [&str; 3] = [
    "tracker/memory_tracker_cpu_torch2.15.0.pkl",
    "tracker/memory_tracker_without_op_index.pkl",
    "tracker/synthetic_2000_ops.pkl",
];

#[test]
fn summary_text_matches_golden_files() {
    for f in FIXTURES {
        let path = fixture(f);
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        golden(
            &format!("summary_{name}.txt"),
            &stdout(&["summary", path.to_str().unwrap()]),
        );
    }
    let synthetic = fixture(FIXTURES[2]);
    golden(
        "summary_synthetic_top5_mib.md",
        &stdout(&[
            "summary",
            synthetic.to_str().unwrap(),
            "--top",
            "5",
            "--units",
            "MiB",
            "--format",
            "markdown",
        ]),
    );
}

#[test]
fn summary_json_is_consistent_with_the_export() {
    let path = fixture(FIXTURES[2]);
    let p = path.to_str().unwrap();
    let s = json(&["summary", p, "--format", "json", "--top", "20"]);
    let e = json(&["export", p]);
    let ops = e["ops"].as_array().unwrap();
    assert_eq!(s["ops"].as_u64().unwrap() as usize, ops.len());
    assert_eq!(ops.len(), 2000);
    let alloc = |i: usize| ops[i]["allocated_bytes"].as_f64().unwrap();
    // every listed op's generated memory is allocated after it minus after the op before
    let top = s["top_ops"].as_array().unwrap();
    assert_eq!(top.len(), 20);
    let mut last = f64::INFINITY;
    for t in top {
        let i = t["op_index"].as_u64().unwrap() as usize;
        let g = t["generated_bytes"].as_f64().unwrap();
        assert_eq!(g, alloc(i) - alloc(i - 1));
        assert_eq!(t["op"], ops[i]["name"]);
        assert!(g <= last, "top ops are sorted descending");
        last = g;
    }
    // nothing left out is larger than the smallest listed
    let listed: Vec<u64> = top
        .iter()
        .map(|t| t["op_index"].as_u64().unwrap())
        .collect();
    for i in 1..ops.len() {
        if !listed.contains(&(i as u64)) {
            assert!(alloc(i) - alloc(i - 1) <= last);
        }
    }
    // the peak is the maximum of the series, at the op named
    let peak = s["peaks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["series"] == "allocated")
        .unwrap();
    let max = (0..ops.len()).map(alloc).fold(f64::MIN, f64::max);
    assert_eq!(peak["bytes"].as_f64().unwrap(), max);
    assert_eq!(alloc(peak["op_index"].as_u64().unwrap() as usize), max);
    // forward / backward split at the markers of the file
    let phases = s["phases"].as_array().unwrap();
    assert_eq!(phases[0]["phase"], "forward");
    assert_eq!(phases[0]["end_op"], 1000);
    assert_eq!(phases[1]["phase"], "backward");
    assert_eq!(e["markers"][1]["name"], "fw_bw_boundary");
}

#[test]
fn files_without_op_index_summarise_all_their_ops() {
    let with = json(&[
        "summary",
        fixture(FIXTURES[0]).to_str().unwrap(),
        "--format",
        "json",
        "--top",
        "100",
    ]);
    let without = json(&[
        "summary",
        fixture(FIXTURES[1]).to_str().unwrap(),
        "--format",
        "json",
        "--top",
        "100",
    ]);
    assert_eq!(with["op_index"], 35);
    assert!(without["op_index"].is_null());
    assert_eq!(with["top_ops"], without["top_ops"]);
    assert_eq!(
        without["top_ops"].as_array().unwrap().len(),
        34,
        "ops 1..35, as MemoryTracker.summary"
    );
}

#[test]
fn csv_lists_the_top_ops_in_bytes() {
    let out = stdout(&[
        "summary",
        fixture(FIXTURES[2]).to_str().unwrap(),
        "--format",
        "csv",
        "--top",
        "3",
    ]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "rank,op_index,op,generated_bytes");
    assert_eq!(lines.len(), 4);
    let bytes: f64 = lines[1].rsplit(',').next().unwrap().parse().unwrap();
    assert!(bytes > 30.0 * 1024.0 * 1024.0);
}

#[test]
fn plot_draws_every_series_and_marker() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("trace.svg");
    memtrack()
        .args([
            "plot",
            fixture(FIXTURES[2]).to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ])
        .assert()
        .success();
    let svg = std::fs::read_to_string(&out).unwrap();
    assert!(svg.starts_with("<svg"));
    for label in [
        "allocated_memory",
        "active_memory",
        "reserved_memory",
        "fw_start",
        "fw_bw_boundary",
        "# Operator Calls",
        "synthetic_2000_ops.pkl",
        "peak",
    ] {
        assert!(svg.contains(label), "the SVG names {label}");
    }
    // --split draws one panel per series: one y-axis title each
    let split = dir.path().join("split.svg");
    memtrack()
        .args([
            "plot",
            fixture(FIXTURES[2]).to_str().unwrap(),
            "--split",
            "--series",
            "allocated,reserved",
            "-o",
        ])
        .arg(&split)
        .assert()
        .success();
    let svg = std::fs::read_to_string(&split).unwrap();
    assert_eq!(svg.matches("Memory (GiB)").count(), 2);
    assert!(!svg.contains("active_memory"));
}

#[test]
fn plot_output_defaults_to_the_input_name() {
    let dir = tempfile::tempdir().unwrap();
    memtrack()
        .current_dir(dir.path())
        .args(["plot", fixture(FIXTURES[2]).to_str().unwrap()])
        .assert()
        .success();
    assert!(dir.path().join("synthetic_2000_ops.svg").exists());
}

#[test]
fn export_writes_the_whole_model() {
    let e = json(&[
        "export",
        fixture(FIXTURES[0]).to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert_eq!(e["kind"], "tracker_stats");
    assert_eq!(e["op_count"], 35);
    assert_eq!(e["ops"][1]["name"], "0.forward.addmm.default_0");
    assert_eq!(e["markers"][0]["name"], "fw_start");
    assert_eq!(e["markers"][1]["op_index"], 8);
}

#[test]
fn diff_finds_the_module_whose_ops_grew() {
    // B = A with one extra 64 MiB kept from the first op of layers.5.mlp on: that module's
    // ops generate 64 MiB more, every other module generates the same (later peaks move)
    let a_path = fixture("tracker/synthetic_2000_ops.pkl");
    let a = memtrack::formats::load_tracker(&a_path).unwrap();
    let mut b = a.clone();
    let first = (0..b.op_count())
        .find(|&i| b.names.get(i).starts_with("layers.5.mlp.forward."))
        .expect("the fixture has layers.5.mlp");
    const EXTRA: f64 = 64.0 * 1024.0 * 1024.0;
    for s in [&mut b.allocated, &mut b.active] {
        for v in &mut s[first..] {
            *v += EXTRA;
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let b_path = dir.path().join("b.pkl");
    memtrack::formats::tracker::write(&b, &b_path).unwrap();
    let d = json(&[
        "diff",
        a_path.to_str().unwrap(),
        b_path.to_str().unwrap(),
        "--format",
        "json",
        "--top",
        "1000",
    ]);
    let modules = d["modules"].as_array().unwrap();
    assert_eq!(modules[0]["module"], "layers.5.mlp");
    assert_eq!(modules[0]["growth_bytes"].as_f64().unwrap(), EXTRA);
    assert!(
        modules[1..]
            .iter()
            .all(|m| m["growth_bytes"].as_f64().unwrap().abs() < 1.0),
        "only layers.5.mlp's ops generate more"
    );
    assert!(
        modules.len() > 1,
        "modules after it peak higher, and are listed"
    );
    assert_eq!(d["ops"][0]["op"].as_str().unwrap(), a.names.get(first));
    assert_eq!(d["peaks"][0]["growth_bytes"].as_f64().unwrap(), EXTRA);
    // CSV: op rows, then module rows
    let csv = stdout(&[
        "diff",
        a_path.to_str().unwrap(),
        b_path.to_str().unwrap(),
        "--format",
        "csv",
    ]);
    assert!(csv.starts_with("kind,name,generated_before_bytes"));
    assert!(csv.lines().any(|l| l.starts_with("module,layers.5.mlp,")));
}
