//! The Python package (pyproject.toml, python/memtrack, docs/python.md) as a pip user gets it:
//! build the wheel with maturin (the dev profile, in this target folder: the binary the other
//! tests built is reused), install it into a fresh venv that sees the test Python's torch,
//! run `memtrack --version` from that venv's bin/ and the in-process API on the MLP example
//! (tests/py/inprocess_api.py). The file it writes loads in PyTorch's `MemoryTracker.load`,
//! `memtrack summary` reads it, and its ops are those `memtrack record` records of the same
//! steps.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

/// The most a release wheel may weigh, in MB: it measures 5.3 MB (a 12 MB binary, stripped,
/// no debug info); the limit leaves room for growth, not for debug info (the binary with it
/// was 65 MB).
const WHEEL_MB_LIMIT: f64 = 12.0;

fn ok(cmd: &mut Command, what: &str) -> String {
    let o = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        o.status.success(),
        "{what}: exit {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A `maturin` to build with: on PATH, or in the test Python's environment (installed there
/// from PyPI when missing, once).
fn maturin(py: &Path) -> PathBuf {
    let works = |m: &Path| {
        Command::new(m)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let beside = py.with_file_name("maturin");
    if works(&beside) {
        return beside;
    }
    if works(Path::new("maturin")) {
        return "maturin".into();
    }
    eprintln!("python_package: installing maturin into {}", py.display());
    ok(
        Command::new(py).args(["-m", "pip", "install", "-q", "maturin>=1.5,<2"]),
        "pip install maturin",
    );
    assert!(
        works(&beside),
        "maturin not in {} after pip install",
        beside.display()
    );
    beside
}

/// The op names without their occurrence counters (`…addmm.default_3` → `…addmm.default`):
/// the counters of a recording that starts mid-program begin at 0.
fn kinds(j: &serde_json::Value) -> Vec<String> {
    op_names(j)
        .iter()
        .map(|n| n.rsplit_once('_').map_or(*n, |(k, _)| k).to_string())
        .collect()
}

#[test]
fn wheel_installs_the_command_and_the_in_process_api_records() {
    let Some(py) = python_with_torch() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let root = root();

    // the wheel: maturin runs cargo on this checkout, in the profile these tests were built
    // in (`cargo test`: dev; `cargo test --release`: release, the one `pip install .` builds),
    // in this target folder, so the binary the other tests built is reused
    let profile = match Path::new(env!("CARGO_BIN_EXE_memtrack"))
        .parent()
        .and_then(Path::file_name)
        .and_then(|n| n.to_str())
    {
        Some("debug") => "dev".to_string(),
        Some(dir) => dir.to_string(),
        None => "dev".to_string(),
    };
    let wheels = dir.path().join("wheels");
    let started = std::time::Instant::now();
    ok(
        Command::new(maturin(&py))
            .current_dir(&root)
            .args(["build", "--profile", &profile, "--quiet", "-o"])
            .arg(&wheels),
        "maturin build",
    );
    let wheel = std::fs::read_dir(&wheels)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .expect("maturin wrote a wheel");
    let wheel_mb = std::fs::metadata(&wheel).unwrap().len() as f64 / 1e6;
    eprintln!(
        "python_package: {profile} wheel built in {:.1?}: {wheel_mb:.1} MB",
        started.elapsed()
    );
    // the distribution wheel carries a stripped binary without debug info (Cargo.toml's
    // release profile)
    if profile == "release" {
        assert!(
            wheel_mb < WHEEL_MB_LIMIT,
            "the release wheel is {wheel_mb:.1} MB, over {WHEEL_MB_LIMIT} MB: debug info or symbols back in Cargo.toml's release profile?"
        );
    } else {
        eprintln!(
            "python_package: a {profile} wheel keeps debug info; its size is checked under `cargo test --release`"
        );
    }

    // a fresh venv; torch comes from the test Python's site-packages through a .pth (a venv
    // of its own with torch in it would download 1 GB)
    let venv = dir.path().join("venv");
    ok(
        Command::new(&py)
            .args(["-m", "venv", "--without-pip"])
            .arg(&venv),
        "python -m venv",
    );
    let vpy = venv.join("bin/python");
    let site = |p: &Path| {
        ok(
            Command::new(p).args([
                "-c",
                "import sysconfig; print(sysconfig.get_path('purelib'))",
            ]),
            "site-packages",
        )
        .trim()
        .to_string()
    };
    std::fs::write(
        Path::new(&site(&vpy)).join("torch_from_test_python.pth"),
        site(&py) + "\n",
    )
    .unwrap();
    ok(
        Command::new(&py)
            .args(["-m", "pip", "--python"])
            .arg(&vpy)
            .args(["install", "-q", "--no-deps", "--no-index"])
            .arg(&wheel),
        "pip install the wheel",
    );
    // the compiled observer's source comes with the agent: native.py builds it from there
    let agent = Path::new(&site(&vpy)).join("memtrack/_memtrack_agent");
    for file in ["observer.cpp", "fast_path.h", "module_path.h", "native.py"] {
        assert!(agent.join(file).is_file(), "the wheel has no {file}");
    }

    let bin = venv.join("bin/memtrack");
    let version = ok(Command::new(&bin).arg("--version"), "memtrack --version");
    assert_eq!(
        version.trim(),
        format!("memtrack {}", env!("CARGO_PKG_VERSION"))
    );

    // the in-process API, from the venv (PATH without another memtrack: the package must
    // find the one pip put beside it)
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let facts: serde_json::Value = serde_json::from_str(&ok(
        Command::new(&vpy)
            .env_remove("MEMTRACK_BINARY")
            .env("PATH", "/usr/bin:/bin")
            .arg(root.join("tests/py/inprocess_api.py"))
            .arg(&out)
            .arg(root.join("examples")),
        "inprocess_api.py",
    ))
    .unwrap();
    eprintln!("{facts:#}");
    assert_eq!(
        Path::new(facts["package"].as_str().unwrap()),
        Path::new(&site(&vpy)).join("memtrack")
    );
    assert_eq!(Path::new(facts["binary"].as_str().unwrap()), bin);
    assert_eq!(facts["ok"], true, "{facts}");
    assert_eq!(facts["record_warnings"], serde_json::json!([]));
    assert_eq!(facts["journal_left"], serde_json::json!([]));
    // the default observer on the CPU is the compiled one: no dispatch mode in the block;
    // `observer="python"` puts the agent's mode on the stack in its block only
    assert_eq!(facts["modes_inside"], 0);
    assert_eq!(facts["modes_after"], 0);
    assert_eq!(facts["python_ok"], true, "{facts}");
    assert_eq!(facts["python_modes_inside"], 1);
    assert_eq!(facts["python_modes_after"], 0);
    // the methods it wrapped and the warning filters are the program's again
    assert_eq!(facts["patched_inside"], true);
    assert_eq!(facts["restored"], true);
    assert_eq!(facts["global_hooks_after"], 0);
    assert_eq!(facts["param_hooks_after"], 0);
    assert!(facts["loss_after"].as_f64().unwrap().is_finite());
    // a block that raised: the program's exception reached it, the file was written
    assert_eq!(facts["raised"], "\"the program's own\"");
    assert_eq!(facts["raised_ok"], true);
    assert_eq!(facts["html_has_svg"], true);
    assert_eq!(facts["html_has_table"], true);
    if facts["cuda"] == false {
        assert_eq!(facts["capture_ok"], false);
        assert_eq!(facts["oom_armed"], false);
        let warned = facts["snapshot_warnings"].as_array().unwrap();
        assert_eq!(warned.len(), 2, "{warned:?}");
        for w in warned {
            assert_eq!(w[0], "MemtrackWarning");
            assert!(w[1].as_str().unwrap().contains("no CUDA device"), "{w}");
        }
    }

    // the file: PyTorch's MemoryTracker loads it, memtrack reads it
    let file = out.join("inproc.pkl");
    let loaded = ok(
        Command::new(&vpy)
            .arg(root.join("tests/py/check_memory_tracker.py"))
            .arg(&file),
        "MemoryTracker.load",
    );
    let inproc = export(&file);
    assert_eq!(inproc["memtrack"]["observer"], "compiled");
    assert_eq!(
        export(&out.join("python_observer.pkl"))["memtrack"]["observer"],
        "python"
    );
    assert_eq!(
        loaded.lines().last().unwrap_or(""),
        format!("OK {} ops", inproc["op_count"]),
        "MemoryTracker and memtrack count the same ops"
    );
    let summary = ok(Command::new(&bin).arg("summary").arg(&file), "summary");
    assert!(summary.contains("optimizer step"), "{summary}");
    assert_eq!(
        inproc["memtrack"]["modules"].as_array().map(Vec::len),
        Some(3),
        "three iterations"
    );

    // the same agent: `memtrack record` of the same three steps records the same ops after
    // the example's set-up (the in-process block starts after it)
    let (code, _) = record(
        dir.path(),
        "rec.pkl",
        &[],
        &py,
        &[
            &example("mlp_batchnorm.py"),
            "--steps",
            "3",
            "--width",
            "64",
            "--blocks",
            "2",
            "--batch",
            "16",
        ],
    );
    assert_eq!(code, 0);
    let whole = kinds(&export(&dir.path().join("rec.pkl")));
    let block = kinds(&inproc);
    assert!(block.len() > 100 && whole.len() > block.len());
    assert_eq!(whole[whole.len() - block.len()..], block[..]);
}
