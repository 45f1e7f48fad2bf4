//! `-o` writes as the shell's `>` would, never half a file: symlinks keep pointing at the file
//! they name, devices and FIFOs are written into (not replaced), a file the user may not write
//! is refused with exit 2, and a replaced file keeps its mode and owner.

mod common;

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{fixture, memtrack, run};

fn input() -> String {
    fixture("tracker/memory_tracker_cpu_torch2.15.0.pkl")
        .to_string_lossy()
        .into_owned()
}

/// What `export` writes to stdout: what every `-o` below must have written.
fn expected() -> Vec<u8> {
    let o = memtrack().args(["export", &input()]).output().unwrap();
    assert!(o.status.success());
    o.stdout
}

fn export_to(out: &Path) -> (i32, String) {
    let (code, _, stderr) = run(&["export", &input(), "-o", out.to_str().unwrap()]);
    (code, stderr)
}

/// Temporaries left in `dir` (they start with a dot and end in `.tmp`).
fn leftovers(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".tmp"))
        .collect()
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions
    unsafe { libc::geteuid() == 0 }
}

#[test]
fn a_symlink_keeps_pointing_at_the_file_it_names_and_that_file_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("real.json");
    std::fs::write(&target, b"old").unwrap();
    let link = dir.path().join("out.json");
    std::os::unix::fs::symlink("real.json", &link).unwrap();
    assert_eq!(export_to(&link).0, 0);
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(std::fs::read(&target).unwrap(), expected());
    // a dangling link names the file to create, as with `>`
    let dangling = dir.path().join("new.json");
    std::os::unix::fs::symlink("created.json", &dangling).unwrap();
    assert_eq!(export_to(&dangling).0, 0);
    assert!(std::fs::symlink_metadata(&dangling)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(
        std::fs::read(dir.path().join("created.json")).unwrap(),
        expected()
    );
    assert!(leftovers(dir.path()).is_empty());
}

#[test]
fn a_fifo_is_streamed_into_and_stays_a_fifo() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("pipe");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(fifo).unwrap())
    };
    assert_eq!(export_to(&fifo).0, 0);
    assert_eq!(reader.join().unwrap(), expected());
    assert!(std::fs::symlink_metadata(&fifo)
        .unwrap()
        .file_type()
        .is_fifo());
}

#[test]
fn a_device_node_is_written_into_not_replaced() {
    if !is_root() {
        eprintln!("SKIPPED: making a device node (mknod) needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let null = dir.path().join("null");
    // the same device as /dev/null (major 1, minor 3)
    assert!(Command::new("mknod")
        .arg(&null)
        .args(["c", "1", "3"])
        .status()
        .unwrap()
        .success());
    assert_eq!(export_to(&null).0, 0);
    assert!(std::fs::symlink_metadata(&null)
        .unwrap()
        .file_type()
        .is_char_device());
    assert!(leftovers(dir.path()).is_empty());
}

#[test]
fn a_directory_is_refused_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let (code, stderr) = export_to(dir.path());
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("directory"), "{stderr}");
    assert!(stderr.contains(&*dir.path().to_string_lossy()), "{stderr}");
}

#[test]
fn a_new_file_gets_the_mode_the_shell_would_give_it() {
    let dir = tempfile::tempdir().unwrap();
    let shell = dir.path().join("by_create.json");
    std::fs::File::create(&shell).unwrap();
    let out = dir.path().join("out.json");
    assert_eq!(export_to(&out).0, 0);
    assert_eq!(
        std::fs::metadata(&out).unwrap().mode() & 0o7777,
        std::fs::metadata(&shell).unwrap().mode() & 0o7777,
        "0666 less the umask, as File::create (and `>`) give"
    );
}

#[test]
fn a_replaced_file_keeps_its_mode_and_owner() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.json");
    std::fs::write(&out, b"old").unwrap();
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o640)).unwrap();
    if is_root() {
        // root may write another user's file: it stays theirs
        std::os::unix::fs::chown(&out, Some(65534), Some(65534)).unwrap();
    }
    let before = std::fs::metadata(&out).unwrap();
    assert_eq!(export_to(&out).0, 0);
    let after = std::fs::metadata(&out).unwrap();
    assert_eq!(std::fs::read(&out).unwrap(), expected());
    assert_eq!(after.mode() & 0o7777, 0o640);
    assert_eq!((after.uid(), after.gid()), (before.uid(), before.gid()));
    assert_ne!(after.ino(), before.ino(), "replaced whole, by a rename");
    assert!(leftovers(dir.path()).is_empty());
}

#[test]
fn a_file_the_user_may_not_write_is_refused_with_exit_2_and_kept() {
    // root may write any file: the refusal is seen as another user (nobody), where one exists
    let as_nobody = is_root();
    if as_nobody
        && !Command::new("setpriv")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    {
        eprintln!("SKIPPED: running as root without setpriv to become another user");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // a folder the user may write, holding a read-only file
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = dir.path().join("out.json");
    std::fs::write(&out, b"keep me").unwrap();
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o444)).unwrap();
    let bin = assert_cmd::cargo::cargo_bin("memtrack");
    let mut cmd = if as_nobody {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(&bin);
        c
    } else {
        Command::new(&bin)
    };
    // the input is copied where any user may read it
    let src = dir.path().join("in.pkl");
    std::fs::copy(input(), &src).unwrap();
    std::fs::set_permissions(&src, std::fs::Permissions::from_mode(0o644)).unwrap();
    let o = cmd
        .args(["export", src.to_str().unwrap(), "-o", out.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    if as_nobody && stderr.contains("Permission denied") && !stderr.contains("out.json") {
        eprintln!("SKIPPED: user nobody cannot run the test binary here: {stderr}");
        return;
    }
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&*out.to_string_lossy()), "{stderr}");
    assert!(stderr.contains("permission denied"), "{stderr}");
    assert_eq!(std::fs::read(&out).unwrap(), b"keep me");
    assert_eq!(
        std::fs::metadata(&out).unwrap().mode() & 0o7777,
        0o444,
        "mode unchanged"
    );
    assert!(leftovers(dir.path()).is_empty());
}

/// `-o` naming an input (directly, through a symlink, or another hard link) is refused with
/// exit 2 before anything is written, for every kind of input; the input is left as it was.
#[test]
fn an_output_that_is_an_input_is_refused_and_the_input_kept() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("export", "profiler/export_chrome_trace.json", "trace.json"),
        (
            "summary",
            "profiler/tb/worker0.pt.trace.json.gz",
            "w.json.gz",
        ),
        (
            "summary",
            "tracker/memory_tracker_cpu_torch2.15.0.pkl",
            "stats.pkl",
        ),
        (
            "export",
            "snapshots/code_location_expandable_oom_device1.pickle",
            "snap.pickle",
        ),
    ];
    for (command, rel, name) in cases {
        let original = std::fs::read(fixture(rel)).unwrap();
        let file = dir.path().join(name);
        std::fs::write(&file, &original).unwrap();
        let link = dir.path().join(format!("link-{name}"));
        std::os::unix::fs::symlink(name, &link).unwrap();
        let hard = dir.path().join(format!("hard-{name}"));
        std::fs::hard_link(&file, &hard).unwrap();
        for (read, write) in [
            (&file, &file),
            (&file, &link),
            (&link, &file),
            (&file, &hard),
        ] {
            let (code, _, stderr) = run(&[
                command,
                read.to_str().unwrap(),
                "-o",
                write.to_str().unwrap(),
            ]);
            assert_eq!(code, 2, "{command} {read:?} -o {write:?}: {stderr}");
            assert!(
                stderr.contains(&format!("it is the input {}", read.display()))
                    && stderr.contains(&write.display().to_string()),
                "{stderr}"
            );
            assert_eq!(
                std::fs::read(&file).unwrap(),
                original,
                "{name} was changed"
            );
        }
        assert!(leftovers(dir.path()).is_empty());
    }
    // a folder of traces read, one of its files named as the output
    let tb = dir.path().join("tb");
    std::fs::create_dir(&tb).unwrap();
    for w in ["worker0", "worker1"] {
        let rel = format!("profiler/tb/{w}.pt.trace.json.gz");
        std::fs::copy(fixture(&rel), tb.join(format!("{w}.pt.trace.json.gz"))).unwrap();
    }
    let target = tb.join("worker1.pt.trace.json.gz");
    let (code, _, stderr) = run(&[
        "summary",
        tb.to_str().unwrap(),
        "-o",
        target.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert_eq!(
        std::fs::read(&target).unwrap(),
        std::fs::read(fixture("profiler/tb/worker1.pt.trace.json.gz")).unwrap()
    );
    // another file beside the input is written as ever
    let other = dir.path().join("other.json");
    let (code, _, stderr) = run(&[
        "export",
        dir.path().join("trace.json").to_str().unwrap(),
        "-o",
        other.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
}

/// `record` and `estimate` never write over a file the program was given (issue 62, item 10):
/// `-o prog.py -- python prog.py`, through a link too, or a data file named by an option, is
/// refused before the program runs (exit 2, the file as it was, nothing left behind).
#[test]
fn record_and_estimate_refuse_an_output_that_is_a_file_of_the_programs() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("prog.py");
    let text = b"raise SystemExit('the program must not run')\n";
    std::fs::write(&script, text).unwrap();
    std::fs::write(dir.path().join("data.bin"), b"data").unwrap();
    std::os::unix::fs::symlink("prog.py", dir.path().join("link.pkl")).unwrap();
    for (command, out, args) in [
        ("record", "prog.py", vec!["python3", "prog.py"]),
        ("estimate", "prog.py", vec!["python3", "prog.py"]),
        ("record", "link.pkl", vec!["python3", "./prog.py"]),
        (
            "record",
            "data.bin",
            vec!["python3", "prog.py", "--data=data.bin"],
        ),
    ] {
        let o = memtrack()
            .current_dir(dir.path())
            .args([command, "-o", out, "--"])
            .args(&args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{command} -o {out}: {stderr}");
        assert!(
            stderr.contains("named on the program's command line")
                && stderr.contains("name another output"),
            "{stderr}"
        );
        assert!(!stderr.contains("must not run"), "{stderr}");
    }
    assert_eq!(std::fs::read(&script).unwrap(), text);
    assert_eq!(std::fs::read(dir.path().join("data.bin")).unwrap(), b"data");
    let mut left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["data.bin", "link.pkl", "prog.py"]);
}
