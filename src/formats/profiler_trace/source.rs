//! The bytes of a trace file, chunk by chunk: read straight from a plain file, or inflated
//! from gzip on a second thread (the `.pt.trace.json.gz` that `tensorboard_trace_handler`
//! writes), so inflating and parsing run on two cores. Neither holds the whole file.

use std::fs::File;
use std::io::{self, Read};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;
use std::thread::JoinHandle;

/// How much one read asks for.
pub const CHUNK: usize = 4 << 20;

/// The gzip magic: a file that starts so is inflated.
pub fn is_gzip(head: &[u8]) -> bool {
    head.starts_with(&[0x1f, 0x8b])
}

pub enum Source {
    Plain {
        file: File,
        read: u64,
    },
    Gzip {
        chunks: Receiver<io::Result<Vec<u8>>>,
        thread: Option<JoinHandle<()>>,
        /// Compressed bytes the inflating thread has read (for progress).
        read: Arc<AtomicU64>,
    },
}

/// Counts what the decoder reads from the file.
struct Counting {
    file: File,
    read: Arc<AtomicU64>,
}

impl Read for Counting {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read(buf)?;
        self.read.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

impl Source {
    /// `file` positioned at its start; `gzip` from its first bytes.
    pub fn new(file: File, gzip: bool) -> Source {
        if !gzip {
            return Source::Plain { file, read: 0 };
        }
        let read = Arc::new(AtomicU64::new(0));
        // two chunks in flight: the parser never waits on inflating a chunk it could have had,
        // and no more than ~12 MB of inflated text exists at once
        let (tx, rx) = sync_channel::<io::Result<Vec<u8>>>(2);
        let counting = Counting {
            file,
            read: read.clone(),
        };
        let thread = std::thread::Builder::new()
            .name("memtrack-inflate".into())
            .spawn(move || {
                // concatenated members too, as gzip(1) reads them
                let mut z = flate2::read::MultiGzDecoder::new(io::BufReader::with_capacity(
                    1 << 20,
                    counting,
                ));
                loop {
                    let mut buf = vec![0u8; CHUNK];
                    let mut filled = 0;
                    let result = loop {
                        match z.read(&mut buf[filled..]) {
                            Ok(0) => break Ok(()),
                            Ok(n) => {
                                filled += n;
                                if filled == buf.len() {
                                    break Ok(());
                                }
                            }
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                            Err(e) => break Err(e),
                        }
                    };
                    buf.truncate(filled);
                    let last = filled == 0 || result.is_err();
                    let message = match result {
                        Ok(()) => Ok(buf),
                        Err(e) => Err(e),
                    };
                    if tx.send(message).is_err() || last {
                        return;
                    }
                }
            })
            .expect("spawning a thread");
        Source::Gzip {
            chunks: rx,
            thread: Some(thread),
            read,
        }
    }

    /// Appends the next chunk to `buf`; Ok(0) at the end.
    pub fn read_into(&mut self, buf: &mut Vec<u8>) -> io::Result<usize> {
        match self {
            Source::Plain { file, read } => {
                let start = buf.len();
                buf.resize(start + CHUNK, 0);
                let n = loop {
                    match file.read(&mut buf[start..]) {
                        Ok(n) => break n,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => {
                            buf.truncate(start);
                            return Err(e);
                        }
                    }
                };
                buf.truncate(start + n);
                *read += n as u64;
                Ok(n)
            }
            Source::Gzip { chunks, .. } => match chunks.recv() {
                Ok(Ok(chunk)) => {
                    buf.extend_from_slice(&chunk);
                    Ok(chunk.len())
                }
                Ok(Err(e)) => Err(e),
                Err(_) => Ok(0), // the thread ended after the last chunk
            },
        }
    }

    /// Bytes of the file (compressed, for gzip) read so far.
    pub fn file_bytes_read(&self) -> u64 {
        match self {
            Source::Plain { read, .. } => *read,
            Source::Gzip { read, .. } => read.load(Ordering::Relaxed),
        }
    }
}

impl Drop for Source {
    fn drop(&mut self) {
        if let Source::Gzip { chunks, thread, .. } = self {
            // the receiver goes first, so a thread blocked on a full channel ends
            let (_, dead) = sync_channel(0);
            drop(std::mem::replace(chunks, dead));
            if let Some(t) = thread.take() {
                let _ = t.join();
            }
        }
    }
}
