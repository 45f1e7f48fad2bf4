//! The terminal UI (`record --watch`, `watch`, `view --tui`) driven in a real terminal: tmux,
//! 100×30 (80×24 where a test says so), keys sent with `send-keys`, the screen read with `capture-pane`. Each test waits
//! for what the screen must show (a marker), never for a fixed time.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{fixture, python, script};

/// A tmux server of the test's own (its own socket) with one window running `cmd`.
struct Tmux {
    socket: String,
}

/// tmux, or None: skipped loudly, except in CI, where scripts/test.sh installs it.
fn tmux_or_skip(what: &str) -> bool {
    let found = Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI needs tmux for {what}: scripts/test.sh installs it"
        );
        eprintln!("\n*** SKIPPED {what}: no tmux on PATH (apt-get install tmux) ***\n");
    }
    found
}

impl Tmux {
    /// `cmd` (a shell command line) in a fresh 100×30 terminal, in `dir`; it prints
    /// `EXIT=<code>` when it ends, and the window stays.
    fn start(name: &str, dir: &Path, cmd: &str) -> Tmux {
        Tmux::sized(name, dir, cmd, (100, 30))
    }

    /// The same in a terminal of `columns`×`rows`.
    fn sized(name: &str, dir: &Path, cmd: &str, (columns, rows): (u16, u16)) -> Tmux {
        let socket = format!("memtrack-test-{name}-{}", std::process::id());
        let t = Tmux { socket };
        let line = format!("{cmd}; echo EXIT=$?; sleep 600");
        let ok = t
            .tmux()
            .args(["new-session", "-d", "-x", &columns.to_string()])
            .args(["-y", &rows.to_string(), "-c"])
            .arg(dir)
            .arg(line)
            .status()
            .unwrap();
        assert!(ok.success(), "tmux new-session");
        t
    }

    fn tmux(&self) -> Command {
        let mut c = Command::new("tmux");
        c.args(["-L", &self.socket, "-f", "/dev/null"]);
        c.env_remove("TMUX");
        c
    }

    /// The screen now (with `history`, the scrollback too).
    fn screen(&self, history: bool) -> String {
        let mut c = self.tmux();
        c.args(["capture-pane", "-p", "-J"]);
        if history {
            c.args(["-S", "-"]);
        }
        String::from_utf8_lossy(&c.output().unwrap().stdout).into_owned()
    }

    fn keys(&self, keys: &[&str]) {
        let ok = self.tmux().arg("send-keys").args(keys).status().unwrap();
        assert!(ok.success());
    }

    /// Wait until `what` holds of the screen (at most `limit`); the screen then.
    fn wait(&self, what: &str, limit: Duration, test: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let s = self.screen(false);
            if test(&s) {
                return s;
            }
            assert!(
                start.elapsed() < limit,
                "after {:?}, the screen still does not show {what}:\n{s}",
                limit
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Wait for the command's end: its exit code.
    fn exit_code(&self, limit: Duration) -> i32 {
        let s = self.wait("EXIT=", limit, |s| s.contains("EXIT="));
        let code = s.split("EXIT=").nth(1).unwrap();
        code.split_whitespace().next().unwrap().parse().unwrap()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.tmux().arg("kill-server").status();
    }
}

/// One training program at a time: the tests that run one wait for each other, so that on a
/// small machine the 10 s a screen has is not spent on the other tests' programs.
static ONE_PROGRAM: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_program() -> std::sync::MutexGuard<'static, ()> {
    ONE_PROGRAM.lock().unwrap_or_else(|e| e.into_inner())
}

fn bin() -> String {
    env!("CARGO_BIN_EXE_memtrack").to_string()
}

/// The iteration the header says the program is in.
fn iteration(screen: &str) -> Option<u64> {
    let head = screen.lines().next()?;
    let rest = head.split("iteration ").nth(1)?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

fn has_byte_figure(s: &str) -> bool {
    let re = regex::Regex::new(r"\d+(\.\d+)? (B|KiB|MiB|GiB)\b").unwrap();
    re.is_match(s)
}

/// The program's lines in the terminal's scrollback: what it printed, in order.
fn program_lines(scrollback: &str) -> Vec<&str> {
    (scrollback.lines())
        .filter(|l| l.starts_with("step ") || *l == "done" || l.starts_with("stdout is"))
        .collect()
}

fn expected_lines(steps: usize) -> Vec<String> {
    let mut v = vec!["stdout is a terminal: True".to_string()];
    v.extend((0..steps).map(|k| format!("step {k}")));
    v.push("done".into());
    v
}

fn iterations_in(file: &Path) -> u64 {
    let j = common::json_out(&["summary", "--format", "json", file.to_str().unwrap()]);
    j["iterations"].as_array().map_or(0, |a| a.len() as u64)
}

#[test]
fn record_watch_shows_a_training_loop_and_q_leaves_it_running_with_its_output_whole() {
    let (Some(py), true) = (python(), tmux_or_skip("record --watch")) else {
        return;
    };
    let _one = one_program();
    let dir = tempfile::tempdir().unwrap();
    let steps = 60;
    let t = Tmux::start(
        "record",
        dir.path(),
        &format!(
            "{} record --watch -o run.pkl -- {} {} {steps} 0.1",
            bin(),
            py.display(),
            script("watch_loop.py")
        ),
    );
    // within 10 s: a module name, a byte figure and an iteration number
    let first = t.wait(
        "a module, bytes and an iteration",
        Duration::from_secs(10),
        |s| s.contains("Sequential") && has_byte_figure(s) && iteration(s).is_some(),
    );
    assert!(first.contains("m modules"), "{first}");
    // the iteration rises while the program runs
    let seen = iteration(&first).unwrap();
    let later = t.wait("a later iteration", Duration::from_secs(10), |s| {
        iteration(s).is_some_and(|k| k > seen + 1)
    });
    assert!(later.contains("program output"), "the output pane: {later}");
    assert!(later.contains("growth:"), "{later}");
    // the ops panel, then q: the program goes on to its end
    t.keys(&["o"]);
    // (the latest iteration whose phases and top ops were worked out, never an empty panel)
    let s = t.wait("the phases and top ops", Duration::from_secs(5), |s| {
        s.contains("optimizer step") && s.contains("allocated by it")
    });
    assert!(s.contains("Adam.step"), "{s}");
    t.keys(&["q"]);
    assert_eq!(
        t.exit_code(Duration::from_secs(40)),
        0,
        "{}",
        t.screen(true)
    );
    let scrollback = t.screen(true);
    // its output is what it would print alone: every line, in order, once, on a terminal
    assert_eq!(
        program_lines(&scrollback),
        expected_lines(steps),
        "{scrollback}"
    );
    assert!(scrollback.contains("memtrack: watch closed; the recording goes on"));
    // its file is whole
    assert!(
        scrollback.contains(&format!("{steps} iterations")),
        "{scrollback}"
    );
    assert_eq!(iterations_in(&dir.path().join("run.pkl")), steps as u64);
}

#[test]
fn record_watch_leaves_redirected_output_alone_and_closes_at_the_end() {
    let (Some(py), true) = (python(), tmux_or_skip("record --watch")) else {
        return;
    };
    let _one = one_program();
    let dir = tempfile::tempdir().unwrap();
    let steps = 12;
    let t = Tmux::start(
        "redirected",
        dir.path(),
        &format!(
            "{} record --watch -o run.pkl -- {} {} {steps} 0.05 > out.txt",
            bin(),
            py.display(),
            script("watch_loop.py")
        ),
    );
    t.wait("an iteration", Duration::from_secs(10), |s| {
        iteration(s).is_some()
    });
    // no key pressed: the UI closes by itself when the program ends
    assert_eq!(
        t.exit_code(Duration::from_secs(30)),
        0,
        "{}",
        t.screen(true)
    );
    let out = std::fs::read_to_string(dir.path().join("out.txt")).unwrap();
    let mut want = expected_lines(steps);
    want[0] = "stdout is a terminal: False".into();
    assert_eq!(out.lines().collect::<Vec<_>>(), want);
    assert_eq!(iterations_in(&dir.path().join("run.pkl")), steps as u64);
}

/// The terminal goes away under the UI (an SSH session that drops): the UI closes, the
/// recording goes on to its file, and memtrack ends with the program, never spinning on a
/// terminal that is gone.
#[test]
fn record_watch_whose_terminal_goes_away_ends_with_its_file() {
    let (Some(py), true) = (python(), tmux_or_skip("record --watch")) else {
        return;
    };
    let _one = one_program();
    let dir = tempfile::tempdir().unwrap();
    let t = Tmux::start(
        "hangup",
        dir.path(),
        &format!(
            "echo $$ > memtrack.pid; exec {} record --watch -o run.pkl -- {} {} 600 0.05 2> err.txt",
            bin(),
            py.display(),
            script("watch_loop.py")
        ),
    );
    t.wait("iteration 3", Duration::from_secs(30), |s| {
        iteration(s).is_some_and(|i| i >= 3)
    });
    let pid: i32 = std::fs::read_to_string(dir.path().join("memtrack.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    drop(t); // the terminal and everything in it: as a dropped connection hangs up
    let err = dir.path().join("err.txt");
    let start = Instant::now();
    // memtrack writes the file and ends: a process that spun on the dead terminal would not
    while std::path::Path::new(&format!("/proc/{pid}")).exists() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "memtrack {pid} still runs after its terminal went away: {}",
            std::fs::read_to_string(&err).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let said = std::fs::read_to_string(&err).unwrap();
    assert!(said.contains("the terminal went away"), "{said}");
    assert!(said.contains("wrote run.pkl"), "{said}");
    assert!(iterations_in(&dir.path().join("run.pkl")) > 0);
}

#[test]
fn watch_follows_a_journal_another_shell_is_writing() {
    let (Some(py), true) = (python(), tmux_or_skip("watch JOURNAL")) else {
        return;
    };
    let _one = one_program();
    let dir = tempfile::tempdir().unwrap();
    let mut record = common::memtrack_process()
        .current_dir(dir.path())
        .args(["record", "-o", "run.pkl", "--"])
        .arg(&py)
        .args([&script("watch_loop.py"), "40", "0.1"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let journal = loop {
        let found = std::fs::read_dir(dir.path()).unwrap().find_map(|e| {
            let p = e.ok()?.path();
            p.file_name()?.to_str()?.contains(".journal-").then_some(p)
        });
        if let Some(j) = found {
            break j;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // in the smallest terminal it is made for: 80×24
    let t = Tmux::sized(
        "journal",
        dir.path(),
        &format!("{} watch {}", bin(), journal.display()),
        (80, 24),
    );
    // (the other shell's program may still be importing torch: a cap, not a floor)
    let first = t.wait("an iteration", Duration::from_secs(30), |s| {
        iteration(s).is_some() && s.contains("Sequential") && has_byte_figure(s)
    });
    assert!(
        first.contains("recording"),
        "the state is not cut at 80 columns: {first}"
    );
    assert!(first.contains(" q quit"), "the keys line fits: {first}");
    let seen = iteration(&first).unwrap();
    t.wait("a later iteration", Duration::from_secs(10), |s| {
        iteration(s).is_some_and(|k| k > seen)
    });
    // the job ends: the screen says so and keeps the last figures until q
    assert!(record.wait().unwrap().success());
    t.wait("the end", Duration::from_secs(10), |s| s.contains("ended"));
    t.keys(&["q"]);
    assert_eq!(t.exit_code(Duration::from_secs(5)), 0);
    assert_eq!(iterations_in(&dir.path().join("run.pkl")), 40);
}

#[test]
fn view_tui_of_an_oom_capture_says_it_ran_out_of_memory_and_where() {
    if !tmux_or_skip("view --tui") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = fixture("snapshots/h100/oom_default.pickle");
    let t = Tmux::start(
        "oom",
        dir.path(),
        &format!("{} view --tui {}", bin(), file.display()),
    );
    let s = t.wait("the OOM", Duration::from_secs(10), |s| {
        s.contains("OUT OF MEMORY")
    });
    // what was asked and what was there (summary's figures), and where in the program
    assert!(
        s.contains("OUT OF MEMORY at event 1,709: 224.00 MiB asked"),
        "{s}"
    );
    assert!(
        s.contains("where: capture_gpu_snapshots.py:103:main"),
        "{s}"
    );
    // the moment starts at the OOM: what held the memory then, by site, with a stack
    let s = t.wait("the live table", Duration::from_secs(10), |s| {
        s.contains("live at event 1,709: 2.15 GiB in 322 allocations")
    });
    assert!(
        s.contains("621.00 MiB") && s.contains("linear.py:134:forward"),
        "{s}"
    );
    assert!(s.contains("stack of linear.py:134:forward"), "{s}");
    assert!(
        s.contains("activation 1.37 GiB"),
        "the legend at the moment: {s}"
    );
    // p: the peak; a search
    t.keys(&["p"]);
    t.wait("the peak", Duration::from_secs(10), |s| {
        s.contains("moment: event 1,700") && s.contains("live at event 1,700")
    });
    t.keys(&["/", "layer_norm", "Enter"]);
    let s = t.wait("the search", Duration::from_secs(10), |s| {
        s.contains("\"layer_norm\":")
    });
    assert!(s.contains("functional.py:2935:layer_norm"), "{s}");
    assert!(
        !s.contains("linear.py:134:forward  "),
        "rows that do not match are gone: {s}"
    );
    t.keys(&["q"]);
    assert_eq!(t.exit_code(Duration::from_secs(5)), 0);
}

#[test]
fn view_tui_fits_80_by_24() {
    if !tmux_or_skip("view --tui at 80×24") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let oom = fixture("snapshots/h100/oom_default.pickle");
    let t = Tmux::sized(
        "oom-80",
        dir.path(),
        &format!("{} view --tui {}", bin(), oom.display()),
        (80, 24),
    );
    let s = t.wait("the live table", Duration::from_secs(10), |s| {
        s.contains("live at event 1,709")
    });
    assert!(
        s.contains("OUT OF MEMORY at event 1,709: 224.00 MiB asked"),
        "{s}"
    );
    assert!(
        s.contains("where: capture_gpu_snapshots.py:103:main"),
        "{s}"
    );
    assert!(
        s.contains("621.00 MiB") && s.contains("linear.py:134:forward"),
        "{s}"
    );
    assert!(s.contains("activation 1.37 GiB"), "{s}");
    assert!(s.contains(" q quit"), "the keys line fits: {s}");
    t.keys(&["q"]);
    assert_eq!(t.exit_code(Duration::from_secs(5)), 0);
    let file = fixture("record/h100_gpt2_train.pkl");
    let t = Tmux::sized(
        "record-80",
        dir.path(),
        &format!("{} view --tui {}", bin(), file.display()),
        (80, 24),
    );
    let s = t.wait("the module table", Duration::from_secs(10), |s| {
        s.contains("iteration 3 of 3") && s.contains("GPT2LMHeadModel")
    });
    assert!(s.contains("lm_head") && s.contains("948.73 MiB"), "{s}");
    assert!(s.contains("growth:") && s.contains(" q quit"), "{s}");
    t.keys(&["o"]);
    let s = t.wait("the phases", Duration::from_secs(5), |s| {
        s.contains("optimizer step")
    });
    assert!(
        s.contains("AdamW.step"),
        "the top ops under the phases: {s}"
    );
    t.keys(&["q"]);
    assert_eq!(t.exit_code(Duration::from_secs(5)), 0);
}

#[test]
fn view_tui_of_a_record_file_steps_through_its_iterations() {
    if !tmux_or_skip("view --tui") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = fixture("record/h100_gpt2_train.pkl");
    let t = Tmux::start(
        "record-file",
        dir.path(),
        &format!("{} view --tui {}", bin(), file.display()),
    );
    let s = t.wait("the module table", Duration::from_secs(10), |s| {
        s.contains("iteration 3 of 3") && s.contains("GPT2LMHeadModel")
    });
    assert!(s.contains("python3 gpt2_train.py"), "{s}");
    assert!(s.contains("peak 1016.73 MiB after op 1,125"), "{s}");
    assert!(s.contains("lm_head") && s.contains("Activation"), "{s}");
    t.keys(&["Left", "o"]);
    let s = t.wait("iteration 2's phases", Duration::from_secs(5), |s| {
        s.contains("iteration 2 of 3") && s.contains("optimizer step")
    });
    assert!(s.contains("AdamW.step"), "{s}");
    // `/`: the modules and ops that match, and no others
    t.keys(&["m", "/", "lm_head", "Enter"]);
    let s = t.wait("the search", Duration::from_secs(5), |s| {
        s.contains("matching \"lm_head\"") && s.contains("GPT2LMHeadModel.lm_head")
    });
    assert!(
        !s.contains("  transformer "),
        "rows that do not match are gone: {s}"
    );
    t.keys(&["o"]);
    let s = t.wait("the matching ops", Duration::from_secs(5), |s| {
        s.contains("lm_head.forward.mm.default")
    });
    assert!(
        !s.contains("AdamW.step"),
        "ops that do not match are gone: {s}"
    );
    t.keys(&["q"]);
    assert_eq!(t.exit_code(Duration::from_secs(5)), 0);
}

#[test]
fn without_a_terminal_the_ui_refuses_and_points_to_summary() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("run.pkl.journal-abc");
    std::fs::create_dir(&journal).unwrap();
    let snap = fixture("snapshots/h100/oom_default.pickle");
    let cases: Vec<Vec<std::ffi::OsString>> = vec![
        vec!["watch".into(), journal.into()],
        vec!["view".into(), "--tui".into(), snap.into()],
        vec![
            "record".into(),
            "--watch".into(),
            "--".into(),
            "true".into(),
        ],
    ];
    for args in cases {
        let mut c = common::memtrack_process();
        c.args(&args);
        // a session of its own has no controlling terminal: /dev/tty cannot be opened
        use std::os::unix::process::CommandExt;
        unsafe {
            c.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
        let o = c.output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("no terminal to draw on"), "{err}");
        assert!(err.contains("memtrack summary"), "{err}");
    }
}

#[test]
fn watch_attach_records_a_running_process_for_its_window() {
    let (Some(py), true) = (python(), tmux_or_skip("watch --attach")) else {
        return;
    };
    let _one = one_program();
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("ready");
    let mut target = Command::new(&py)
        .arg(script("attach_loop.py"))
        .args(["100000", "0.01"])
        .arg(&ready)
        .arg(dir.path().join("facts.json"))
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !ready.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the loop never got ready"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let t = Tmux::start(
        "attach",
        dir.path(),
        &format!(
            "{} watch --attach {} --duration 4s -o att.pkl",
            bin(),
            target.id()
        ),
    );
    let s = t.wait("the attached loop", Duration::from_secs(15), |s| {
        iteration(s).is_some() && s.contains("Net") && has_byte_figure(s)
    });
    assert!(s.contains("attach_loop.py"), "{s}");
    // the window ends by itself: the file is written, the loop goes on
    assert_eq!(
        t.exit_code(Duration::from_secs(30)),
        0,
        "{}",
        t.screen(true)
    );
    assert!(iterations_in(&dir.path().join("att.pkl")) > 0);
    assert!(target.try_wait().unwrap().is_none(), "the loop runs on");
    let _ = target.kill();
    let _ = target.wait();
}
