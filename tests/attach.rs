//! `memtrack attach PID` on real torch: a window of a running training loop recorded, the
//! loop left as it was; and each refusal a clear message, exit 2, the process untouched.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{exit_code, export, memtrack_process as memtrack, python, script};

/// The loop started, and its ready file seen (within 60 s).
fn start_loop(py: &Path, dir: &Path, steps: u32, code: i32) -> (Child, PathBuf) {
    start_loop_sleeping_in_backward(py, dir, steps, code, 0.0)
}

/// The same, with a hook inside each backward pass that sleeps `hook_sleep` seconds.
fn start_loop_sleeping_in_backward(
    py: &Path,
    dir: &Path,
    steps: u32,
    code: i32,
    hook_sleep: f64,
) -> (Child, PathBuf) {
    let ready = dir.join("ready");
    let facts = dir.join("facts.json");
    let child = Command::new(py)
        .arg(script("attach_loop.py"))
        .args([steps.to_string(), "0.01".into()])
        .arg(&ready)
        .arg(&facts)
        .arg(code.to_string())
        .arg(hook_sleep.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(&[ready], "the loop never got ready");
    (child, facts)
}

/// A Python that imports torch, runs `prelude`, says it is ready, sleeps 3 s in short steps
/// (bytecodes between them) and prints `ok`; started, and seen ready.
fn start_sleeper(py: &Path, dir: &Path, prelude: &str) -> Child {
    let ready = dir.join("sleeper-ready");
    let child = Command::new(py)
        .arg("-c")
        .arg(format!(
            "import sys, time, torch\n{prelude}\nopen(sys.argv[1], 'w').close()\n\
             for _ in range(60): time.sleep(0.05)\nprint('ok')"
        ))
        .arg(&ready)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(&[ready], "the program never got ready");
    child
}

/// Whether the tests run as root (setpriv's changes need it); if not, says what is skipped.
fn root_or_skip(what: &str) -> bool {
    // SAFETY: geteuid has no preconditions
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        eprintln!("SKIPPED: the tests do not run as root, setpriv cannot {what}");
    }
    root
}

/// `memtrack attach PID --duration 1s` in `dir`, run through `setpriv SETPRIV… --`:
/// (exit code, stderr).
fn attach_through_setpriv(setpriv: &[&str], dir: &Path, pid: u32) -> (i32, String) {
    let o = Command::new("setpriv")
        .args(setpriv)
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_memtrack"))
        .current_dir(dir)
        .args(["attach", &pid.to_string(), "--duration", "1s"])
        .output()
        .unwrap();
    (
        exit_code(o.status),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Until every one of `files` exists (120 s at most: then `what` fails the test).
fn wait_for(files: &[PathBuf], what: &str) {
    let start = Instant::now();
    while !files.iter().all(|f| f.exists()) {
        assert!(start.elapsed() < Duration::from_secs(120), "{what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn attach(dir: &Path, pid: u32, extra: &[&str]) -> (i32, String) {
    let o = memtrack()
        .current_dir(dir)
        .args(["attach", &pid.to_string(), "-o", "att.pkl"])
        .args(extra)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    eprintln!("{stderr}");
    (exit_code(o.status), stderr)
}

#[test]
fn a_window_is_recorded_and_the_loop_goes_on_as_without_memtrack() {
    let Some(py) = python() else { return };
    let alone = tempfile::tempdir().unwrap();
    let (c, _) = start_loop(&py, alone.path(), 250, 0);
    let plain = c.wait_with_output().unwrap();

    let dir = tempfile::tempdir().unwrap();
    let (c, facts) = start_loop(&py, dir.path(), 250, 0);
    let (code, stderr) = attach(dir.path(), c.id(), &["--duration", "1s"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("detached from process"), "{stderr}");
    let out = c.wait_with_output().unwrap();
    assert_eq!(out.status.code(), plain.status.code());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&plain.stdout)
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let f: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(facts).unwrap()).unwrap();
    assert_eq!(f["before"], f["after"], "what the attach left behind");

    let j = export(&dir.path().join("att.pkl"));
    let m = &j["memtrack"];
    assert_eq!(m["exit"]["ended"], "detached");
    assert!(m["attached"]["held"]["parameters"].as_i64().unwrap() > 0);
    let names: Vec<&str> = j["ops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["name"].as_str().unwrap())
        .collect();
    assert!(names.len() > 50, "{} ops", names.len());
    assert!(
        names.iter().any(|n| n.starts_with("Net.encoder")),
        "{names:?}"
    );
    assert!(
        names.iter().any(|n| n.contains("backward")),
        "module phases"
    );
    assert!(m["iteration_starts"].as_array().unwrap().len() >= 2);
    let s = memtrack()
        .arg("summary")
        .arg(dir.path().join("att.pkl"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&s.stdout);
    assert!(s.status.success(), "{}", String::from_utf8_lossy(&s.stderr));
    assert!(text.contains("attached to the running process"), "{text}");
    assert!(text.contains("partial"), "{text}");
    // what was held at the attach is counted before the first op: in no op's line of the top
    // ops (the first op that touched a weight, or Adam's state in place, was credited with it)
    let held: i64 = (m["attached"]["held"].as_object().unwrap().values())
        .map(|v| v.as_i64().unwrap())
        .sum();
    let first = j["ops"][0]["allocated_bytes"].as_f64().unwrap() as i64;
    assert!(held > 0 && first >= held, "{first} < {held}");
    assert!(
        text.contains("Held at the attach, counted before the first op and so in no op's line"),
        "{text}"
    );
    // the attach's own thread (which waits for the detach) is not one of the program's
    let threads = m["threads"].as_array().map_or(&[][..], |t| t.as_slice());
    assert!(
        threads.iter().all(|t| t["name"] != "memtrack-attach"),
        "{threads:?}"
    );
    assert!(!text.contains("memtrack-attach"), "{text}");
}

#[test]
fn refusals_say_why_and_leave_the_process_as_it_was() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    // no such process
    let (code, err) = attach(dir.path(), 4_000_000, &["--duration", "1s"]);
    assert_eq!(code, 2);
    assert!(err.contains("no process 4000000"), "{err}");
    // not Python
    let mut sleep = Command::new("sleep").arg("30").spawn().unwrap();
    let (code, err) = attach(dir.path(), sleep.id(), &["--duration", "1s"]);
    assert_eq!(code, 2);
    assert!(err.contains("is not a Python process"), "{err}");
    sleep.kill().unwrap();
    sleep.wait().unwrap();
    // Python without torch: never touched, it ends by itself with its own code
    let mut bare = Command::new(&py)
        .args([
            "-c",
            "import time\nfor _ in range(40): time.sleep(0.05)\nprint('ok')",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let (code, err) = attach(dir.path(), bare.id(), &["--duration", "1s"]);
    assert_eq!(code, 2);
    assert!(err.contains("Python without torch"), "{err}");
    assert!(bare.wait().unwrap().success());
    // a torch outside the supported range (no such torch runs on this Python: the real one
    // is imported and says it is 2.99, as a torch newer than any tried would)
    let newer = start_sleeper(&py, dir.path(), "torch.__version__ = '2.99.0'");
    let (code, err) = attach(dir.path(), newer.id(), &["--duration", "1s"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("torch 2.99.0 is not supported") && err.contains("MEMTRACK_ANY_TORCH"),
        "{err}"
    );
    let out = newer.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok\n");
    assert!(!dir.path().join("att.pkl").exists());
    // an output folder whose name is not UTF-8: the process is told its paths in JSON (this
    // panicked)
    use std::os::unix::ffi::OsStrExt;
    let folder = dir.path().join(std::ffi::OsStr::from_bytes(b"d\xff"));
    std::fs::create_dir(&folder).unwrap();
    let sleeper = start_sleeper(&py, &folder, "");
    let o = memtrack()
        .current_dir(dir.path())
        .args([
            "attach",
            &sleeper.id().to_string(),
            "--duration",
            "1s",
            "-o",
        ])
        .arg(folder.join("att.pkl"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(exit_code(o.status), 2, "{err}");
    assert!(
        err.contains("is not UTF-8") && !err.contains("panicked"),
        "{err}"
    );
    let out = sleeper.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok\n");
    let left: Vec<_> = std::fs::read_dir(&folder)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != "sleeper-ready")
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn a_second_attach_at_once_is_refused_and_the_first_goes_on() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (c, facts) = start_loop(&py, dir.path(), 400, 0);
    let first = memtrack()
        .current_dir(dir.path())
        .args([
            "attach",
            &c.id().to_string(),
            "-o",
            "first.pkl",
            "--duration",
            "2s",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    let (code, err) = attach(dir.path(), c.id(), &["--duration", "1s"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("another `memtrack attach`"), "{err}");
    let o = first.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = c.wait_with_output().unwrap();
    assert!(out.status.success());
    let f: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(facts).unwrap()).unwrap();
    assert_eq!(f["before"], f["after"]);
}

#[test]
fn a_process_that_ends_in_the_window_keeps_what_was_recorded() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (c, _) = start_loop(&py, dir.path(), 80, 3);
    let (code, err) = attach(dir.path(), c.id(), &["--duration", "60s"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("ended"), "{err}");
    let out = c.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(3), "the program's own exit code");
    let j = export(&dir.path().join("att.pkl"));
    assert_eq!(j["memtrack"]["exit"]["ended"], "exit");
    assert!(j["op_count"].as_u64().unwrap() > 10);
}

#[test]
fn ctrl_c_ends_the_window_and_detaches() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (c, facts) = start_loop(&py, dir.path(), 300, 0);
    let m = memtrack()
        .current_dir(dir.path())
        .args(["attach", &c.id().to_string(), "-o", "att.pkl"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    // SAFETY: a signal to the memtrack this test started
    unsafe { libc::kill(m.id() as i32, libc::SIGINT) };
    let o = m.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("interrupted") && err.contains("detached"),
        "{err}"
    );
    assert!(c.wait_with_output().unwrap().status.success());
    let f: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(facts).unwrap()).unwrap();
    assert_eq!(f["before"], f["after"]);
    assert_eq!(
        export(&dir.path().join("att.pkl"))["memtrack"]["exit"]["ended"],
        "detached"
    );
}

#[test]
fn an_attach_and_a_detach_inside_backward_wait_for_its_end() {
    // autograd puts the thread's dispatch stack back as it was when backward began: a mode
    // pushed inside it would be gone after, and one taken off would be back
    let Some(py) = python() else { return };
    for observer in ["python", "compiled"] {
        let dir = tempfile::tempdir().unwrap();
        let (c, facts) = start_loop_sleeping_in_backward(&py, dir.path(), 60, 0, 0.05);
        let (code, err) = attach(
            dir.path(),
            c.id(),
            &["--duration", "1s", "--observer", observer],
        );
        assert_eq!(code, 0, "{observer}: {err}");
        assert!(c.wait_with_output().unwrap().status.success());
        let f: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(facts).unwrap()).unwrap();
        assert_eq!(
            f["before"], f["after"],
            "{observer}: what the attach left behind"
        );
        let j = export(&dir.path().join("att.pkl"));
        assert_eq!(j["memtrack"]["exit"]["ended"], "detached");
        let ops = j["op_count"].as_u64().unwrap();
        assert!(
            ops > 200,
            "{observer}: {ops} ops, the recording was lost at the end of a backward pass"
        );
    }
}

#[test]
fn a_torchrun_launchers_pid_records_each_rank_in_its_own_file() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("ready");
    let facts = dir.path().join("facts.json");
    let launcher = Command::new(&py)
        .args(["-m", "torch.distributed.run", "--standalone"])
        .args(["--nproc-per-node", "2"])
        .arg(script("attach_loop.py"))
        .args(["300", "0.01"])
        .arg(&ready)
        .arg(&facts)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rank_file = |p: &Path, r: u32| PathBuf::from(format!("{}.rank{r}", p.display()));
    wait_for(
        &[rank_file(&ready, 0), rank_file(&ready, 1)],
        "the ranks never got ready",
    );
    let (code, err) = attach(dir.path(), launcher.id(), &["--duration", "1s"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("is a torchrun launcher"), "{err}");
    let out = launcher.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for r in 0..2 {
        let f: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(rank_file(&facts, r)).unwrap()).unwrap();
        assert_eq!(
            f["before"], f["after"],
            "rank {r}: what the attach left behind"
        );
        let j = export(&dir.path().join(format!("att.rank{r}.pkl")));
        assert_eq!(j["memtrack"]["exit"]["ended"], "detached", "rank {r}");
        assert_eq!(j["memtrack"]["rank"], r, "rank {r}");
        assert!(j["op_count"].as_u64().unwrap() > 50, "rank {r}");
    }
    assert!(
        !dir.path().join("att.pkl").exists(),
        "no file for the launcher"
    );
}

#[test]
fn another_users_process_is_refused_with_how_to_attach() {
    let Some(py) = python() else { return };
    if !root_or_skip("become nobody") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (c, _) = start_loop(&py, dir.path(), 150, 0);
    let setpriv = ["--reuid=65534", "--regid=65534", "--clear-groups"];
    let (code, err) = attach_through_setpriv(&setpriv, dir.path(), c.id());
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("belongs to root") && err.contains("sudo -u root"),
        "{err}"
    );
    assert!(c.wait_with_output().unwrap().status.success());
}

#[test]
fn an_undumpable_process_without_cap_sys_ptrace_says_how_to_grant_it() {
    let Some(py) = python() else { return };
    if !root_or_skip("drop a capability") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // a program that made itself undumpable (PR_SET_DUMPABLE 0, as some launchers and
    // setuid helpers do): only a tracer with CAP_SYS_PTRACE may look inside it
    let target = start_sleeper(
        &py,
        dir.path(),
        "import ctypes\nctypes.CDLL(None).prctl(4, 0, 0, 0, 0)",
    );
    // memtrack as a container without CAP_SYS_PTRACE runs it
    let (code, err) =
        attach_through_setpriv(&["--bounding-set=-sys_ptrace"], dir.path(), target.id());
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("lacks CAP_SYS_PTRACE") && err.contains("--cap-add=SYS_PTRACE"),
        "{err}"
    );
    let out = target.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok\n");
    assert!(!dir.path().join("memtrack.pkl").exists());
}

#[test]
fn the_cuda_snapshot_options_on_a_cpu_process_say_there_is_no_allocator() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let child = start_sleeper(&py, dir.path(), "");
    let pid = child.id();
    let (code, stderr) = attach(dir.path(), pid, &["--dump"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "process {pid} cannot be dumped: no allocator to dump: this process has not initialised CUDA"
        )) && stderr.contains("runs on as it was"),
        "{stderr}"
    );
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok\n");
    let written: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("att"))
        .collect();
    assert!(written.is_empty(), "{written:?}");

    let (code, stderr) = attach(dir.path(), pid, &["--dump", "--duration", "1s"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--duration"), "{stderr}");

    let (c, _) = start_loop(&py, dir.path(), 250, 0);
    let pid = c.id();
    let (code, stderr) = attach(dir.path(), pid, &["--snapshot", "--duration", "500ms"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "--snapshot: process {pid} records on the cpu backend: no allocator snapshot"
        )),
        "{stderr}"
    );
    assert!(c.wait_with_output().unwrap().status.success());
    let j = export(&dir.path().join("att.pkl"));
    assert!(j["ops"].as_array().unwrap().len() > 10);
}

/// A call that lands inside the program's `import torch` (torch partly made: "no torch" or
/// an AttributeError of a partially initialized module before) waits for the import to end,
/// within --start-timeout, and records from there.
#[test]
fn an_attach_inside_import_torch_starts_once_the_import_is_done() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("ready");
    let child = Command::new(&py)
        .arg(script("attach_during_import.py"))
        .arg(&ready)
        .arg("6")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(std::slice::from_ref(&ready), "the import never began");
    // (the first steps after the import are slow: a window of 3 s holds later ones)
    let (code, err) = attach(dir.path(), child.id(), &["--duration", "3s"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("torch is being imported; attach goes on when it is done")
            && err.contains("recording process"),
        "{err}"
    );
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok\n");
    let j = export(&dir.path().join("att.pkl"));
    let ops = j["ops"].as_array().unwrap();
    assert!(ops.len() > 20, "{} ops", ops.len());
    assert!(ops
        .iter()
        .any(|o| o["name"].as_str().unwrap().contains("backward")));
}

/// A stopped process runs no Python code to start the recording: said at once (before, the
/// start timed out as if busy), the process left as it was. A `--duration` past any wait
/// (1e99) is said to be one, not "expected a time above zero".
#[test]
fn a_stopped_process_and_a_duration_past_any_wait_are_refused_plainly() {
    let o = memtrack()
        .args(["attach", "1", "--duration", "1e99"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(exit_code(o.status), 2, "{err}");
    assert!(
        err.contains("\"1e99\": longer than memtrack can wait"),
        "{err}"
    );
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let sleeper = start_sleeper(&py, dir.path(), "");
    let pid = sleeper.id().to_string();
    let signal = |sig: &str| {
        assert!(Command::new("kill")
            .args([sig, &pid])
            .status()
            .unwrap()
            .success());
    };
    signal("-STOP");
    // (the kernel stops it at its next return to user space)
    let state = || std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let since = Instant::now();
    while !state()
        .rsplit_once(')')
        .unwrap()
        .1
        .trim_start()
        .starts_with('T')
    {
        assert!(since.elapsed() < Duration::from_secs(10), "never stopped");
        std::thread::sleep(Duration::from_millis(5));
    }
    let (code, err) = attach(dir.path(), sleeper.id(), &["--duration", "1s"]);
    signal("-CONT");
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!("process {pid} (python")) && err.contains("is stopped"),
        "{err}"
    );
    assert!(err.contains(&format!("kill -CONT {pid}")), "{err}");
    let out = sleeper.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok\n");
}

/// The private folder of an attach that was killed (SIGKILL: no chance to remove it) stayed
/// in TMPDIR for good; the next attach of the same user removes it.
#[test]
fn the_folder_a_killed_attach_left_goes_at_the_next_attach() {
    use std::io::BufRead;
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let folders = || -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&tmp)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("memtrack-attach-"))
            .collect();
        names.sort();
        names
    };
    let (c, _) = start_loop(&py, dir.path(), 600, 0);
    let mut first = memtrack()
        .current_dir(dir.path())
        .env("TMPDIR", &tmp)
        .args(["attach", &c.id().to_string(), "-o", "first.pkl"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = std::io::BufReader::new(first.stderr.take().unwrap()).lines();
    let (said, heard) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            let _ = said.send(line);
        }
    });
    loop {
        let line = heard
            .recv_timeout(Duration::from_secs(60))
            .expect("the first attach never started recording");
        if line.contains("recording process") {
            break;
        }
    }
    let left = folders();
    assert_eq!(left.len(), 1, "{left:?}");
    first.kill().unwrap();
    first.wait().unwrap();
    assert_eq!(folders(), left, "SIGKILL leaves the folder");
    let o = memtrack()
        .current_dir(dir.path())
        .env("TMPDIR", &tmp)
        .args(["attach", &c.id().to_string(), "-o", "second.pkl"])
        .args(["--duration", "1s"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(exit_code(o.status), 0, "{err}");
    assert_eq!(folders(), Vec::<String>::new(), "{err}");
    assert!(c.wait_with_output().unwrap().status.success());
}
