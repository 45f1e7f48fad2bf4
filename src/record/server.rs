//! The Unix socket every recorded process connects to: each connection's bytes are appended
//! to its own file of the journal as they arrive, so whatever a process sent before dying is
//! on disk; `finalize` decodes the files at the end. A connection is read to its end whatever
//! happens to its file (a full disk: the rest is kept in memory), so no process ever blocks
//! on its socket.

use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::journal::{connection_name, Journal};

pub struct Server {
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

struct Shared {
    journal: Arc<Journal>,
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
    pub fn start(socket: &Path, journal: Arc<Journal>) -> std::io::Result<Server> {
        let listener = UnixListener::bind(socket)?;
        // its folder is private already; the socket is too, whatever the umask
        std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))?;
        listener.set_nonblocking(true)?;
        let shared = Arc::new(Shared {
            journal,
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
    let name = connection_name(n);
    let s = shared.clone();
    let h = std::thread::Builder::new()
        .name(format!("memtrack-conn{n}"))
        .spawn(move || {
            if let Err(e) = read_into(stream, &name, &s) {
                let path = s.journal.path().join(&name);
                s.errors
                    .lock()
                    .unwrap()
                    .push(format!("{}: {e}", crate::quote::path(&path)));
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

/// Copy one connection into its journal file; once the file cannot take more (a full disk, a
/// removed journal is no obstacle: the file stays open), the rest goes to memory and the
/// first error is reported.
fn read_into(mut stream: UnixStream, name: &str, shared: &Shared) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    let mut failure = None;
    let mut file = shared.journal.create_file(name).map_err(|e| {
        failure = Some(e);
    });
    let mut written = 0u64;
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == ErrorKind::ConnectionReset => break,
            Err(e) => return Err(e),
        };
        let ms = shared.start.elapsed().as_millis() as u64;
        shared.last_activity_ms.store(ms, Ordering::SeqCst);
        let mut bytes = &buf[..n];
        if let Ok(f) = &mut file {
            // straight to the file: the page cache survives our death and the child's
            while !bytes.is_empty() {
                match f.write(bytes) {
                    Ok(0) => {
                        failure.get_or_insert(std::io::Error::from(ErrorKind::WriteZero));
                        break;
                    }
                    Ok(k) => {
                        written += k as u64;
                        bytes = &bytes[k..];
                    }
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => {
                        failure.get_or_insert(e);
                        break;
                    }
                }
            }
            if bytes.is_empty() {
                continue;
            }
            file = Err(());
        }
        shared.journal.spill(name, written, bytes);
    }
    match failure {
        Some(e) => Err(std::io::Error::new(
            e.kind(),
            format!("{e}; what followed was kept in memory"),
        )),
        None => Ok(()),
    }
}
