//! Inputs that are not regular files: `/dev/stdin` and `<(...)` (pipes), FIFOs, devices and
//! /proc files. Each input is opened once: a pipe reads as the file it carries would, and
//! what is none of memtrack's kinds is named, without hanging or reading it for long.

mod common;

use std::ffi::CString;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use common::{fixture, memtrack, run};

/// `summary --format json` of `path`, with `shown` (the name it gives the file) replaced.
fn summary_json(path: &Path) -> String {
    let (code, out, err) = run(&["summary", path.to_str().unwrap(), "--format", "json"]);
    assert_eq!(code, 0, "{}: {err}", path.display());
    out.replace(&path.display().to_string(), "FILE")
}

fn mkfifo(path: &Path) {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// A FIFO at `dir/name` that a thread fills with `bytes` (then closes) once it is opened.
fn fifo_of(dir: &Path, name: &str, bytes: Vec<u8>) -> (PathBuf, std::thread::JoinHandle<()>) {
    let path = dir.join(name);
    mkfifo(&path);
    let p = path.clone();
    let writer = std::thread::spawn(move || {
        let mut f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        // the reader may stop early (an error it found): a broken pipe is its choice
        let _ = f.write_all(&bytes);
    });
    (path, writer)
}

const INPUTS: &[&str] = &[
    "snapshots/code_location_expandable_oom_device1.pickle",
    "tracker/memory_tracker_cpu_torch2.15.0.pkl",
    "profiler/export_chrome_trace.json",
    "profiler/tb/worker0.pt.trace.json.gz",
];

#[test]
fn a_fifo_reads_as_the_file_it_carries() {
    let dir = tempfile::tempdir().unwrap();
    for rel in INPUTS {
        let file = fixture(rel);
        let want = summary_json(&file);
        let name = file.file_name().unwrap().to_str().unwrap();
        let (fifo, writer) = fifo_of(dir.path(), name, std::fs::read(&file).unwrap());
        assert_eq!(summary_json(&fifo), want, "{rel} through a FIFO");
        writer.join().unwrap();
        std::fs::remove_file(&fifo).unwrap();
    }
}

#[test]
fn stdin_as_a_pipe_reads_as_the_file() {
    for rel in INPUTS {
        let file = fixture(rel);
        let (code, want, err) = run(&["summary", file.to_str().unwrap(), "--format", "json"]);
        assert_eq!(code, 0, "{err}");
        let o = memtrack()
            .args(["summary", "/dev/stdin", "--format", "json"])
            .write_stdin(std::fs::read(&file).unwrap())
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{rel}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let got = String::from_utf8(o.stdout).unwrap();
        assert_eq!(
            got.replace("/dev/stdin", "FILE"),
            want.replace(file.to_str().unwrap(), "FILE"),
            "{rel} on stdin"
        );
    }
}

#[test]
fn devices_and_proc_files_are_named_not_read() {
    let started = std::time::Instant::now();
    for (path, says) in [
        ("/dev/zero", "is a character device"),
        ("/dev/null", "is a character device"),
        ("/proc/self/status", "not a pickle: it looks like text"),
    ] {
        let (code, _, err) = run(&["summary", path]);
        assert_eq!(code, 2, "{path}: {err}");
        assert!(err.contains(path) && err.contains(says), "{path}: {err}");
    }
    assert!(started.elapsed().as_secs() < 20);
    // an empty pipe is an empty file
    let o = memtrack()
        .args(["summary", "/dev/stdin"])
        .write_stdin(Vec::new())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("empty file"));
}

#[test]
fn an_endless_stream_of_nothing_memtrack_reads_is_read_only_so_far() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("zeros");
    mkfifo(&path);
    let p = path.clone();
    // zeros until the reader goes (`<(cat /dev/zero)`)
    let writer = std::thread::spawn(move || {
        let mut f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        let zeros = vec![0u8; 1 << 20];
        let mut written = 0u64;
        while f.write_all(&zeros).is_ok() {
            written += zeros.len() as u64;
        }
        written
    });
    let (code, _, err) = run(&["summary", path.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("runs past 64 MiB"), "{err}");
    let written = writer.join().unwrap();
    assert!(written < 80 << 20, "read {written} bytes");
}

/// A snapshot read through a pipe suggested `memtrack simulate 63` (the descriptor's name
/// under `<(…)`) or `memtrack simulate stdin`: a pipe is read once, so the suggestion says
/// so instead of naming it.
#[test]
fn a_suggestion_to_replay_a_piped_snapshot_says_it_came_through_a_pipe() {
    let file = fixture("snapshots/synthetic_no_stacks.pickle");
    let text = common::stdout(&["summary", file.to_str().unwrap()]);
    assert!(
        text.contains("Try: memtrack simulate synthetic_no_stacks.pickle --set"),
        "{text}"
    );
    let o = memtrack()
        .args(["summary", "/dev/stdin"])
        .write_stdin(std::fs::read(&file).unwrap())
        .output()
        .unwrap();
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(o.status.success());
    assert!(
        text.contains("Try: memtrack simulate SNAPSHOT --set")
            && text.contains("the snapshot came through a pipe, which is read once"),
        "{text}"
    );
    assert!(!text.contains("simulate stdin"), "{text}");
}
