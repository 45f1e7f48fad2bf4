//! The attach command's end of the agent's socket: one JSON object a line.

use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

pub enum Poll {
    Nothing,
    Message(serde_json::Value),
    Closed,
}

/// The agent's socket: one JSON object a line, each at most 64 KiB.
pub struct Connection {
    stream: UnixStream,
    buf: Vec<u8>,
    closed: bool,
}

impl Connection {
    /// The process at the other end: the one attached to (`pids` of one), or one of the
    /// ranks (0 where the kernel cannot say).
    pub fn process(&self, pids: &[u32]) -> u32 {
        match pids {
            [only] => *only,
            _ => self.peer_pid().unwrap_or(0),
        }
    }

    pub fn new(stream: UnixStream) -> Connection {
        let _ = stream.set_nonblocking(false);
        Connection {
            stream,
            buf: Vec::new(),
            closed: false,
        }
    }

    pub fn poll(&mut self, wait: Duration) -> Poll {
        if let Some(m) = self.take_line() {
            return m;
        }
        if self.closed {
            return Poll::Closed;
        }
        let _ = self.stream.set_read_timeout(Some(wait));
        let mut chunk = [0u8; 4096];
        match self.stream.read(&mut chunk) {
            Ok(0) => self.closed = true,
            Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            Err(_) => self.closed = true,
        }
        if self.buf.len() > 1 << 16 {
            self.closed = true; // not what the agent sends
        }
        self.take_line().unwrap_or(if self.closed {
            Poll::Closed
        } else {
            Poll::Nothing
        })
    }

    fn take_line(&mut self) -> Option<Poll> {
        let end = self.buf.iter().position(|&b| b == b'\n')?;
        let line: Vec<u8> = self.buf.drain(..=end).collect();
        Some(match serde_json::from_slice(&line) {
            Ok(v) => Poll::Message(v),
            Err(_) => Poll::Nothing,
        })
    }

    /// The next message within `limit`, None at the end or when `give_up()` says so.
    pub fn next_message(
        &mut self,
        limit: Duration,
        give_up: impl Fn() -> bool,
    ) -> Option<serde_json::Value> {
        let start = Instant::now();
        while start.elapsed() < limit {
            match self.poll(Duration::from_millis(50)) {
                Poll::Message(m) => return Some(m),
                Poll::Closed => return None,
                Poll::Nothing => {}
            }
            if give_up() {
                return None;
            }
        }
        None
    }

    /// The agent's answer to the attach (`started`, `dumped` or `error`) from process `pid`,
    /// within `limit` and while it lives. A note that it waits first (for `import torch` to
    /// end) is said on stderr, and the wait goes on.
    pub fn first_answer(&mut self, pid: u32, limit: Duration) -> Option<serde_json::Value> {
        let start = Instant::now();
        loop {
            let left = limit.saturating_sub(start.elapsed());
            let m = self.next_message(left, || !super::target::alive(pid))?;
            match m["waiting"].as_str() {
                Some(what) => {
                    eprintln!("memtrack: process {pid}: {what}; attach goes on when it is done")
                }
                None => return Some(m),
            }
        }
    }

    pub fn say_stop(&mut self) {
        let _ = self.stream.write_all(b"stop\n");
    }

    /// The process at the other end, as the kernel tells it (SO_PEERCRED).
    pub fn peer_pid(&self) -> Option<u32> {
        let mut cred = libc::ucred {
            pid: 0,
            uid: 0,
            gid: 0,
        };
        let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes into `cred`, a ucred of that size
        let rc = unsafe {
            libc::getsockopt(
                self.stream.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERCRED,
                (&mut cred as *mut libc::ucred).cast(),
                &mut len,
            )
        };
        (rc == 0 && cred.pid > 0).then_some(cred.pid as u32)
    }
}
