//! `memtrack record` when the program ends badly: nothing received is lost, the file says how
//! it ended, and `record` exits with the program's code (128 + signal when killed).

mod common;

use std::time::Duration;

use common::{example, exit_code, export, memtrack_process as memtrack, python, record, script};

#[test]
fn sigkill_mid_run_keeps_the_ops_before_it() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (code, stderr) = record(
        dir.path(),
        "kill.pkl",
        &[],
        &py,
        &[&script("ending.py"), "kill"],
    );
    assert_eq!(code, 137, "{stderr}");
    let j = export(&dir.path().join("kill.pkl"));
    let exit = &j["memtrack"]["exit"];
    assert_eq!(exit["signal"], 9);
    assert_eq!(exit["ended"], "disconnected");
    // two whole training steps were shipped before the kill
    let iterations = j["memtrack"]["modules"].as_array().unwrap();
    assert!(iterations.len() >= 2, "{} iterations", iterations.len());
    let ops = j["op_count"].as_u64().unwrap();
    let second_backward = j["memtrack"]["marker_events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["name"] == "fw_bw_boundary")
        .nth(1)
        .expect("the second iteration's fw_bw_boundary")["op_index"]
        .as_u64()
        .unwrap();
    assert!(ops > second_backward + 50, "{ops} ops");
    assert!(!dir.path().read_dir().unwrap().any(|e| e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .contains("journal")));
}

#[test]
fn an_exception_is_recorded_and_exit_code_passed_through() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (code, _) = record(
        dir.path(),
        "raise.pkl",
        &[],
        &py,
        &[&script("ending.py"), "raise"],
    );
    assert_eq!(code, 1);
    let j = export(&dir.path().join("raise.pkl"));
    let exit = &j["memtrack"]["exit"];
    assert_eq!(exit["code"], 1);
    assert_eq!(exit["ended"], "exception");
    assert!(exit["exception"]
        .as_str()
        .unwrap()
        .contains("RuntimeError: boom at step 1"));
    assert!(j["op_count"].as_u64().unwrap() > 100);
}

#[test]
fn summary_names_the_exception_and_where_it_came() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (code, _) = record(
        dir.path(),
        "raise.pkl",
        &[],
        &py,
        &[&script("raise_in_module.py")],
    );
    assert_eq!(code, 1);
    let o = memtrack()
        .arg("summary")
        .arg(dir.path().join("raise.pkl"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("The program raised RuntimeError: mat1 and mat2 shapes cannot be multiplied")
            || text.contains("The program raised RuntimeError: addmm: mat1 and mat2 shapes"),
        "{text}"
    );
    assert!(text.contains("in Sequential.0's forward"), "{text}");
    let o = memtrack()
        .args(["summary", "--format", "json"])
        .arg(dir.path().join("raise.pkl"))
        .output()
        .unwrap();
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["raised"]["module"], "Sequential.0");
    assert_eq!(j["raised"]["phase"], "forward");
    let (op, name) = (&j["raised"]["after_op"][0], &j["raised"]["after_op"][1]);
    assert_eq!(op.as_u64().unwrap() + 1, j["ops"].as_u64().unwrap());
    assert!(name.as_str().unwrap().starts_with("Sequential.0.forward."));
}

/// Ctrl-C goes to the program, which ends as it does alone on Ctrl-C: Python prints the
/// KeyboardInterrupt and ends by SIGINT (130, as on this project's setup, Python 3.11 and
/// torch 2.15); where a Python exits otherwise, `record` passes that through.
#[test]
fn interrupt_goes_to_the_program_and_the_file_is_written() {
    let Some(py) = python() else { return };
    let alone = interrupted_alone(&py);
    let Some(j) = signal_memtrack(libc::SIGINT, alone) else {
        return;
    };
    let exit = &j["memtrack"]["exit"];
    if alone == 130 {
        assert_eq!(exit["signal"], 2);
    }
    assert!(exit["exception"]
        .as_str()
        .unwrap_or("")
        .contains("KeyboardInterrupt"));
}

/// The exit code of `ending.py loop` run alone and sent SIGINT after its first step, as
/// `signal_memtrack` does to `record` (SIGINT at its default, as a terminal's Ctrl-C finds it).
fn interrupted_alone(py: &std::path::Path) -> i32 {
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new(py);
    cmd.args([&script("ending.py"), "loop"])
        .stdout(std::process::Stdio::piped());
    // SAFETY: signal(2) in the child between fork and exec, nothing else
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    let _out = wait_for_ready(&mut child);
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: kill(2) on the process this test started
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGINT);
    }
    exit_code(child.wait().unwrap())
}

#[test]
fn sigterm_goes_to_the_program_which_ships_its_ops_first() {
    let Some(j) = signal_memtrack(libc::SIGTERM, 143) else {
        return;
    };
    let exit = &j["memtrack"]["exit"];
    assert_eq!(exit["signal"], 15);
    assert_eq!(exit["ended"], "signal");
}

/// Record a training loop, send `sig` to memtrack (as `kill -INT memtrack` would) once a step
/// is done, expect `code`; the file's JSON.
fn signal_memtrack(sig: libc::c_int, code: i32) -> Option<serde_json::Value> {
    let py = python()?;
    let dir = tempfile::tempdir().unwrap();
    let (mut child, _stdout) = record_loop(dir.path(), &py);
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: kill(2) on the memtrack process this test started
    unsafe {
        libc::kill(child.id() as libc::pid_t, sig);
    }
    let status = child.wait().unwrap();
    assert_eq!(exit_code(status), code);
    let j = export(&dir.path().join("loop.pkl"));
    assert!(!j["memtrack"]["modules"].as_array().unwrap().is_empty());
    Some(j)
}

#[test]
fn a_program_that_is_not_python_gets_its_code_and_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let o = memtrack()
        .current_dir(dir.path())
        .args(["record", "-o", "x.pkl", "--", "sh", "-c", "exit 3"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("nothing recorded"), "{err}");
    assert!(!dir.path().join("x.pkl").exists());
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "no journal left"
    );

    let o = memtrack()
        .args(["record", "--", "/nonexistent/program"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(127));
}

#[test]
fn a_python_without_torch_is_named() {
    // any interpreter on PATH that lacks torch will do; skip where every one has it
    let Some(py) = ["python3", "python"].into_iter().find(|p| {
        std::process::Command::new(p)
            .args(["-c", "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is not None)"])
            .status()
            .is_ok_and(|s| s.success())
    }) else {
        eprintln!("SKIPPED: every python on PATH has torch");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let o = memtrack()
        .current_dir(dir.path())
        .args(["record", "-o", "x.pkl", "--", py, "-c", "import torch"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("cannot import torch"), "{err}");
}

/// `memtrack record` of `killed.py ARGS`: (exit code, the file as JSON, steps the program
/// finished before it died).
fn record_killed(
    dir: &std::path::Path,
    name: &str,
    args: &[&str],
) -> (i32, serde_json::Value, usize) {
    let py = python().unwrap();
    let progress = dir.join(format!("{name}.progress"));
    let mut all = vec![script("killed.py"), progress.display().to_string()];
    all.extend(args.iter().map(|a| a.to_string()));
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    let (code, stderr) = record(dir, &format!("{name}.pkl"), &[], &py, &all);
    let steps = std::fs::read_to_string(&progress)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("step"))
        .count();
    let j = export(&dir.join(format!("{name}.pkl")));
    assert!(!stderr.contains("nothing recorded"), "{stderr}");
    (code, j, steps)
}

fn ops(j: &serde_json::Value) -> Vec<(String, f64)> {
    j["ops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["name"].as_str().unwrap().to_string(),
                o["allocated_bytes"].as_f64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn sigkill_right_after_an_op_loses_nothing() {
    if python().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (code, killed, _) = record_killed(dir.path(), "killed", &["after", "3"]);
    assert_eq!(code, 137);
    assert_eq!(killed["memtrack"]["exit"]["signal"], 9);
    let (code, reference, _) = record_killed(dir.path(), "reference", &["after", "3", "exit"]);
    assert_eq!(code, 0);
    // every op, up to the forward that ran just before the kill, with the same memory
    assert_eq!(ops(&killed), ops(&reference));
}

#[test]
fn sigkill_at_1_ms_and_20_ms_keeps_every_op_before_it() {
    if python().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (_, reference, _) = record_killed(dir.path(), "reference", &["steps", "60"]);
    let reference = ops(&reference);
    let per_step = reference.len() / 60;
    for ms in ["1", "20"] {
        let (code, j, steps) = record_killed(dir.path(), &format!("timer{ms}"), &["timer", ms]);
        assert_eq!(code, 137, "{ms} ms");
        let got = ops(&j);
        // the model was built before the timer started: its ops are there, and every
        // finished step's, all as the uninterrupted run has them
        assert!(
            got.len() >= steps * per_step && !got.is_empty(),
            "{ms} ms: {} ops, {steps} steps",
            got.len()
        );
        assert!(
            got.len() <= reference.len(),
            "{ms} ms: ran past the reference"
        );
        assert_eq!(got[..], reference[..got.len()], "{ms} ms");
    }
}

/// `memtrack record -o loop.pkl -- python ending.py loop` in `dir`, once one step is done;
/// the program's stdout stays open as long as the caller keeps it (a closed pipe would end
/// the program with a BrokenPipeError of its own).
fn record_loop(
    dir: &std::path::Path,
    py: &std::path::Path,
) -> (std::process::Child, std::process::ChildStdout) {
    let mut child = memtrack()
        .current_dir(dir)
        .args(["record", "-o", "loop.pkl", "--"])
        .arg(py)
        .args([&script("ending.py"), "loop"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_for_ready(&mut child);
    (child, out)
}

/// Read the child's stdout until it says "ready" (its first step is done); its stdout, kept
/// open so that the program never writes into a closed pipe.
fn wait_for_ready(child: &mut std::process::Child) -> std::process::ChildStdout {
    let mut out = child.stdout.take().unwrap();
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains("ready") {
        let mut b = [0u8; 256];
        let n = std::io::Read::read(&mut out, &mut b).unwrap();
        assert!(n > 0, "the program ended early");
        seen.extend_from_slice(&b[..n]);
    }
    out
}

#[test]
fn a_killed_memtrack_leaves_a_journal_that_recover_turns_into_the_file() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (mut child, _stdout) = record_loop(dir.path(), &py);
    let journal = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().contains("loop.pkl.journal-"))
        .expect("the journal beside the output");
    // SAFETY: kill(2) on the memtrack process this test started
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGKILL);
    }
    child.wait().unwrap();
    // the program outlives memtrack: end it too (its pid names its spool)
    let spool = std::fs::read_dir(&journal)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with("spool-"))
        .expect("a spool in the journal");
    let pid: i32 = spool.split('-').nth(1).unwrap().parse().unwrap();
    // SAFETY: kill(2) on the recorded program this test started (through memtrack)
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
    std::thread::sleep(Duration::from_millis(200));
    assert!(!dir.path().join("loop.pkl").exists());
    // a copy damaged halfway through its records, as a bad disk or a stray write would
    let damaged = dir.path().join("damaged.pkl.journal-1");
    std::fs::create_dir(&damaged).unwrap();
    for e in std::fs::read_dir(&journal).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), damaged.join(e.file_name())).unwrap();
    }
    let mut bytes = std::fs::read(damaged.join(&spool)).unwrap();
    let used = i64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    for slot in used / 2..used / 2 + 64 {
        bytes[slot * 8..slot * 8 + 8].copy_from_slice(&(i64::MIN + 7).to_le_bytes());
    }
    std::fs::write(damaged.join(&spool), bytes).unwrap();

    let o = memtrack()
        .args(["record", "--recover"])
        .arg(&journal)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j = export(&dir.path().join("loop.pkl"));
    assert!(!j["memtrack"]["modules"].as_array().unwrap().is_empty());
    let ops = j["op_count"].as_u64().unwrap();
    assert!(ops > 100);

    // the damaged copy: what comes before the damage is written, the rest is not read as
    // data, and recover says so, exits 2 and keeps the journal
    let o = memtrack()
        .args(["record", "--recover"])
        .arg(&damaged)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    // (an unknown record code, or an impossible size where the damage starts inside a record)
    assert!(
        stderr.contains("damaged: an unknown record code")
            || stderr.contains("damaged: a storage of"),
        "{stderr}"
    );
    assert!(stderr.contains("ops before it are kept"), "{stderr}");
    let saved = export(&dir.path().join("damaged.pkl"))["op_count"]
        .as_u64()
        .unwrap();
    assert!(saved > 0 && saved < ops, "{saved} of {ops} ops");
    assert!(damaged.exists(), "a damaged journal is kept");
    assert!(
        !journal.exists(),
        "the journal is removed once the file is written"
    );
    // not a journal: exit 2 and says what it expected
    let o = memtrack()
        .args(["record", "--recover"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("NAME.journal-XXXXXXXX"));
}

#[test]
fn an_output_that_cannot_be_written_keeps_the_journal_and_fails() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    // a folder where the file should go: the journal can be made beside it, the file not
    std::fs::create_dir(dir.path().join("out.pkl")).unwrap();
    let (code, stderr) = record(
        dir.path(),
        "out.pkl",
        &[],
        &py,
        &[&example("mlp_batchnorm.py")],
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--recover"), "{stderr}");
    assert!(!stderr.contains("no Python process"), "{stderr}");
    let kept = std::fs::read_dir(dir.path()).unwrap().any(|e| {
        e.unwrap()
            .file_name()
            .to_string_lossy()
            .contains(".journal-")
    });
    assert!(kept, "the journal is kept");
}

#[test]
fn backend_cuda_without_cuda_is_an_error() {
    let Some(py) = python() else { return };
    let has_cuda = std::process::Command::new(&py)
        .args([
            "-c",
            "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)",
        ])
        .status()
        .unwrap()
        .success();
    if has_cuda {
        eprintln!("this machine has CUDA: nothing to check");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (code, stderr) = record(
        dir.path(),
        "cuda.pkl",
        &["--backend", "cuda"],
        &py,
        &[&example("mlp_batchnorm.py")],
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("torch.cuda.is_available() is False"),
        "{stderr}"
    );
    assert!(stderr.contains("--backend cuda"), "{stderr}");
    assert!(!dir.path().join("cuda.pkl").exists());
}
