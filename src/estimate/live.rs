//! The allocator model beside the running program: what `torch.cuda.memory_allocated()`,
//! `max_memory_reserved()`, `mem_get_info()` and `memory_stats()` answer under `estimate`.
//!
//! The agent (fake_memory.py) connects to a Unix socket in a private folder
//! (MEMTRACK_ESTIMATE_MODEL) and sends frames of a kind byte and a little-endian u32 count:
//! - 0, n: the program's `PYTORCH_CUDA_ALLOC_CONF`, n bytes (first, once);
//! - 1, n: n storage events, each a key and a byte count (0: the storage died), two i64s;
//! - 2, 0: a question, answered with seven u64s: allocated, reserved, peak allocated and
//!   peak reserved since the last reset, allocation retries, out-of-memory errors, and the
//!   bytes the allocator may use (its limit now);
//! - 3, 0: reset the peaks;
//! - 4, 1: what the allocator may use shrinks by a u64 (NCCL's buffers of a process group
//!   that began to communicate).
//!
//! The events are the ones the file's series are replayed from, in the same order, through
//! the same model ([`ModelledDevice`]): what the program is told is what the file says.

use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::device_model::ModelledDevice;
use crate::analysis::caching_allocator::Settings;

/// Frames longer than this end the connection (the agent sends 32K events at a time).
const MAX_EVENTS: usize = 1 << 20;
const MAX_CONF: usize = 1 << 16;

/// The model's socket and the thread that serves it; stopped when dropped.
pub struct LiveModel {
    _dir: tempfile::TempDir,
    path: PathBuf,
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
}

impl LiveModel {
    /// Serve a device whose allocator may use `usable` bytes.
    pub fn start(usable: u64) -> std::io::Result<LiveModel> {
        let dir = crate::record::agent::private_dir("memtrack-model-")?;
        let path = dir.path().join("model");
        let listener = UnixListener::bind(&path)?;
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let acceptor = std::thread::Builder::new()
            .name("memtrack-model".into())
            .spawn(move || accept_loop(listener, usable, &s))?;
        Ok(LiveModel {
            _dir: dir,
            path,
            stop,
            acceptor: Some(acceptor),
        })
    }

    pub fn socket(&self) -> &Path {
        &self.path
    }
}

impl Drop for LiveModel {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
    }
}

fn accept_loop(listener: UnixListener, usable: u64, stop: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => {
                // one process asks; a connection that breaks the protocol is dropped
                let _ = std::thread::Builder::new()
                    .name("memtrack-model-conn".into())
                    .spawn(move || serve(stream, usable));
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

fn serve(mut stream: UnixStream, usable: u64) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    let mut device: Option<ModelledDevice> = None;
    let mut head = [0u8; 5];
    let mut buf = Vec::new();
    loop {
        match stream.read_exact(&mut head) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
        let n = u32::from_le_bytes(head[1..].try_into().unwrap()) as usize;
        let d =
            device.get_or_insert_with(|| ModelledDevice::new(Settings::default(), Some(usable)));
        match head[0] {
            0 if n <= MAX_CONF => {
                buf.resize(n, 0);
                stream.read_exact(&mut buf)?;
                let mut settings = Settings::default();
                if settings.apply_all(&String::from_utf8_lossy(&buf)).is_err() {
                    settings = Settings::default();
                }
                *d = ModelledDevice::new(settings, Some(usable));
            }
            1 if n <= MAX_EVENTS => {
                buf.resize(n * 16, 0);
                stream.read_exact(&mut buf)?;
                for e in buf.chunks_exact(16) {
                    let key = i64::from_le_bytes(e[..8].try_into().unwrap());
                    let bytes = i64::from_le_bytes(e[8..].try_into().unwrap());
                    d.event(key, bytes.max(0) as u64);
                }
            }
            2 => {
                let answer = [
                    d.allocated(),
                    d.reserved(),
                    d.peak_allocated_since_reset,
                    d.peak_reserved_since_reset,
                    d.retries(),
                    d.ooms,
                    d.limit().unwrap_or(usable),
                ];
                let bytes: Vec<u8> = answer.iter().flat_map(|v| v.to_le_bytes()).collect();
                stream.write_all(&bytes)?;
            }
            3 => d.reset_peaks(),
            4 if n == 1 => {
                let mut b = [0u8; 8];
                stream.read_exact(&mut b)?;
                d.take_from_limit(u64::from_le_bytes(b));
            }
            _ => return Ok(()),
        }
    }
}
