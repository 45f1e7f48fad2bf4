//! What `memtrack record` adds to a program's stacks (its agent's functions and the op calls
//! they make) is left out wherever memtrack shows or groups stacks: a profiler trace taken
//! inside a recorded program reads as the same program's trace taken alone, and an H100
//! snapshot taken by `record --snapshot` shows none of the agent's frames.

mod common;

use std::path::Path;

use common::{fixture, python, record, script, stdout};

/// `text` without the addresses Python prints in built-ins' names (`at 0x7f…`).
fn without_addresses(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("0x") {
        out.push_str(&rest[..i]);
        rest = rest[i + 2..].trim_start_matches(|c: char| c.is_ascii_hexdigit());
        out.push_str("0x…");
    }
    out.push_str(rest);
    out
}

/// The Python stack at the peak and the functions `top` lists, in the trace at `path`.
fn python_view(path: &Path) -> (String, Vec<String>) {
    let file = path.to_str().unwrap();
    let summary = stdout(&["summary", file]);
    let stack = (summary.lines())
        .find(|l| l.trim_start().starts_with("Python:"))
        .unwrap_or_else(|| panic!("no Python stack at the peak:\n{summary}"))
        .to_string();
    let top = stdout(&["top", file]);
    let functions = (top.lines())
        .skip_while(|l| !l.starts_with("By Python function"))
        .skip(3)
        .take_while(|l| !l.trim().is_empty())
        .map(|l| without_addresses(l.split("  ").next().unwrap().trim()))
        .collect();
    (without_addresses(&stack), functions)
}

#[test]
fn a_profiler_trace_taken_under_record_reads_as_the_program_alone() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let alone = dir.path().join("alone.json");
    let o = std::process::Command::new(&py)
        .current_dir(dir.path())
        .arg(script("profiled_mlp.py"))
        .arg(&alone)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let recorded = dir.path().join("recorded.json");
    let (code, err) = record(
        dir.path(),
        "run.pkl",
        &["--observer", "python"],
        &py,
        &[&script("profiled_mlp.py"), recorded.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{err}");
    // the agent's frames are in the file itself
    let raw = std::fs::read_to_string(&recorded).unwrap();
    assert!(
        raw.contains("_memtrack_agent"),
        "the trace has no agent frame"
    );

    let (stack_alone, functions_alone) = python_view(&alone);
    let (stack_recorded, functions_recorded) = python_view(&recorded);
    assert!(!stack_recorded.contains("memtrack"), "{stack_recorded}");
    assert!(
        functions_recorded.iter().all(|f| !f.contains("memtrack")),
        "{functions_recorded:?}"
    );
    // the script's path differs (the test's temporary folder is the same for both)
    assert_eq!(stack_recorded, stack_alone);
    let mut a = functions_alone.clone();
    let mut r = functions_recorded.clone();
    a.sort();
    r.sort();
    assert_eq!(r, a);
}

#[test]
fn a_snapshot_taken_under_record_shows_none_of_the_agents_frames() {
    // `record --backend cuda --snapshot` on an H100 (fixtures/snapshots/README.md): every
    // allocation of the program was made inside the agent's __torch_dispatch__
    let snap = fixture("snapshots/h100_gpt2_train_exit.pickle");
    let raw = std::fs::read(&snap).unwrap();
    assert!(
        raw.windows(15).any(|w| w == b"_memtrack_agent"),
        "the capture holds the agent's frames"
    );
    let folded = stdout(&["top", snap.to_str().unwrap(), "--folded"]);
    assert!(folded.lines().count() > 5, "{folded}");
    for line in folded.lines() {
        let frames: Vec<&str> = line.rsplit_once(' ').unwrap().0.split(';').collect();
        for f in &frames {
            assert!(!f.contains("_memtrack_agent"), "{f} in {line}");
            assert!(
                !f.starts_with("_ops.py:"),
                "the agent's op call {f} in {line}"
            );
            assert!(
                !f.starts_with("module.py:") || !f.ends_with(":inner"),
                "{f} in {line}"
            );
        }
    }
    // the program's own frames stay, and so do torch's module calls
    assert!(folded.contains("gpt2_train.py:"), "{folded}");
    assert!(folded.contains(":_call_impl;"), "{folded}");
    let top = stdout(&["top", snap.to_str().unwrap()]);
    assert!(
        !top.contains("_memtrack_agent") && !top.contains("_ops.py"),
        "{top}"
    );
}
