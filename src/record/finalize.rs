//! The journal → stats files: one per recorded process, named by rank when there are several.

use std::collections::{HashMap, HashSet};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;

use super::journal::Journal;
use super::replay::{replay, replay_spool, Note, Session};
use super::sampler::{series_for, Samples};
use crate::error::Result;
use crate::formats::tracker;
use crate::model::{format_bytes, thousands, Units};

pub struct Report {
    /// Processes that recorded something (whether or not their file could be written).
    pub recorded: usize,
    pub written: Vec<PathBuf>,
    /// The file of the process `record` started (its last image), if it recorded and was
    /// written; the others are of processes it started in turn.
    pub program: Option<PathBuf>,
    /// The backend of each file written.
    pub backends: Vec<String>,
    pub notes: Vec<Note>,
    /// Every journal file was decoded and written: the journal can go.
    pub complete: bool,
    /// A process could not go on recording (its spool could not be written): its file ends
    /// early, and `record` does not exit 0.
    pub stopped_early: bool,
}

impl Report {
    /// Why no stats file came out, for the user.
    pub fn nothing_recorded_reason(&self, program: &std::ffi::OsStr) -> String {
        if self.notes.contains(&Note::CudaUnavailable) {
            return "nothing recorded: --backend cuda, but the program's torch has no CUDA \
                    device; the program was stopped (exit 2)"
                .into();
        }
        if let Some(Note::TorchUnsupported { torch, supported }) = self
            .notes
            .iter()
            .find(|n| matches!(n, Note::TorchUnsupported { .. }))
        {
            return format!(
                "nothing recorded: the program's torch is {torch}, and memtrack records torch \
                 {supported}; the program was stopped (exit 2)"
            );
        }
        if let Some(Note::NoTorch { python }) = self
            .notes
            .iter()
            .find(|n| matches!(n, Note::NoTorch { .. }))
        {
            return format!(
                "nothing recorded: {python} cannot import torch. Install PyTorch for that \
                 interpreter, or run the program with the Python that has it"
            );
        }
        if self
            .notes
            .iter()
            .any(|n| matches!(n, Note::TorchNotImported { .. }))
        {
            return "nothing recorded: the program never imported torch".into();
        }
        format!(
            "nothing recorded: no Python process of `{}` connected. memtrack records Python \
             programs that import torch; the agent comes in through PYTHONPATH and \
             sitecustomize, which `python -E`, `-I` and `-S` switch off",
            crate::quote::quote(program)
        )
    }
}

pub fn finalize(
    journal: &Journal,
    output: &Path,
    child_pid: u32,
    status: Option<ExitStatus>,
    samples: Option<&Samples>,
    device_model: Option<&dyn super::replay::DeviceModel>,
) -> Result<Report> {
    let contents = journal.contents();
    let mut complete = true;
    let mut stopped_early = false;
    let mut sessions: Vec<Session> = Vec::new();
    let mut notes = Vec::new();
    // the connections: why a process did not record (the records are in the spools)
    for (f, bytes) in &contents.connections {
        let bytes = match bytes {
            Ok(b) => b,
            Err(e) => {
                eprintln!("memtrack: {}: {e}", crate::quote::path(f));
                complete = false;
                continue;
            }
        };
        let s = replay(bytes);
        if let Some(n) = &s.note {
            notes.push(n.clone());
        }
        // what an agent could only say on its socket: its spool failed, recording stopped
        for e in s.stats.record.iter().flat_map(|r| &r.agent_errors) {
            eprintln!("memtrack: a process stopped recording early: {e}");
            stopped_early = true;
        }
        if s.recorded {
            sessions.push(s);
        }
    }
    for spool in contents.spools {
        let first = spool.segments.first().map(|(f, _)| f.clone());
        let mut bytes = Vec::with_capacity(spool.segments.len());
        for (f, b) in spool.segments {
            match b {
                Ok(b) => bytes.push(b),
                Err(e) => {
                    eprintln!("memtrack: {}: {e}", crate::quote::path(&f));
                    complete = false;
                }
            }
        }
        let mut s = replay_spool(&bytes);
        s.image = spool.image;
        if let Some(d) = &s.damage {
            let first = first.as_deref().unwrap_or(journal.path());
            eprintln!("memtrack: {}: damaged: {d}", crate::quote::path(first));
            complete = false;
        }
        if s.recorded {
            sessions.push(s);
        }
    }
    // a process that `exec`ed ended there; its last image is the one that exited
    let last_image: HashMap<Option<i64>, u32> = sessions.iter().fold(HashMap::new(), |mut m, s| {
        let e = m.entry(s.pid).or_insert(0);
        *e = (*e).max(s.image);
        m
    });
    for s in &mut sessions {
        if let (Some(samples), Some(pid), Some(r)) = (samples, s.pid, s.stats.record.as_mut()) {
            r.device_memory = series_for(samples, pid, &s.time_marks);
        }
        if s.image < last_image[&s.pid] {
            if let Some(exit) = s.stats.record.as_mut().and_then(|r| r.exit.as_mut()) {
                exit.ended = Some("exec".to_string());
            }
            continue;
        }
        if s.pid == Some(child_pid as i64) {
            if let (Some(st), Some(exit)) = (
                status,
                s.stats.record.as_mut().and_then(|r| r.exit.as_mut()),
            ) {
                exit.code = st.code().map(i64::from);
                exit.signal = st.signal().map(i64::from);
            }
        }
    }
    for s in &mut sessions {
        if let (Some(model), Some(log)) = (device_model, s.device_log.take()) {
            model.fill(&mut s.stats, &log);
        }
    }
    let paths = output_paths(output, &sessions, child_pid);
    let mut written = Vec::new();
    let mut program = None;
    let mut backends = Vec::new();
    for (s, p) in sessions.iter().zip(&paths) {
        match tracker::write(&s.stats, p) {
            Ok(()) => {
                eprintln!("memtrack: wrote {}", describe(p, s, sessions.len() > 1));
                if s.pid == Some(child_pid as i64) && s.image == last_image[&s.pid] {
                    program = Some(p.clone());
                }
                written.push(p.clone());
                backends.push(
                    s.stats
                        .record
                        .as_ref()
                        .map_or_else(String::new, |r| r.backend.clone()),
                );
            }
            Err(e) => {
                eprintln!("memtrack: {e}");
                complete = false;
            }
        }
    }
    Ok(Report {
        recorded: sessions.len(),
        written,
        program,
        backends,
        notes,
        complete,
        stopped_early,
    })
}

/// One line per file written; with several processes, each says which command it recorded
/// (the names alone do not tell a shell script's two Python runs apart).
fn describe(p: &Path, s: &Session, several: bool) -> String {
    let t = &s.stats;
    let r = t.record.as_ref();
    let peak = t
        .allocated
        .iter()
        .copied()
        .filter(|v| !v.is_nan())
        .fold(0.0, f64::max);
    let iterations = r.map_or(0, crate::analysis::threads::iteration_count);
    let mut line = format!(
        "{}: {} ops, {} iteration{}, peak allocated {} ({})",
        crate::quote::path(p),
        thousands(t.op_count()),
        iterations,
        if iterations == 1 { "" } else { "s" },
        format_bytes(peak, Units::Auto),
        r.map_or("?", |r| r.backend.as_str()),
    );
    if let Some(e) = r.and_then(|r| r.exit.as_ref()) {
        match (e.signal, e.ended.as_deref()) {
            // Python ends an uncaught KeyboardInterrupt by killing itself with SIGINT, so
            // the status shows the signal; the agent saw the exception
            (Some(sig), Some("exception")) if sig == i64::from(libc::SIGINT) => {
                line.push_str("; interrupted (KeyboardInterrupt)")
            }
            (Some(sig), _) => line.push_str(&format!("; killed by signal {sig}")),
            (None, Some("exception")) => line.push_str("; the program raised"),
            // it exited (the code is known) but its last records never came
            (None, Some("disconnected")) if e.code.is_some() => {
                line.push_str("; the file ends before the process did")
            }
            (None, Some("disconnected")) => line.push_str("; the process vanished"),
            (None, Some("exec")) => line.push_str("; then the process exec'd a new image"),
            _ => {}
        }
        if e.oom {
            line.push_str(", out of memory");
        }
    }
    if let Some(r) = r.filter(|r| several && !r.argv.is_empty()) {
        line.push_str(&format!("; {}", command_line(&r.argv)));
    }
    line
}

/// A process's command line, shortened to what fits on a line: the interpreter and a script
/// by their file names (`python train.py --lr 3`).
fn command_line(argv: &[String]) -> String {
    const MAX: usize = 100;
    let short = |(i, a): (usize, &String)| {
        let path = Path::new(a);
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        match name {
            Some(n) if i == 0 || (a.ends_with(".py") && path.is_absolute()) => n,
            _ => a.clone(),
        }
    };
    let whole = argv
        .iter()
        .enumerate()
        .map(short)
        .collect::<Vec<_>>()
        .join(" ");
    match whole.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", &whole[..cut]),
        None => whole,
    }
}

/// How the files of a run are named (docs/record.md, "Several processes"):
/// - one recorded process (not one rank of a larger job): the output as given;
/// - torchrun ranks: `run.rank0.pkl`, … (a rank seen twice, as after an elastic restart,
///   gets `.2`, `.3`, …);
/// - otherwise the program's own process (the child memtrack started) writes the output as
///   given, `multiprocessing` workers it spawned (DataLoader's `spawn` workers)
///   `run.worker-PID.pkl`, and any other Python process `run.pid<PID>.pkl`: a shell script
///   that runs Python twice gets two `pid` files, as neither is the program memtrack started.
pub fn output_paths(base: &Path, sessions: &[Session], child_pid: u32) -> Vec<PathBuf> {
    if sessions.len() == 1 && sessions[0].world_size.unwrap_or(1) <= 1 {
        return vec![base.to_path_buf()];
    }
    let main = program_process(sessions, child_pid);
    let ranked = sessions.iter().any(|s| s.rank.is_some());
    let stem = base
        .file_stem()
        .map_or_else(|| "memtrack".into(), |s| s.to_string_lossy().into_owned());
    let ext = base
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
        .unwrap_or_default();
    let mut used = HashSet::new();
    sessions
        .iter()
        .enumerate()
        .map(|(i, s)| {
            if !ranked && Some(i) == main {
                return base.to_path_buf();
            }
            let tag = match (s.rank, s.pid) {
                // the image a process `exec`ed into: the name its first image has, `.execN`
                _ if s.image > 0 => {
                    let first = sessions
                        .iter()
                        .position(|o| o.pid == s.pid && o.image == 0 && o.rank == s.rank);
                    let of = match first {
                        Some(f) if !ranked && Some(f) == main => String::new(),
                        _ => match (s.rank, s.pid) {
                            (Some(r), _) => format!("rank{r}."),
                            (None, Some(pid)) => format!("pid{pid}."),
                            (None, None) => format!("process{i}."),
                        },
                    };
                    format!("{of}exec{}", s.image)
                }
                (Some(r), _) => format!("rank{r}"),
                (None, Some(pid)) if !ranked && is_multiprocessing_worker(s) => {
                    format!("worker-{pid}")
                }
                (None, Some(pid)) => format!("pid{pid}"),
                (None, None) => format!("process{i}"),
            };
            let mut name = tag.clone();
            let mut k = 1;
            while !used.insert(name.clone()) {
                k += 1;
                name = format!("{tag}.{k}");
            }
            base.with_file_name(format!("{stem}.{name}{ext}"))
        })
        .collect()
}

/// The program's own process: the child memtrack started when it recorded. When the child is
/// not known (`--recover`), the one process that no other recorded process started and that
/// is not a multiprocessing worker, if there is exactly one; a shell script that ran Python
/// twice has no such process.
fn program_process(sessions: &[Session], child_pid: u32) -> Option<usize> {
    if child_pid != 0 {
        return sessions
            .iter()
            .position(|s| s.pid == Some(i64::from(child_pid)));
    }
    let pids: HashSet<i64> = sessions.iter().filter_map(|s| s.pid).collect();
    let mut roots = sessions.iter().enumerate().filter(|(_, s)| {
        !is_multiprocessing_worker(s) && !s.ppid.is_some_and(|p| pids.contains(&p))
    });
    match (roots.next(), roots.next()) {
        (Some((i, _)), None) => Some(i),
        _ => None,
    }
}

/// A process `multiprocessing` started with `spawn` or `forkserver`: its command line is the
/// one `multiprocessing.spawn.get_command_line` builds (`-c 'from multiprocessing.spawn import
/// spawn_main; …' --multiprocessing-fork`; forkserver's is `from multiprocessing.forkserver
/// import main; …`).
fn is_multiprocessing_worker(s: &Session) -> bool {
    s.stats.record.as_ref().is_some_and(|r| {
        r.argv.iter().any(|a| {
            a == "--multiprocessing-fork"
                || a.starts_with("from multiprocessing.spawn import")
                || a.starts_with("from multiprocessing.forkserver import")
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{RecordInfo, TrackerStats};

    fn session(rank: Option<i64>, world: Option<i64>, pid: i64) -> Session {
        Session {
            recorded: true,
            pid: Some(pid),
            rank,
            world_size: world,
            ppid: None,
            note: None,
            said_bye: true,
            stats: TrackerStats::default(),
            time_marks: Vec::new(),
            damage: None,
            image: 0,
            device_log: None,
        }
    }

    /// A process `multiprocessing` spawned, by its command line.
    fn spawned(mut s: Session) -> Session {
        s.stats.record = Some(RecordInfo {
            argv: [
                "python",
                "-c",
                "from multiprocessing.spawn import spawn_main; spawn_main(pipe_handle=5)",
                "--multiprocessing-fork",
            ]
            .map(String::from)
            .to_vec(),
            ..RecordInfo::default()
        });
        s
    }

    #[test]
    fn files_are_named_by_rank_when_there_are_several() {
        let base = Path::new("out/run.pkl");
        assert_eq!(
            output_paths(base, &[session(None, None, 7)], 7),
            vec![PathBuf::from("out/run.pkl")]
        );
        // a spawned worker does not take the program's name, also when the program is
        // known only as the worker's parent (--recover)
        let mut worker = spawned(session(None, None, 5));
        worker.ppid = Some(7);
        let mut program = session(None, None, 7);
        program.ppid = Some(1);
        assert_eq!(
            output_paths(base, &[worker, program], 0),
            vec![
                PathBuf::from("out/run.worker-5.pkl"),
                PathBuf::from("out/run.pkl")
            ]
        );
        assert_eq!(
            output_paths(
                base,
                &[spawned(session(None, None, 9)), session(None, None, 7)],
                7
            ),
            vec![
                PathBuf::from("out/run.worker-9.pkl"),
                PathBuf::from("out/run.pkl")
            ]
        );
        // an unrelated Python subprocess of the program is not a worker
        assert_eq!(
            output_paths(base, &[session(None, None, 7), session(None, None, 9)], 7),
            vec![
                PathBuf::from("out/run.pkl"),
                PathBuf::from("out/run.pid9.pkl")
            ]
        );
        // a shell script that ran Python twice: neither is the program memtrack started,
        // with the child known or not
        for child in [3, 0] {
            assert_eq!(
                output_paths(
                    base,
                    &[session(None, None, 8), session(None, None, 9)],
                    child
                ),
                vec![
                    PathBuf::from("out/run.pid8.pkl"),
                    PathBuf::from("out/run.pid9.pkl")
                ]
            );
        }
        let names = output_paths(
            base,
            &[
                session(Some(0), Some(2), 10),
                session(Some(1), Some(2), 11),
                session(Some(1), Some(2), 12),
                session(None, None, 13),
            ],
            10,
        );
        assert_eq!(
            names,
            [
                "run.rank0.pkl",
                "run.rank1.pkl",
                "run.rank1.2.pkl",
                "run.pid13.pkl"
            ]
            .iter()
            .map(|n| Path::new("out").join(n))
            .collect::<Vec<_>>()
        );
        // a process that exec'd: each later image is named after the first, `.execN`
        let mut again = session(None, None, 7);
        again.image = 1;
        let mut ranked_again = session(Some(1), Some(2), 11);
        ranked_again.image = 2;
        assert_eq!(
            output_paths(base, &[session(None, None, 7), again], 7),
            vec![
                PathBuf::from("out/run.pkl"),
                PathBuf::from("out/run.exec1.pkl")
            ]
        );
        assert_eq!(
            output_paths(base, &[session(Some(1), Some(2), 11), ranked_again], 11),
            vec![
                PathBuf::from("out/run.rank1.pkl"),
                PathBuf::from("out/run.rank1.exec2.pkl")
            ]
        );
        // one rank of a larger job still says which rank it is
        assert_eq!(
            output_paths(base, &[session(Some(3), Some(4), 1)], 1),
            vec![PathBuf::from("out/run.rank3.pkl")]
        );
    }
}
