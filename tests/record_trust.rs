//! `memtrack record` on a shared machine and a full disk, tried as a hostile local user and
//! a careless one would (docs/reliability.md, "Recording"): what it makes is the user's
//! alone, nothing planted is read, and the program never dies of memtrack's I/O.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{export, memtrack_process as memtrack, python, script};

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions
    unsafe { libc::geteuid() == 0 }
}

/// `sh -c SCRIPT` as user nobody: where the tests run as root and `setpriv` can become it;
/// None, said loudly, elsewhere (a user cannot become another).
fn as_nobody(script: &str) -> Option<std::process::Output> {
    if !is_root() {
        eprintln!("SKIPPED (the other user's part): the tests do not run as root");
        return None;
    }
    let o = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .args(["sh", "-c", script])
        .output();
    match o {
        Ok(o) => Some(o),
        Err(e) => {
            eprintln!("SKIPPED (the other user's part): setpriv: {e}");
            None
        }
    }
}

/// What nobody's attempt said: it must have failed, for lack of permission.
fn refused(script: &str) {
    let Some(o) = as_nobody(script) else { return };
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && stderr.contains("Permission denied"),
        "as nobody, `{script}` was not refused: exit {:?}, {stderr}",
        o.status.code()
    );
}

/// `record -o OUT -- python trust_probe.py ARGS` started under `umask`, paused after its
/// first step; the JSON line it printed.
struct Probe {
    child: std::process::Child,
    stdout: BufReader<std::process::ChildStdout>,
    facts: serde_json::Value,
}

impl Probe {
    fn start(out: &Path, umask: libc::mode_t, args: &[&str]) -> Option<Probe> {
        let py = python()?;
        let mut cmd = memtrack();
        cmd.args(["record", "-o"])
            .arg(out)
            .arg("--")
            .arg(py)
            .arg(script("trust_probe.py"))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // SAFETY: umask(2) in the child between fork and exec, nothing else
        unsafe {
            cmd.pre_exec(move || {
                libc::umask(umask);
                Ok(())
            });
        }
        let mut child = cmd.spawn().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let facts = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
        Some(Probe {
            child,
            stdout,
            facts,
        })
    }

    fn path(&self, key: &str) -> PathBuf {
        PathBuf::from(self.facts[key].as_str().unwrap())
    }

    /// Let the program go on; (record's exit code, the rest of the program's stdout).
    fn finish(self) -> (i32, String) {
        let (code, rest, _) = self.finish_with_stderr();
        (code, rest)
    }

    /// The same, and what memtrack and the program wrote on stderr (a few lines).
    fn finish_with_stderr(mut self) -> (i32, String, String) {
        self.child.stdin.take().unwrap().write_all(b"go\n").unwrap();
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut self.stdout, &mut rest).unwrap();
        let mut stderr = String::new();
        let mut err = self.child.stderr.take().unwrap();
        std::io::Read::read_to_string(&mut err, &mut stderr).unwrap();
        let status = self.child.wait().unwrap();
        (status.code().unwrap_or(-1), rest, stderr)
    }
}

#[test]
fn the_agent_socket_and_journal_are_private_whatever_the_umask() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = dir.path().join("run.pkl");
    let Some(probe) = Probe::start(&out, 0, &[]) else {
        return;
    };
    let agent = probe.path("agent");
    let socket = probe.path("socket");
    let journal = probe.path("journal");
    assert_eq!(mode(agent.parent().unwrap()), 0o700);
    assert_eq!(mode(&agent), 0o700);
    assert_eq!(mode(&agent.join("_memtrack_agent")), 0o700);
    assert_eq!(mode(&agent.join("sitecustomize.py")), 0o600);
    assert_eq!(mode(&agent.join("_memtrack_agent/ops.py")), 0o600);
    assert_eq!(mode(&socket) & 0o777, 0o600);
    assert_eq!(socket.parent(), agent.parent());
    assert_eq!(mode(&journal), 0o700);
    assert_eq!(journal.parent().unwrap(), dir.path());
    let name = journal.file_name().unwrap().to_str().unwrap();
    let tag = name.strip_prefix("run.pkl.journal-").unwrap();
    assert!(
        tag.parse::<u32>().is_err() && tag.len() >= 8,
        "a name nobody can predict: {name}"
    );
    let files: Vec<_> = std::fs::read_dir(&journal)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(files.len() >= 2, "{files:?}");
    for f in &files {
        assert_eq!(mode(f), 0o600, "{}", f.display());
    }
    // the other user, who may write the output's folder, reaches none of it
    let q = |p: &Path| format!("'{}'", p.display());
    refused(&format!(
        "echo 'import os' >> {}",
        q(&agent.join("sitecustomize.py"))
    ));
    refused(&format!("ls {}", q(&journal)));
    refused(&format!(": > {}", q(&journal.join("spool-1-0000.bin"))));
    refused(&format!("ls -d {}", q(&socket)));
    // a folder others may write lets them rename the journal (not enter it): put another in
    // its place, with a link to the user's file and a spool of their own
    let victim = dir.path().join("victim.txt");
    std::fs::write(&victim, b"precious").unwrap();
    let swapped = as_nobody(&format!(
        "mv {j} {d}/stolen && mkdir -m 777 {j} && ln -s {v} {j}/conn0001.bin && \
         head -c 4096 /dev/urandom > {j}/spool-1-0000.bin",
        j = q(&journal),
        d = q(dir.path()),
        v = q(&victim)
    ))
    .is_some_and(|o| o.status.success());

    let (code, rest) = probe.finish();
    assert_eq!(code, 0);
    assert_eq!(rest, "done\n");
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    // every step is in the file: the journal was read through the handle memtrack held
    let j = export(&out);
    assert_eq!(j["memtrack"]["modules"].as_array().unwrap().len(), 4);
    let files = std::fs::read_dir(dir.path()).unwrap().count();
    if swapped {
        assert!(
            journal.join("spool-1-0000.bin").exists(),
            "theirs is left alone"
        );
        assert_eq!(
            files, 4,
            "run.pkl, victim, their folder, ours renamed, nothing else"
        );
    } else {
        assert!(
            !journal.exists(),
            "the journal is removed once the file is written"
        );
        assert_eq!(files, 2);
    }
    assert!(!agent.exists(), "the agent's folder is removed");
}

#[test]
fn journals_planted_in_a_shared_folder_are_never_used() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let victim = dir.path().join("victim.txt");
    std::fs::write(&victim, b"precious").unwrap();
    // folders at the names a journal had when it was named by memtrack's pid, the next
    // pids ahead, each with a link to the user's file where a connection file would go
    let next = std::process::id();
    let plant = (next..next + 200)
        .map(|pid| {
            let j = format!("'{}/run.pkl.journal-{pid}'", dir.path().display());
            format!("mkdir {j} && ln -s '{}' {j}/conn0000.bin", victim.display())
        })
        .collect::<Vec<_>>()
        .join(" && ");
    let planted_by_other = as_nobody(&plant).is_some_and(|o| o.status.success());
    if !planted_by_other {
        let o = Command::new("sh").args(["-c", &plant]).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let before = std::fs::read_dir(dir.path()).unwrap().count();
    let o = memtrack()
        .current_dir(dir.path())
        .args(["record", "-o", "run.pkl", "--"])
        .arg(&py)
        .arg(script("full_disk_loop.py"))
        .arg("3")
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        before + 1,
        "run.pkl alone was added"
    );
    let j = export(&dir.path().join("run.pkl"));
    assert_eq!(j["memtrack"]["modules"].as_array().unwrap().len(), 3);
}

#[test]
fn recover_reads_only_a_journal_of_this_user_that_nobody_else_may_write() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let open = dir.path().join("open.pkl.journal-a1b2c3d4");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let recover = |j: &Path| {
        let o = memtrack()
            .args(["record", "--recover"])
            .arg(j)
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (code, stderr) = recover(&open);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("other users may write"), "{stderr}");
    let link = dir.path().join("link.pkl.journal-a1b2c3d4");
    std::os::unix::fs::symlink(&open, &link).unwrap();
    let (code, stderr) = recover(&link);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("symbolic link"), "{stderr}");
    let theirs = dir.path().join("theirs.pkl.journal-a1b2c3d4");
    let made = as_nobody(&format!(
        "mkdir -m 700 '{0}' && : > '{0}/spool-1-0000.bin'",
        theirs.display()
    ));
    if made.is_some_and(|o| o.status.success()) {
        let (code, stderr) = recover(&theirs);
        assert_eq!(code, Some(2));
        assert!(stderr.contains("belongs to user id 65534"), "{stderr}");
        assert!(!dir.path().join("theirs.pkl").exists());
    }
}

/// A 2 MiB tmpfs mounted for one test, unmounted when dropped; None (said loudly) where the
/// tests may not mount one.
struct SmallDisk(tempfile::TempDir);

impl SmallDisk {
    fn mount() -> Option<SmallDisk> {
        let dir = tempfile::tempdir().unwrap();
        let o = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=2m,mode=0777", "tmpfs"])
            .arg(dir.path())
            .output();
        match o {
            Ok(o) if o.status.success() => Some(SmallDisk(dir)),
            Ok(o) => {
                eprintln!(
                    "SKIPPED: cannot mount a small tmpfs here: {}",
                    String::from_utf8_lossy(&o.stderr)
                );
                None
            }
            Err(e) => {
                eprintln!("SKIPPED: cannot mount a small tmpfs here: {e}");
                None
            }
        }
    }

    fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.path()).status();
    }
}

#[test]
fn a_full_disk_stops_the_recording_not_the_program() {
    let Some(py) = python() else { return };
    let Some(disk) = SmallDisk::mount() else {
        return;
    };
    let steps = "4000";
    let alone = Command::new(&py)
        .arg(script("full_disk_loop.py"))
        .arg(steps)
        .output()
        .unwrap();
    assert!(alone.status.success());
    let o = memtrack()
        .current_dir(disk.path())
        .args(["record", "-o", "run.pkl", "--"])
        .arg(&py)
        .arg(script("full_disk_loop.py"))
        .arg(steps)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    // the program ran to its end and printed what it prints alone; record says why it is
    // not 0 (docs/record.md: a process stopped recording early)
    assert_eq!(o.stdout, alone.stdout, "{stderr}");
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("No space left on device"), "{stderr}");
    assert!(stderr.contains("recording stops here"), "{stderr}");
    let journal = std::fs::read_dir(disk.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().contains(".journal-"))
        .expect("the journal is kept");
    // in place there is still no room: said as such, not as an empty journal
    let o = memtrack()
        .args(["record", "--recover"])
        .arg(&journal)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("no stats file could be written"),
        "{stderr}"
    );
    assert!(!stderr.contains("no recording in this journal"), "{stderr}");
    // elsewhere it is: what was recorded is a readable file
    let elsewhere = tempfile::tempdir().unwrap();
    let out = elsewhere.path().join("run.pkl");
    let o = memtrack()
        .args(["record", "--recover"])
        .arg(&journal)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let j = export(&out);
    assert!(j["op_count"].as_u64().unwrap() > 1000, "{}", j["op_count"]);
    assert!(!journal.exists());
}

#[test]
fn a_journal_removed_while_the_program_runs_still_gives_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run.pkl");
    let Some(probe) = Probe::start(&out, 0o022, &["3"]) else {
        return;
    };
    std::fs::remove_dir_all(probe.path("journal")).unwrap();
    let (code, rest) = probe.finish();
    assert_eq!((code, rest.as_str()), (0, "done\n"));
    // every step, those after the removal too (their segment was held open)
    let j = export(&out);
    assert_eq!(j["memtrack"]["modules"].as_array().unwrap().len(), 4);

    // a long run needs new segments after the removal: recording stops there, the file
    // holds what came before
    let out = dir.path().join("long.pkl");
    let Some(probe) = Probe::start(&out, 0o022, &["200", "small-segments"]) else {
        return;
    };
    std::fs::remove_dir_all(probe.path("journal")).unwrap();
    let (code, rest) = probe.finish();
    assert_eq!((code, rest.as_str()), (2, "done\n"));
    let j = export(&out);
    let steps = j["memtrack"]["modules"].as_array().unwrap().len();
    assert!((1..201).contains(&steps), "{steps} steps");
}

/// Another user of a shared folder renames the journal before the program's first op: the
/// program writes through the folder memtrack handed it on connecting, never its path, so the
/// file is whole, and memtrack says what happened.
#[test]
fn a_journal_renamed_before_the_first_op_still_gives_the_whole_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run.pkl");
    let Some(probe) = Probe::start(&out, 0o022, &["3", "first"]) else {
        return;
    };
    let taken = dir.path().join("taken");
    std::fs::rename(probe.path("journal"), &taken).unwrap();
    let (code, rest, stderr) = probe.finish_with_stderr();
    assert_eq!((code, rest.as_str()), (0, "done\n"), "{stderr}");
    let j = export(&out);
    assert_eq!(j["memtrack"]["modules"].as_array().unwrap().len(), 4);
    assert!(
        stderr.contains("was renamed or removed while the program ran"),
        "{stderr}"
    );
    assert!(!stderr.contains("python -E"), "{stderr}");
    // its files were read, then removed through the handle; the folder stays where it went
    assert_eq!(std::fs::read_dir(&taken).unwrap().count(), 0);
}

#[test]
fn no_file_is_no_success() {
    let dir = tempfile::tempdir().unwrap();
    let o = memtrack()
        .current_dir(dir.path())
        .args(["record", "-o", "x.pkl", "--", "sh", "-c", "echo hi"])
        .output()
        .unwrap();
    assert_eq!(o.stdout, b"hi\n");
    assert_eq!(o.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("nothing recorded"), "{stderr}");
    let Some(py) = python() else { return };
    let o = memtrack()
        .current_dir(dir.path())
        .args(["record", "-o", "x.pkl", "--"])
        .arg(&py)
        .args(["-c", "print('no torch here')"])
        .output()
        .unwrap();
    assert_eq!(o.stdout, b"no torch here\n");
    assert_eq!(o.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("never imported torch"), "{stderr}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn a_compiled_observer_another_user_could_swap_is_not_loaded() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    let o = memtrack()
        .current_dir(dir.path())
        .env("MEMTRACK_OBSERVER_CACHE", shared.join("cache"))
        .args(["record", "--observer", "compiled", "-o", "run.pkl", "--"])
        .arg(&py)
        .arg(script("full_disk_loop.py"))
        .arg("2")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("may be changed by another user"),
        "{stderr}"
    );
    let j = export(&dir.path().join("run.pkl"));
    assert_eq!(j["memtrack"]["observer"], "python");
    let built = walk(&shared).any(|p| p.extension().is_some_and(|e| e == "so"));
    assert!(!built, "nothing is built there");
    assert_eq!(mode(&shared.join("cache")), 0o700);
}

fn walk(dir: &Path) -> impl Iterator<Item = PathBuf> {
    let mut stack = vec![dir.to_path_buf()];
    let mut out = Vec::new();
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p.clone());
            }
            out.push(p);
        }
    }
    out.into_iter()
}

/// The compiled observer's cache under umask 000 (issue 62, item 11): a cache of this user's
/// whose library and lock are open to all, as an older memtrack built them under umask 000, is
/// made private again (its folder is 0700: nobody else could have reached the files), and the
/// compiled observer is used, on that run and after.
#[test]
fn a_cache_of_this_users_built_under_umask_000_is_repaired_and_used() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    // a copy of the cache the test run built (scripts/test.sh builds it first); without one,
    // the run below builds it, under umask 000 too
    let own = std::env::var_os("MEMTRACK_OBSERVER_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/memtrack/observer")
        });
    std::fs::create_dir(&cache).unwrap();
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o700)).unwrap();
    if own.is_dir() {
        let copied = Command::new("cp")
            .arg("-a")
            .arg(own.join("."))
            .arg(&cache)
            .status()
            .unwrap();
        assert!(copied.success());
    }
    for p in walk(&cache) {
        match p.file_name().and_then(|n| n.to_str()) {
            Some("memtrack_observer.so") => {
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o777)).unwrap()
            }
            Some("lock") => {
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o666)).unwrap()
            }
            _ => {}
        }
    }
    for run in 0..2 {
        let mut cmd = memtrack();
        cmd.current_dir(dir.path())
            .env("MEMTRACK_OBSERVER_CACHE", &cache)
            .args(["record", "--observer", "compiled", "-o", "run.pkl", "--"])
            .arg(&py)
            .arg(script("full_disk_loop.py"))
            .arg("2");
        // SAFETY: umask(2) in the child between fork and exec, nothing else
        unsafe {
            cmd.pre_exec(|| {
                libc::umask(0);
                Ok(())
            });
        }
        let o = cmd.output().unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "run {run}: {stderr}");
        assert!(!stderr.contains("cannot be used"), "run {run}: {stderr}");
        let j = export(&dir.path().join("run.pkl"));
        assert_eq!(j["memtrack"]["observer"], "compiled", "run {run}");
        let files: Vec<PathBuf> = walk(&cache).filter(|p| p.is_file()).collect();
        assert!(
            files.iter().any(|p| p.ends_with("memtrack_observer.so")),
            "{files:?}"
        );
        for p in files {
            let want = if p.extension().is_some_and(|e| e == "so") {
                0o700
            } else {
                0o600
            };
            assert_eq!(mode(&p), want, "run {run}: {}", p.display());
        }
    }
}
