//! The Unix socket every recorded process connects to, and the journal: each connection's
//! bytes are appended to its own file as they arrive, so whatever a process sent before dying
//! is on disk; `finalize` decodes the files at the end.

use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub struct Server {
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

struct Shared {
    journal: PathBuf,
    start: Instant,
    stop: AtomicBool,
    connections: AtomicUsize,
    open: AtomicUsize,
    /// Milliseconds since `start` of the last byte received.
    last_activity_ms: AtomicU64,
    readers: Mutex<Vec<JoinHandle<()>>>,
    errors: Mutex<Vec<String>>,
}

impl Server {
    pub fn start(socket: &Path, journal: &Path) -> std::io::Result<Server> {
        let listener = UnixListener::bind(socket)?;
        listener.set_nonblocking(true)?;
        let shared = Arc::new(Shared {
            journal: journal.to_path_buf(),
            start: Instant::now(),
            stop: AtomicBool::new(false),
            connections: AtomicUsize::new(0),
            open: AtomicUsize::new(0),
            last_activity_ms: AtomicU64::new(0),
            readers: Mutex::new(Vec::new()),
            errors: Mutex::new(Vec::new()),
        });
        let s = shared.clone();
        let acceptor = std::thread::Builder::new()
            .name("memtrack-accept".into())
            .spawn(move || accept_loop(listener, s))?;
        Ok(Server {
            shared,
            acceptor: Some(acceptor),
        })
    }

    /// Stop accepting (after taking the connections already queued), then wait until every
    /// connection has closed or none has sent anything for `quiet`, or `give_up()` says so.
    pub fn drain(&mut self, quiet: Duration, give_up: impl Fn() -> bool) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
        loop {
            if self.shared.open.load(Ordering::SeqCst) == 0 || give_up() {
                break;
            }
            let last = Duration::from_millis(self.shared.last_activity_ms.load(Ordering::SeqCst));
            if self.shared.start.elapsed().saturating_sub(last) > quiet {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let done: Vec<JoinHandle<()>> = {
            let mut r = self.shared.readers.lock().unwrap();
            let (finished, running): (Vec<_>, Vec<_>) = r.drain(..).partition(|h| h.is_finished());
            *r = running;
            finished
        };
        for h in done {
            let _ = h.join();
        }
    }

    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::SeqCst)
    }

    pub fn errors(&self) -> Vec<String> {
        self.shared.errors.lock().unwrap().clone()
    }
}

fn accept_loop(listener: UnixListener, shared: Arc<Shared>) {
    loop {
        match listener.accept() {
            Ok((stream, _)) => take(stream, &shared),
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if shared.stop.load(Ordering::SeqCst) {
                    return; // the queue is empty and the child is gone
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => {
                shared.errors.lock().unwrap().push(format!("accept: {e}"));
                return;
            }
        }
    }
}

fn take(stream: UnixStream, shared: &Arc<Shared>) {
    let n = shared.connections.fetch_add(1, Ordering::SeqCst);
    shared.open.fetch_add(1, Ordering::SeqCst);
    let path = journal_file(&shared.journal, n);
    let s = shared.clone();
    let h = std::thread::Builder::new()
        .name(format!("memtrack-conn{n}"))
        .spawn(move || {
            if let Err(e) = read_into(stream, &path, &s) {
                s.errors
                    .lock()
                    .unwrap()
                    .push(format!("{}: {e}", path.display()));
            }
            s.open.fetch_sub(1, Ordering::SeqCst);
        });
    match h {
        Ok(h) => shared.readers.lock().unwrap().push(h),
        Err(e) => {
            shared.open.fetch_sub(1, Ordering::SeqCst);
            shared.errors.lock().unwrap().push(format!("thread: {e}"));
        }
    }
}

fn read_into(mut stream: UnixStream, path: &Path, shared: &Shared) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    let mut f = File::create(path)?;
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => {
                // straight to the file: the page cache survives our death and the child's
                f.write_all(&buf[..n])?;
                let ms = shared.start.elapsed().as_millis() as u64;
                shared.last_activity_ms.store(ms, Ordering::SeqCst);
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return Ok(()),
            Err(e) => return Err(e),
        }
    }
}

pub fn journal_file(dir: &Path, n: usize) -> PathBuf {
    dir.join(format!("conn{n:04}.bin"))
}

/// One process image's spool: the segment files of `spool-<pid>-<segment>.bin`, or of
/// `spool-<pid>.<image>-<segment>.bin` for the image a process became by `exec` (the
/// agent numbers them: 1, 2, … after the first).
pub struct Spool {
    pub pid: u32,
    pub image: u32,
    pub segments: Vec<PathBuf>,
}

/// The agents' spools in a journal folder, per process image (by pid, then image), each
/// with its segment files in order.
pub fn spool_files(dir: &Path) -> std::io::Result<Vec<Spool>> {
    let mut found: Vec<(u32, u32, u32, PathBuf)> = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        let Some(name) = p.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let Some(rest) = name
            .strip_prefix("spool-")
            .and_then(|r| r.strip_suffix(".bin"))
        else {
            continue;
        };
        let Some((process, seg)) = rest.split_once('-') else {
            continue;
        };
        let (pid, image) = process.split_once('.').unwrap_or((process, "0"));
        if let (Ok(pid), Ok(image), Ok(seg)) = (pid.parse(), image.parse(), seg.parse()) {
            found.push((pid, image, seg, p));
        }
    }
    found.sort();
    let mut out: Vec<Spool> = Vec::new();
    for (pid, image, _, p) in found {
        match out.last_mut() {
            Some(s) if (s.pid, s.image) == (pid, image) => s.segments.push(p),
            _ => out.push(Spool {
                pid,
                image,
                segments: vec![p],
            }),
        }
    }
    Ok(out)
}

/// The journal files of a run, in connection order.
pub fn journal_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("conn") && n.ends_with(".bin"))
        })
        .collect();
    v.sort();
    Ok(v)
}
