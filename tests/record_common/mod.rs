//! Shared by the `record_*` tests: the Python to run (with torch), and the memtrack binary.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository root (examples/, tests/py/).
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The interpreter from `MEMTRACK_PYTHON`, else `~/.cache/memtrack/venv/bin/python` if it
/// exists, else `python3`; `None` (after a loud SKIPPED line) when it cannot import torch,
/// unless `CI` is set: then the test fails, since CI installs torch.
pub fn python() -> Option<PathBuf> {
    let py = std::env::var_os("MEMTRACK_PYTHON")
        .map(PathBuf::from)
        .or_else(|| {
            let home = std::env::var_os("HOME")?;
            let p = Path::new(&home).join(".cache/memtrack/venv/bin/python");
            p.exists().then_some(p)
        })
        .unwrap_or_else(|| PathBuf::from("python3"));
    let ok = Command::new(&py)
        .args(["-c", "import torch"])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return Some(py);
    }
    if std::env::var_os("CI").is_some() {
        panic!("{}: cannot import torch, and CI is set", py.display());
    }
    eprintln!(
        "SKIPPED: torch not available ({} cannot import torch; set MEMTRACK_PYTHON)",
        py.display()
    );
    None
}

pub fn memtrack() -> Command {
    Command::new(env!("CARGO_BIN_EXE_memtrack"))
}

/// `memtrack record -o OUT [extra] -- python ARGS…`, run in `dir`; (exit code, stderr).
pub fn record(dir: &Path, out: &str, extra: &[&str], py: &Path, args: &[&str]) -> (i32, String) {
    let o = memtrack()
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
    let o = memtrack().arg("export").arg(file).output().unwrap();
    assert!(
        o.status.success(),
        "export {}: {}",
        file.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

pub fn example(name: &str) -> String {
    root().join("examples").join(name).display().to_string()
}

pub fn script(name: &str) -> String {
    root().join("tests/py").join(name).display().to_string()
}
