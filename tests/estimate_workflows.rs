//! `memtrack estimate` on the workflows people bring it: every checkpointing mode,
//! `generate()`, programs that raise or are killed, data-dependent ops, values that decide
//! branches, the device's own questions, and checkpoints saved over real files. Each program
//! is run once and several things are asserted on its result.

mod common;

use std::path::{Path, PathBuf};

use common::{exit_code, memtrack_process as memtrack, python, script};
use serde_json::Value;

/// What one `memtrack estimate --format json` run gave.
struct Estimate {
    code: i32,
    /// The program's own output (before the verdict).
    program: String,
    verdict: Value,
    stderr: String,
    file: PathBuf,
}

impl Estimate {
    fn v(&self) -> &Value {
        &self.verdict["verdict"]
    }
}

/// `memtrack estimate --format json [extra] -o DIR/est.pkl -- python SCRIPT ARGS` in `dir`.
fn estimate(dir: &Path, py: &Path, extra: &[&str], script_args: &[&str]) -> Estimate {
    let file = dir.join("est.pkl");
    let o = memtrack()
        .current_dir(dir)
        .arg("estimate")
        .args(["--format", "json", "-o"])
        .arg(&file)
        .args(extra)
        .arg("--")
        .arg(py)
        .arg(script(script_args[0]))
        .args(&script_args[1..])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    // the program's own output comes first; the verdict follows it, from a line `{`
    let start = stdout.rfind("\n{\n").map_or(0, |i| i + 1);
    let verdict = serde_json::from_str(&stdout[start..])
        .unwrap_or_else(|e| panic!("{e}: {stdout}\n{stderr}"));
    Estimate {
        code: exit_code(o.status),
        program: stdout[..start].to_string(),
        verdict,
        stderr,
        file,
    }
}

/// The line of estimate_values.py that holds `needle` (the first such line).
fn line_of(needle: &str) -> u64 {
    let text = std::fs::read_to_string(script("estimate_values.py")).unwrap();
    let i = text.lines().position(|l| l.contains(needle));
    i.unwrap_or_else(|| panic!("{needle:?} is not in estimate_values.py")) as u64 + 1
}

fn peak_allocated(e: &Estimate) -> u64 {
    e.v()["peak_allocated_bytes"].as_u64().unwrap()
}

#[test]
fn every_checkpointing_mode_runs_to_its_end_and_lowers_the_peak() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut peaks = Vec::new();
    for mode in [
        "none",
        "reentrant",
        "nonreentrant",
        "selective",
        "sequential",
    ] {
        let e = estimate(dir.path(), &py, &[], &["estimate_checkpointing.py", mode]);
        assert_eq!(e.code, 0, "{mode}: {}\n{}", e.program, e.stderr);
        assert!(e.program.contains("() done"), "{mode}: {}", e.program);
        assert_eq!(e.v()["fits"], true, "{mode}");
        assert_eq!(e.v()["finished"], true, "{mode}");
        // dropout and attention are CUDA's in forward and in recomputation alike
        assert!(
            !e.stderr.contains("CheckpointError"),
            "{mode}: {}",
            e.stderr
        );
        peaks.push((mode, peak_allocated(&e)));
    }
    let peak = |m: &str| peaks.iter().find(|(n, _)| *n == m).unwrap().1;
    let none = peak("none");
    for mode in ["reentrant", "nonreentrant", "sequential"] {
        assert!(peak(mode) < none * 3 / 4, "{mode}: {peaks:?}");
    }
    // the two modes keep the same tensors: only the blocks' inputs between forward and backward
    let (r, n) = (peak("reentrant") as f64, peak("nonreentrant") as f64);
    assert!((n / r - 1.0).abs() < 0.25, "{peaks:?}");
    // a policy that saves the matmuls keeps more than full recomputation, less than none
    assert!(
        peak("selective") > peak("nonreentrant") && peak("selective") < none,
        "{peaks:?}"
    );
}

/// The Python with torch, if it also has `transformers` (scripts/setup-python.sh installs it).
fn python_with_transformers() -> Option<PathBuf> {
    let py = python()?;
    let ok = std::process::Command::new(&py)
        .args(["-c", "import transformers"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "transformers is not importable from {py:?} and CI is set"
        );
        eprintln!("\n*** SKIPPED: transformers not importable from {py:?} ***\n");
        return None;
    }
    Some(py)
}

#[test]
fn generate_ends_at_max_new_tokens_and_hugging_face_checkpointing_lowers_the_peak() {
    let Some(py) = python_with_transformers() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let e = estimate(dir.path(), &py, &[], &["estimate_hf.py", "generate"]);
    // four prompt tokens and five new ones: the length limit is known (the stopping criteria
    // are built from host values), the end-of-sequence test is not
    assert!(
        e.program.contains("generated (1, 9)"),
        "{}\n{}",
        e.program,
        e.stderr
    );
    assert_eq!(e.v()["fits"], true);
    assert_eq!(e.v()["finished"], true);
    // whether a sequence ended early is a value the estimate does not have: said, with its line
    let branches: Vec<&Value> = e.verdict["values_read"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["branch"] == true)
        .collect();
    assert!(
        branches
            .iter()
            .all(|r| r["file"].as_str().unwrap().contains("transformers")),
        "{branches:?}"
    );
    let mut peaks = Vec::new();
    for mode in ["plain", "checkpoint"] {
        let e = estimate(dir.path(), &py, &[], &["estimate_hf.py", mode]);
        assert_eq!(e.code, 0, "{mode}: {}\n{}", e.program, e.stderr);
        assert!(e.program.contains("trained"), "{mode}");
        peaks.push(peak_allocated(&e));
    }
    assert!(peaks[1] < peaks[0] * 3 / 4, "{peaks:?}");
    // an attention mask that came from the host is read for what it is (all ones): no value
    // is unknown, and attention takes the unpadded branch, CUDA's flash kernel
    let e = estimate(dir.path(), &py, &[], &["estimate_hf.py", "mask"]);
    assert_eq!(e.code, 0, "{}\n{}", e.program, e.stderr);
    assert_eq!(
        e.verdict["values_read"].as_array().unwrap().len(),
        0,
        "{}",
        e.verdict
    );
    let ops = common::export(&e.file);
    let names = common::op_names(&ops);
    assert!(names
        .iter()
        .any(|n| n.contains("_scaled_dot_product_flash_attention")));
}

#[test]
fn a_program_that_raises_did_not_finish_and_says_where() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let e = estimate(dir.path(), &py, &[], &["estimate_values.py", "raise"]);
    assert_eq!(e.code, 5, "{}", e.stderr);
    let v = e.v();
    assert_eq!(v["finished"], false);
    assert!(v["fits"].is_null());
    let ending = &v["ending"];
    assert_eq!(ending["kind"], "exception");
    assert_eq!(ending["exception"], "ValueError");
    assert_eq!(ending["message"], "the program's own error");
    assert!(ending["file"]
        .as_str()
        .unwrap()
        .ends_with("estimate_values.py"));
    assert_eq!(ending["line"], line_of("raise ValueError"));
    // how far it got: the linear layer's op, and what it held then
    assert!(
        v["reached"]["op"].as_str().unwrap().contains("Linear"),
        "{v}"
    );
    assert!(v["peak_allocated_bytes"].as_u64().unwrap() > 40_000);
    // the file is a record file as any other
    let o = memtrack().arg("summary").arg(&e.file).output().unwrap();
    assert!(o.status.success());
    // the text verdict says so first
    let o = memtrack()
        .current_dir(dir.path())
        .args(["estimate", "-o"])
        .arg(&e.file)
        .arg("--")
        .arg(&py)
        .args([script("estimate_values.py").as_str(), "raise"])
        .output()
        .unwrap();
    assert_eq!(exit_code(o.status), 5);
    let text = String::from_utf8_lossy(&o.stdout);
    let first = text.lines().next().unwrap();
    assert!(
        first.starts_with("Did not finish: the program raised ValueError at ")
            && first.contains(&format!(
                "estimate_values.py:{} (the program's own error); it got to op",
                line_of("raise ValueError")
            )),
        "{text}"
    );
    assert!(text.contains("No verdict"), "{text}");
}

#[test]
fn data_dependent_ops_are_upper_bounds_named_with_their_lines() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let e = estimate(dir.path(), &py, &[], &["estimate_values.py", "select"]);
    assert_eq!(e.code, 0, "{}", e.stderr);
    // every element selected: 1000 rows, 64000 values, 64000 (row, column) pairs, 1000
    // rows, 64000 distinct values
    assert!(
        e.program
            .contains("[(1000, 64), (64000,), (64000, 2), (1000,), (64000,)]"),
        "{}",
        e.program
    );
    assert_eq!(e.v()["upper_bound"], true);
    // cuDNN's workspaces are not modelled: the verdict says reserved may be higher
    assert_eq!(e.v()["convolutions"], true);
    let bounds: Vec<(String, u64)> = e.verdict["upper_bounds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            assert!(b["file"].as_str().unwrap().ends_with("estimate_values.py"));
            (
                b["op"].as_str().unwrap().to_string(),
                b["line"].as_u64().unwrap(),
            )
        })
        .collect();
    for want in [
        ("nonzero", line_of("x[x[")),
        ("masked_select", line_of("b = torch.masked_select")),
        ("nonzero", line_of("c = torch.nonzero")),
        ("nonzero", line_of("torch.where(x")),
        ("unique", line_of("e = torch.unique")),
    ] {
        assert!(
            bounds.iter().any(|(op, l)| op == want.0 && *l == want.1),
            "{want:?} in {bounds:?}"
        );
    }
}

#[test]
fn values_read_survive_os_exit_and_sigterm() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    for (how, code) in [("exit", 0), ("term", 5)] {
        let e = estimate(dir.path(), &py, &[], &["estimate_values.py", how]);
        assert_eq!(e.code, code, "{how}: {}", e.stderr);
        let reads = e.verdict["values_read"].as_array().unwrap();
        assert_eq!(reads.len(), 1, "{how}: {reads:?}");
        assert_eq!(reads[0]["what"], "item()");
        assert_eq!(reads[0]["count"], 5, "{how}");
        assert_eq!(reads[0]["line"], line_of("x.sum().item()"), "{how}");
        if how == "term" {
            assert_eq!(e.v()["ending"]["kind"], "signal");
            assert_eq!(e.v()["ending"]["signal"], 15);
        }
    }
}

#[test]
fn the_devices_questions_get_the_allocator_models_answers() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let e = estimate(dir.path(), &py, &[], &["estimate_values.py", "device"]);
    assert_eq!(e.code, 0, "{}\n{}", e.program, e.stderr);
    let line = |key: &str| -> Vec<u64> {
        let l = (e.program.lines())
            .find(|l| l.strip_prefix(key).is_some_and(|r| r.starts_with(' ')))
            .unwrap();
        l.split_whitespace()
            .skip(key.split_whitespace().count())
            .map(|x| x.parse().unwrap())
            .collect()
    };
    let v = e.v();
    let (usable, total) = (
        v["usable_bytes"].as_u64().unwrap(),
        v["device_bytes"].as_u64().unwrap(),
    );
    let mib = 1 << 20;
    // 256 MiB reserved (the freed block stays cached) when it asks
    assert_eq!(line("mem_get_info"), vec![usable - 256 * mib, total]);
    assert_eq!(line("before reset"), vec![256 * mib, 256 * mib]);
    // after a reset, the peak is what is allocated now: the 4 MiB tensor
    assert_eq!(line("after reset"), vec![4 * mib, 4 * mib]);
    // at the end: the peaks since the reset; reserved never fell, so its peak is the file's
    let peaks = line("peaks");
    assert_eq!(peaks[0], 4 * mib + 512);
    assert_eq!(peaks[1], v["peak_reserved_bytes"].as_u64().unwrap());
    assert_eq!(peaks[1], 258 * mib);
    assert_eq!(v["peak_allocated_bytes"].as_u64().unwrap(), 256 * mib);
    // a device tensor's `.device` is the device: the weight and the bias, on it
    assert_eq!(line("moved to y.device"), vec![4 * mib + 4096]);
    // print(loss) prints as CUDA's tensor would, and is a value read
    assert!(
        e.program.contains("tensor(0., device='cuda:0')"),
        "{}",
        e.program
    );
    let reads = e.verdict["values_read"].as_array().unwrap();
    assert!(
        reads
            .iter()
            .any(|r| r["line"] == line_of("    print(loss)")),
        "{reads:?}"
    );
}

#[test]
fn an_existing_checkpoint_is_left_as_it_was() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let ckpt = dir.path().join("ckpt.pt");
    std::fs::write(&ckpt, b"the user's real checkpoint").unwrap();
    let e = estimate(
        dir.path(),
        &py,
        &[],
        &["estimate_values.py", "save", ckpt.to_str().unwrap()],
    );
    assert_eq!(e.code, 0, "{}", e.stderr);
    assert!(e.program.contains("saved"));
    assert_eq!(std::fs::read(&ckpt).unwrap(), b"the user's real checkpoint");
    let unwritten = e.verdict["unwritten"].as_array().unwrap();
    assert_eq!(unwritten.len(), 1, "{unwritten:?}");
    assert_eq!(unwritten[0]["what"], "torch.save");
    assert_eq!(unwritten[0]["path"], ckpt.to_str().unwrap());
    assert_eq!(unwritten[0]["line"], line_of("torch.save("));
}

#[test]
fn a_value_that_decides_a_branch_limits_the_verdict_to_the_path_taken() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let e = estimate(dir.path(), &py, &[], &["estimate_values.py", "earlystop"]);
    // zeros stop the loop at once: the figure holds for that path only
    assert!(e.program.contains("stopped at batch 64"), "{}", e.program);
    assert_eq!(e.code, 4, "{}", e.stderr);
    assert_eq!(e.v()["fits"], true);
    assert_eq!(e.v()["path_taken_only"], true);
    let reads = e.verdict["values_read"].as_array().unwrap();
    let branch = reads.iter().find(|r| r["branch"] == true).unwrap();
    assert_eq!(branch["line"], line_of("if loss.item()"), "{reads:?}");
}

#[test]
fn a_loop_waiting_on_a_value_never_known_is_stopped_where_it_waits() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let e = estimate(
        dir.path(),
        &py,
        &["--max-repeats", "50"],
        &["estimate_values.py", "loop"],
    );
    assert_eq!(e.code, 5, "{}", e.stderr);
    assert!(!e.program.contains("never printed"));
    let ending = &e.v()["ending"];
    assert_eq!(ending["kind"], "stopped", "{ending}");
    assert_eq!(ending["line"], line_of("while not done"));
    assert_eq!(ending["count"], 51);
    assert_eq!(ending["limit"], 50);
}

#[test]
fn values_that_came_from_the_host_are_known() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let e = estimate(dir.path(), &py, &[], &["estimate_values.py", "known"]);
    assert_eq!(e.code, 0, "{}", e.stderr);
    assert!(
        e.program
            .contains("all False sum 3 list [[5, 6, 7, 0]]\narange [0, 1, 2, 3]"),
        "{}",
        e.program
    );
    assert_eq!(e.verdict["values_read"].as_array().unwrap().len(), 0);
}
