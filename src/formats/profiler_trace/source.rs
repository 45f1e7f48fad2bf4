//! The bytes of a trace, chunk by chunk: read straight from the input, or inflated from gzip
//! on a second thread (the `.pt.trace.json.gz` that `tensorboard_trace_handler` writes), so
//! inflating and parsing run on two cores. Neither holds the whole file.

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

/// The input's bytes, from wherever they come (a file, a pipe).
pub type Bytes = Box<dyn Read + Send>;

pub enum Source {
    Plain {
        file: Bytes,
        read: u64,
        /// Bytes a chunk holds (`CHUNK`; tests cut the text finer).
        chunk: usize,
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
    file: Bytes,
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
    /// `file` from its start; `gzip` from its first bytes.
    pub fn new(file: Bytes, gzip: bool) -> Source {
        if !gzip {
            return Source::Plain {
                file,
                read: 0,
                chunk: CHUNK,
            };
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

    /// Plain text read `chunk` bytes at a time (tests and the fuzz target put values across
    /// chunk ends).
    pub fn plain_in_chunks(file: Bytes, chunk: usize) -> Source {
        Source::Plain {
            file,
            read: 0,
            chunk,
        }
    }

    /// Replaces `buf` with the next chunk; empty at the end.
    pub fn next_chunk(&mut self, buf: &mut Vec<u8>) -> io::Result<()> {
        match self {
            Source::Plain { file, read, chunk } => {
                buf.resize(*chunk, 0);
                let mut filled = 0;
                // a pipe gives what it has: fill the chunk, so chunks stay large
                while filled < *chunk {
                    match file.read(&mut buf[filled..]) {
                        Ok(0) => break,
                        Ok(n) => filled += n,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => {
                            buf.clear();
                            return Err(e);
                        }
                    }
                }
                buf.truncate(filled);
                *read += filled as u64;
                Ok(())
            }
            Source::Gzip { chunks, .. } => match chunks.recv() {
                Ok(Ok(chunk)) => {
                    *buf = chunk;
                    Ok(())
                }
                Ok(Err(e)) => Err(e),
                Err(_) => {
                    buf.clear(); // the thread ended after the last chunk
                    Ok(())
                }
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
