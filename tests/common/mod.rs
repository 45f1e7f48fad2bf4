//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod viewer;

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn memtrack() -> assert_cmd::Command {
    assert_cmd::Command::cargo_bin("memtrack").expect("the memtrack binary is built for tests")
}

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn fixture(rel: &str) -> PathBuf {
    root().join("fixtures").join(rel)
}

/// `memtrack ARGS`: exit code, stdout, stderr.
pub fn run(args: &[&str]) -> (i32, String, String) {
    let o = memtrack().args(args).output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// What `memtrack ARGS` prints, asserting it succeeded.
pub fn stdout(args: &[&str]) -> String {
    let out = memtrack().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "memtrack {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `memtrack ARGS` parsed as JSON (ARGS include `--format json` where the command needs it).
pub fn json_out(args: &[&str]) -> serde_json::Value {
    serde_json::from_str(&stdout(args)).unwrap()
}

/// Compare `actual` with the golden file `tests/golden/<rel>`. After an intended change of
/// output, `UPDATE_GOLDEN=1 cargo test` rewrites them: review the diff before committing.
pub fn golden(rel: &str, actual: &str) {
    let path = root().join("tests/golden").join(rel);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (UPDATE_GOLDEN=1 cargo test creates it)",
            path.display()
        )
    });
    if expected != actual {
        let first = expected
            .lines()
            .zip(actual.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(expected.lines().count().min(actual.lines().count()));
        panic!(
            "output differs from {} at line {} (UPDATE_GOLDEN=1 rewrites it):\n expected: {:?}\n   actual: {:?}",
            path.display(),
            first + 1,
            expected.lines().nth(first),
            actual.lines().nth(first)
        );
    }
}

/// The Python to run PyTorch with: `MEMTRACK_PYTHON`, else the venv `.ci/run` makes, else
/// `python3`. None when it cannot import torch: the test is skipped, loudly, except under CI
/// (`CI` set), where a missing torch is a failure.
pub fn python_with_torch() -> Option<PathBuf> {
    let candidates: Vec<PathBuf> = match std::env::var_os("MEMTRACK_PYTHON") {
        Some(p) => vec![PathBuf::from(p)],
        None => {
            let home = std::env::var_os("HOME")
                .map(PathBuf::from)
                .unwrap_or_default();
            vec![
                home.join(".cache/memtrack/venv/bin/python"),
                PathBuf::from("python3"),
            ]
        }
    };
    for py in &candidates {
        let ok = Command::new(py)
            .args(["-c", "import torch"])
            .output()
            .is_ok_and(|o| o.status.success());
        if ok {
            return Some(py.clone());
        }
    }
    if std::env::var_os("CI").is_some() {
        panic!("torch is not importable from {candidates:?} and CI is set: tests that need torch must run in CI");
    }
    eprintln!("\n*** SKIPPED: torch not available (tried {candidates:?}); set MEMTRACK_PYTHON or run .ci/run ***\n");
    None
}

pub fn write_temp(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

/// `python_with_torch`, for the record tests.
pub fn python() -> Option<PathBuf> {
    python_with_torch()
}

/// The binary as a plain process (for tests that spawn it and send it signals).
pub fn memtrack_process() -> Command {
    Command::new(env!("CARGO_BIN_EXE_memtrack"))
}

/// `memtrack record -o OUT [extra] -- python ARGS…`, run in `dir`; (exit code, stderr).
pub fn record(dir: &Path, out: &str, extra: &[&str], py: &Path, args: &[&str]) -> (i32, String) {
    let o = memtrack_process()
        .current_dir(dir)
        .arg("record")
        .args(["-o", out])
        .args(extra)
        .arg("--")
        .arg(py)
        .args(args)
        .output()
        .expect("memtrack runs");
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    eprintln!("{stderr}");
    (exit_code(o.status), stderr)
}

pub fn exit_code(st: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0))
}

/// `memtrack export FILE` as JSON.
pub fn export(file: &Path) -> serde_json::Value {
    let o = memtrack_process().arg("export").arg(file).output().unwrap();
    assert!(
        o.status.success(),
        "export {}: {}",
        file.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

/// The op names of an exported stats file, in order.
pub fn op_names(j: &serde_json::Value) -> Vec<&str> {
    j["ops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["name"].as_str().unwrap())
        .collect()
}

pub fn example(name: &str) -> String {
    root().join("examples").join(name).display().to_string()
}

pub fn script(name: &str) -> String {
    root().join("tests/py").join(name).display().to_string()
}

/// `tests/py/SCRIPT ARGS` run by the Python with torch (an independent reading of a fixture):
/// its stdout as JSON.
pub fn python_json<S: AsRef<std::ffi::OsStr>>(script: &str, args: &[S]) -> serde_json::Value {
    let py = python_with_torch().expect("python to replay the fixture");
    let out = Command::new(py)
        .arg(root().join("tests/py").join(script))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A Chromium-family browser for the HTML tests: `MEMTRACK_BROWSER`, else the usual names on
/// PATH. Without one the test `what` is skipped with a loud message, except in CI, where it
/// fails (scripts/test.sh installs chromium there).
pub fn browser_or_skip(what: &str) -> Option<PathBuf> {
    let found = std::env::var_os("MEMTRACK_BROWSER")
        .map(PathBuf::from)
        .or_else(|| {
            ["chromium", "chromium-browser", "google-chrome", "chrome"]
                .iter()
                .find_map(|name| {
                    let out = Command::new("sh")
                        .args(["-c", &format!("command -v {name}")])
                        .output()
                        .ok()?;
                    out.status
                        .success()
                        .then(|| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
                })
        });
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI needs a headless browser for {what}: scripts/test.sh installs chromium"
        );
        eprintln!(
            "\n*** SKIPPED {what}: no chromium on PATH (apt-get install chromium, or set \
             MEMTRACK_BROWSER) ***\n"
        );
    }
    found
}

/// `browser` run headless on `url` (a fresh profile in `profile`, a 1300x1100 window,
/// `budget_ms` of virtual time for the page's scripts, its console on stderr), with `extra`
/// (`--dump-dom`, `--screenshot=…`).
pub fn headless(
    browser: &Path,
    profile: &Path,
    budget_ms: u32,
    extra: &str,
    url: &str,
) -> std::process::Output {
    Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--window-size=1300,1100",
            &format!("--virtual-time-budget={budget_ms}"),
            "--enable-logging=stderr",
            "--v=0",
            &format!("--user-data-dir={}", profile.display()),
            extra,
            url,
        ])
        .output()
        .expect("the browser runs")
}
