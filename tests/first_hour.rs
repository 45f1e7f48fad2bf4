//! What a new user meets in the first hour: help that tells the truth, hints for the usual
//! slips, and errors that say what is supported.

mod common;

use common::{fixture, run};

#[test]
fn record_without_the_separator_hints_at_it() {
    let (code, _, err) = run(&["record", "python", "train.py"]);
    assert_eq!(code, 2);
    assert!(err.contains("hint: put `--` before the program"), "{err}");
    assert!(err.contains("memtrack record -o run.pkl -- python train.py"));
}

#[test]
fn help_tells_the_truth() {
    let (code, top, _) = run(&["--help"]);
    assert_eq!(code, 0);
    assert!(top.contains("record a training run"), "{top}");
    let (_, plot, _) = run(&["plot", "--help"]);
    assert!(plot.contains("allocator snapshot"), "{plot}");
    assert!(plot.contains("--stacked"));
    let (_, modules, _) = run(&["modules", "--help"]);
    assert!(modules.contains("auto|B|KiB|MiB|GiB"), "{modules}");
    let (code, help, err) = run(&["help", "--help"]);
    assert_eq!(code, 0, "{err}");
    assert!(help.contains("Usage: memtrack help"), "{help}");
    // completions: every shell the command accepts is named in its help, and works
    let (_, comp, _) = run(&["completions", "--help"]);
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        assert!(comp.contains(shell), "completions --help lacks {shell}");
        let (code, script, err) = run(&["completions", shell]);
        assert_eq!(code, 0, "{shell}: {err}");
        assert!(script.contains("record"), "{shell}");
    }
    let (_, man, _) = run(&["man"]);
    let exit = man
        .find(".SH \"EXIT STATUS\"")
        .expect("the man page has an EXIT STATUS section");
    for code in ["\\fB0\\fR", "\\fB1\\fR", "\\fB2\\fR"] {
        assert!(man[exit..].contains(code), "EXIT STATUS lacks {code}");
    }
}

#[test]
fn decimal_units_are_refused_everywhere() {
    let stats = fixture("tracker/synthetic_2000_ops.pkl");
    let stats = stats.to_str().unwrap();
    for cmd in ["summary", "top", "plot", "modules"] {
        let (code, _, err) = run(&[cmd, stats, "--units", "mb"]);
        assert_eq!(code, 2, "{cmd}: {err}");
        assert!(err.contains("binary units"), "{cmd}: {err}");
    }
    let (code, _, err) = run(&["summary", stats, "--units", "MiB"]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn summary_of_a_snapshot_and_a_stats_file_says_what_it_supports() {
    let a = fixture("snapshots/cs336_small_mem_snapshot.pickle");
    let b = fixture("tracker/memory_tracker_cpu_torch2.15.0.pkl");
    let (code, _, err) = run(&["summary", a.to_str().unwrap(), b.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("memory_tracker_cpu_torch2.15.0.pkl"), "{err}");
    assert!(err.contains("compares files of one kind"), "{err}");
}

/// A real recording (torch on CPU): `summary` separates setup, backward and the optimizer step
/// and names every iteration's markers; `modules` says which iteration it shows, in readable
/// units.
#[test]
fn summary_phases_and_modules_of_a_real_recording() {
    let Some(py) = common::python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (code, _) = common::record(
        dir.path(),
        "mlp.pkl",
        &["--backend", "cpu"],
        &py,
        &[&common::example("mlp_batchnorm.py"), "--steps", "2"],
    );
    assert_eq!(code, 0);
    let file = dir.path().join("mlp.pkl");
    let file = file.to_str().unwrap();
    let (code, text, err) = run(&["summary", file]);
    assert_eq!(code, 0, "{err}");
    let head = text.lines().next().unwrap();
    assert!(
        head.contains("fw_start at ") && head.contains(", "),
        "{head}"
    );
    let phases: Vec<(String, String)> = text
        .lines()
        .skip_while(|l| !l.starts_with("Forward / backward"))
        .skip(3)
        .take_while(|l| !l.trim().is_empty())
        .map(|l| {
            let mut w = l.split_whitespace();
            let iter = w.next().unwrap().to_string();
            let phase: Vec<&str> = w.take_while(|t| !t.contains("..")).collect();
            (iter, phase.join(" "))
        })
        .collect();
    let want = [
        ("-", "setup"),
        ("1", "forward"),
        ("1", "backward"),
        ("1", "optimizer step"),
        ("2", "forward"),
        ("2", "backward"),
        ("2", "optimizer step"),
    ];
    for (iter, phase) in want {
        assert!(
            phases.iter().any(|(i, p)| i == iter && p == phase),
            "no {iter} {phase} in {phases:?}\n{text}"
        );
    }
    // module peaks: the category column says it is all memory in use at the module's peak,
    // not what the module holds (CrossEntropyLoss holds no optimizer state)
    let peaks = text
        .lines()
        .skip_while(|l| !l.starts_with("Module peaks"))
        .take(2)
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        peaks.contains("all memory in use while the module ran, its own or not"),
        "{peaks}"
    );
    assert!(peaks.contains("at its peak, most memory is"), "{peaks}");
    assert!(!text.contains("largest category at peak"), "{text}");
    // plot: the three identical CPU series are one line that says so; every iteration's
    // markers are named where there is room
    let svg = dir.path().join("mlp.svg");
    let (code, _, err) = run(&["plot", file, "-o", svg.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.contains("allocated = active = reserved on CPU"));
    assert!(!svg.contains("active_memory"));
    assert!(svg.matches("fw_bw_boundary").count() >= 2, "{svg}");
    let (code, text, err) = run(&["modules", file]);
    assert_eq!(code, 0, "{err}");
    assert!(text.starts_with("== Iteration 2 of 2"), "{text}");
    assert!(text.contains(" KiB") || text.contains(" MiB"), "{text}");
}

/// `record` under a torch the agent does not support: exit 2 before the program runs, saying
/// the version found and the range. The torch is a stand-in package with only a
/// `__version__` (any python3 runs it): the agent must stop before it touches anything else.
#[test]
fn record_refuses_a_torch_outside_the_supported_range() {
    for (version, why) in [("2.1.2", "older than"), ("3.0.0", "newer than")] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("torch")).unwrap();
        std::fs::write(
            dir.path().join("torch/__init__.py"),
            format!("__version__ = '{version}'\n"),
        )
        .unwrap();
        std::fs::write(
            dir.path().join("train.py"),
            "import torch\nprint('the program ran')\n",
        )
        .unwrap();
        let o = common::memtrack_process()
            .current_dir(dir.path())
            .env("PYTHONPATH", dir.path())
            .env_remove("MEMTRACK_ANY_TORCH")
            .args(["record", "-o", "run.pkl", "--", "python3", "train.py"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(
            err.contains(&format!("torch {version} is not supported ({why}")),
            "{err}"
        );
        assert!(err.contains("memtrack records torch 2.3 to 2.15"), "{err}");
        assert!(err.contains("MEMTRACK_ANY_TORCH=1"), "{err}");
        assert!(!String::from_utf8_lossy(&o.stdout).contains("the program ran"));
        assert!(!dir.path().join("run.pkl").exists());
    }
}

/// `--top` is a count of rows: a negative one or 0 is refused with what it must be, not with
/// clap's advice to write `-- -3` (which then fails) or an empty table.
/// A flag mistyped by two swapped letters is suggested by its own name (clap alone offered
/// `--output` for `--tpo`), with a usage line that shows no flag the user did not type.
#[test]
fn a_mistyped_flag_suggests_the_closest_one() {
    let stats = fixture("tracker/memory_tracker_cpu_torch2.15.0.pkl");
    let stats = stats.to_str().unwrap();
    for (typed, meant) in [
        ("--tpo", "--top"),
        ("--tp", "--top"),
        ("--fromat", "--format"),
        ("--unit", "--units"),
    ] {
        let (code, _, err) = run(&["summary", stats, typed, "5"]);
        assert_eq!(code, 2, "{typed}: {err}");
        assert!(
            err.contains(&format!("tip: a similar argument exists: '{meant}'")),
            "{typed}: {err}"
        );
        assert!(!err.contains("--output <OUTPUT>"), "{typed}: {err}");
    }
    // clap's own suggestion stands where nothing is closer
    let (code, _, err) = run(&["summary", stats, "--outptu", "x"]);
    assert_eq!(code, 2);
    assert!(err.contains("'--output'"), "{err}");
}

/// A text file whose first line is a `[section]` (TOML, INI) is text, not a broken trace.
#[test]
fn a_toml_file_is_text_not_a_trace() {
    let cargo_toml = common::root().join("Cargo.toml");
    let (code, _, err) = run(&["summary", cargo_toml.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("Cargo.toml: not a pickle: it looks like text"),
        "{err}"
    );
    assert!(!err.contains("Chrome trace"), "{err}");
    // what memtrack reads is named, the profiler's traces among them
    assert!(
        err.contains("memtrack record files") && err.contains("torch.profiler traces"),
        "{err}"
    );
    // a stats file where a snapshot is wanted (and the other way) says what each is
    let stats = common::fixture("record/h100_gpt2_train.pkl");
    let (code, _, err) = run(&["segments", stats.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("this file is a `record` or MemoryTracker stats file"),
        "{err}"
    );
    // JSON that starts with a bracket is still read as a trace and told apart
    let dir = tempfile::tempdir().unwrap();
    for (name, text, said) in [
        (
            "numbers.json",
            "[1, 2]",
            "not a Chrome trace: trace event 0 is `1",
        ),
        (
            "spaced.json",
            "[ \n true ]",
            "not a Chrome trace: trace event 0 is `true",
        ),
        (
            "words.json",
            "[\"a\"]",
            "not a Chrome trace: trace event 0 is `\"a",
        ),
    ] {
        let path = common::write_temp(dir.path(), name, text.as_bytes());
        let (code, _, err) = run(&["summary", path.to_str().unwrap()]);
        assert_eq!(code, 2, "{name}: {err}");
        assert!(err.contains(said), "{name}: {err}");
    }
}

#[test]
fn top_must_be_a_positive_count() {
    let stats = fixture("tracker/memory_tracker_cpu_torch2.15.0.pkl");
    let snap = fixture("snapshots/cs336_small_mem_snapshot.pickle");
    for (cmd, file) in [("summary", &stats), ("top", &snap), ("summary", &snap)] {
        for n in ["-3", "0"] {
            let (code, out, err) = run(&[cmd, file.to_str().unwrap(), "--top", n]);
            assert_eq!(code, 2, "{cmd} --top {n}: {out}");
            assert!(
                err.contains("a count of 1 or more"),
                "{cmd} --top {n}: {err}"
            );
            assert!(!err.contains("-- -3"), "{err}");
        }
    }
    let (code, _, err) = run(&["summary", stats.to_str().unwrap(), "--top", "1"]);
    assert_eq!(code, 0, "{err}");
}

/// `--help` starts where a user starts (`record`), each one-line description names the inputs
/// the command reads, and every command's long help ends with examples.
#[test]
fn help_leads_with_record_and_every_command_has_examples() {
    let (_, top, _) = run(&["--help"]);
    let commands: Vec<&str> = top
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(commands.first(), Some(&"record"), "{top}");
    let line = |name: &str| -> String {
        let mut lines = top
            .lines()
            .skip_while(|l| !l.starts_with(&format!("  {name} ")));
        let first = lines.next().unwrap().to_string();
        let rest = lines.take_while(|l| l.starts_with("      "));
        std::iter::once(first.as_str())
            .chain(rest)
            .flat_map(str::split_whitespace)
            .collect::<Vec<_>>()
            .join(" ")
    };
    for (name, inputs) in [
        (
            "summary",
            &["`record` file", "MemoryTracker", "snapshot", "profiler"][..],
        ),
        ("plot", &["stats file", "snapshot", "profiler"]),
        ("top", &["snapshot", "profiler"]),
        ("diff", &["snapshots", "stats files", "profiler"]),
        ("export", &["stats file", "snapshot", "profiler"]),
        ("modules", &["`record` file"]),
        ("allocator", &["`record` file"]),
        ("cycles", &["`record --cycles` file"]),
    ] {
        let l = line(name);
        for input in inputs {
            assert!(l.contains(input), "{name}: `{l}` does not name {input}");
        }
    }
    for name in commands.iter().filter(|c| **c != "help") {
        let (code, help, err) = run(&[name, "--help"]);
        assert_eq!(code, 0, "{name}: {err}");
        assert!(
            help.contains("Examples:") || help.contains("Example:") || help.contains("Install:"),
            "{name} --help has no examples:\n{help}"
        );
    }
}

/// `simulate --memory` below what the recording used: the warning says the limit is why the
/// replay differs, and OOM lines give times since the trace's first event, as `summary` does.
#[test]
fn simulate_below_the_recordings_peak_names_the_limit_and_relative_times() {
    let snap = fixture("snapshots/h100_gpt2_train_exit.pickle");
    let (code, out, err) = run(&["simulate", snap.to_str().unwrap(), "--memory", "512MB"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("differs from the recording because of --memory 488.28 MiB"),
        "{err}"
    );
    assert!(err.contains("below what the program used"), "{err}");
    let oom = out.lines().find(|l| l.contains("OOM under")).expect(&out);
    assert!(!out.contains("time_us"), "{out}");
    assert!(oom.contains(" (+0."), "{oom}");
    // under its own settings and no limit the replay matches: no warning at all
    let (code, _, err) = run(&["simulate", snap.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(!err.contains("differs"), "{err}");
}

/// A snapshot's `summary`: no line about where counters came from when they simply came from
/// the file, pools named (not `(0, 0)`), and no row wider than a terminal's 120 columns.
#[test]
fn snapshot_summary_says_what_its_rows_are() {
    for name in [
        "snapshots/h100/oom_default.pickle",
        "snapshots/verl_mem_no_trace_multi_pool.pickle",
    ] {
        let (code, out, err) = run(&["summary", fixture(name).to_str().unwrap()]);
        assert_eq!(code, 0, "{err}");
        assert!(!out.contains("counters from the file"), "{out}");
        assert!(!out.contains(" (0, 0) "), "{out}");
        assert!(out.contains("\n default "), "{out}");
        for line in out.lines().filter(|l| !l.starts_with("Trace: none")) {
            assert!(line.chars().count() <= 120, "{name}: {line}");
        }
    }
    let (_, out, _) = run(&[
        "summary",
        fixture("snapshots/verl_mem_no_trace_multi_pool.pickle")
            .to_str()
            .unwrap(),
    ]);
    assert!(out.contains(" private (0, 1) "), "{out}");
    assert!(
        out.contains("a CUDA graph's or torch.cuda.MemPool's own pool"),
        "{out}"
    );
}

/// `plot -o link.svg` (and `.png`, and `segments -o`) where the link points elsewhere writes
/// the file the link names and keeps the link (issue 21 fixed it in src/output.rs; pictures
/// go through the same path as text).
#[test]
fn a_picture_written_through_a_symlink_keeps_the_link() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("elsewhere")).unwrap();
    let stats = fixture("tracker/synthetic_2000_ops.pkl");
    let snap = fixture("snapshots/cs336_small_mem_snapshot.pickle");
    for (cmd, input, name) in [
        ("plot", &stats, "plot.svg"),
        ("plot", &stats, "plot.png"),
        ("segments", &snap, "segments.svg"),
    ] {
        let target = dir.path().join("elsewhere").join(name);
        std::fs::write(&target, b"old").unwrap();
        let link = dir.path().join(format!("link-{name}"));
        std::os::unix::fs::symlink(format!("elsewhere/{name}"), &link).unwrap();
        let (code, _, err) = run(&[cmd, input.to_str().unwrap(), "-o", link.to_str().unwrap()]);
        assert_eq!(code, 0, "{cmd} {name}: {err}");
        let meta = std::fs::symlink_metadata(&link).unwrap();
        assert!(
            meta.file_type().is_symlink(),
            "{name}: the link was replaced"
        );
        let written = std::fs::read(&target).unwrap();
        assert!(
            written.len() > 100,
            "{name}: the link's target was not written"
        );
    }
}

/// The README's commands work as written after `scripts/demo.sh`, from the checkout: every
/// `memtrack …` line of its `sh` blocks is run by the shell (the user's own `train.py` and its
/// `run*.pkl` aside). The demo's `demo/mlp.pkl` is recorded here as the demo records it; with no
/// torch, only the lines on fixtures run (loudly).
#[test]
fn readme_commands_work_as_written() {
    let readme = std::fs::read_to_string(common::root().join("README.md")).unwrap();
    let mut lines = Vec::new();
    let mut in_sh = false;
    for l in readme.lines() {
        if l.starts_with("```") {
            in_sh = l == "```sh";
            continue;
        }
        if in_sh && (l.starts_with("memtrack ") || l.starts_with("py=")) {
            lines.push(l.to_string());
        }
    }
    assert!(lines.len() > 10, "{lines:?}");
    let dir = tempfile::tempdir().unwrap();
    for d in ["fixtures", "examples", "scripts"] {
        std::os::unix::fs::symlink(common::root().join(d), dir.path().join(d)).unwrap();
    }
    let py = common::python();
    if let Some(py) = &py {
        std::fs::create_dir(dir.path().join("demo")).unwrap();
        let (code, _) = common::record(
            &dir.path().join("demo"),
            "mlp.pkl",
            &["--backend", "cpu"],
            py,
            &[&common::example("mlp_batchnorm.py")],
        );
        assert_eq!(code, 0);
    } else {
        eprintln!("NO TORCH: README lines on the demo's recording not run");
    }
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_memtrack"))
        .parent()
        .unwrap()
        .to_path_buf();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut ran = 0;
    for line in &lines {
        if line.contains("train.py") || line.contains(" run.") {
            continue; // the user's own program
        }
        if line.starts_with("memtrack view ") {
            continue; // a server that runs until Ctrl-C: tests/view_server.rs drives it
        }
        let needs_torch =
            line.contains("demo/") || line.contains("tf.pkl") || line.starts_with("py=");
        if needs_torch && py.is_none() {
            continue;
        }
        let line = match &py {
            // the demo's Python is the one tests use (scripts/setup-python.sh would install one)
            Some(py) if line.starts_with("py=") => format!("py='{}'", py.display()),
            _ => line.clone(),
        };
        // one shell for the block's `py=` and the lines after it
        let script = format!(
            "py='{}'; {line}",
            py.as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        );
        let o = std::process::Command::new("sh")
            .arg("-c")
            .arg(&script)
            .current_dir(dir.path())
            .env("PATH", &path)
            .output()
            .unwrap();
        let code = o.status.code();
        let ok = code == Some(0) || (line.contains("--fail-over") && code == Some(1));
        assert!(
            ok,
            "README line failed ({code:?}): {line}\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
        ran += 1;
    }
    assert!(ran >= 11, "only {ran} README lines ran");
}

/// The set-up scripts say one size (the README's), show their progress (no `--quiet`: a first
/// run takes minutes), and the demo ends with commands to try next.
#[test]
fn demo_and_setup_say_one_size_and_show_progress() {
    let read = |p: &str| std::fs::read_to_string(common::root().join(p)).unwrap();
    let sizes = |text: &str| -> Vec<String> {
        let words: Vec<&str> = text.split_whitespace().collect();
        words
            .windows(3)
            .filter(|w| w[0] == "about" && w[2].trim_end_matches([',', ')']) == "GB")
            .map(|w| w[1].to_string())
            .collect()
    };
    let (readme, setup, demo) = (
        read("README.md"),
        read("scripts/setup-python.sh"),
        read("scripts/demo.sh"),
    );
    let mut all = sizes(&readme);
    all.extend(sizes(&setup));
    all.extend(sizes(&demo));
    assert!(!sizes(&setup).is_empty(), "setup-python.sh says no size");
    assert!(all.iter().all(|s| *s == all[0]), "sizes differ: {all:?}");
    for (name, text) in [("setup-python.sh", &setup), ("demo.sh", &demo)] {
        assert!(!text.contains("--quiet"), "{name} is silent for minutes");
    }
    assert!(
        demo.contains("== demo step 1/4") || demo.contains("step \"1/4"),
        "{demo}"
    );
    assert!(demo.contains("next, try"), "{demo}");
}

/// One Python for the demo and the tests: both take it from `scripts/setup-python.sh`, which
/// takes `MEMTRACK_PYTHON` first (and refuses one without torch); and the 5.5 GB download of
/// torch is never silent: with no Python that has torch, no terminal and no consent
/// (`MEMTRACK_YES`, `--yes`, `CI`), it says how to go on and downloads nothing.
#[test]
fn the_demo_and_the_tests_share_one_python_and_torch_is_never_downloaded_unasked() {
    let root = common::root();
    let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap();
    let (demo, test) = (read("scripts/demo.sh"), read("scripts/test.sh"));
    assert!(demo.contains("py=\"$(scripts/setup-python.sh)\""), "{demo}");
    assert!(
        test.contains("MEMTRACK_PYTHON=\"$(scripts/setup-python.sh --tests)\"")
            && test.contains("export MEMTRACK_PYTHON"),
        "{test}"
    );
    assert!(read(".ci/run").contains("export MEMTRACK_YES=1"));
    let setup = |env: &[(&str, &std::ffi::OsStr)], args: &[&str]| {
        let mut cmd = std::process::Command::new("/bin/bash");
        cmd.arg(root.join("scripts/setup-python.sh"))
            .args(args)
            .env_remove("CI")
            .env_remove("MEMTRACK_PYTHON")
            .env_remove("MEMTRACK_YES")
            .stdin(std::process::Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    };
    // MEMTRACK_PYTHON is the one, when it has torch
    if let Some(py) = common::python() {
        let o = setup(&[("MEMTRACK_PYTHON", py.as_os_str())], &["--tests"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(
            String::from_utf8_lossy(&o.stdout).trim(),
            py.to_str().unwrap()
        );
    }
    let no_torch = std::ffi::OsStr::new("/bin/false");
    let o = setup(&[("MEMTRACK_PYTHON", no_torch)], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("does not import torch"));
    // no Python on PATH, a venv not made yet, nobody to ask: refused, nothing made
    let dir = tempfile::tempdir().unwrap();
    let venv = dir.path().join("venv");
    let o = setup(
        &[
            ("MEMTRACK_VENV", venv.as_os_str()),
            ("PATH", dir.path().as_os_str()),
        ],
        &[],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("about 5.5 GB") && err.contains("MEMTRACK_YES=1"),
        "{err}"
    );
    assert!(!venv.exists(), "nothing is made without consent");
}
