//! Large output files written past the page cache. Gigabytes written the usual way are copied
//! into fresh page-cache pages, and on a VM whose free memory goes back to the host each fresh
//! page waits for the host: `export` of a 10 GB capture (6.4 GB of JSON) spent more than a
//! third of its CPU in that copy. So past its first [`DIRECT_FROM`] bytes a file goes to the
//! disk straight from a few reused buffers (`O_DIRECT`), written on a thread of their own while
//! the next is filled, where the file system is a local one known to take such writes (ext4,
//! XFS, btrfs). Smaller outputs, other file systems, and a file system that refuses the first
//! such write are written as before.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::Scope;

/// Bytes a write past the page cache: a multiple of every device's block size.
const BLOCK: usize = 8 << 20;

/// Bytes a write the usual way (as `BufWriter`'s): small outputs take no more memory than
/// before.
const SMALL: usize = 64 << 10;

/// What direct writes align their memory, offsets and lengths to (a page: every device's
/// logical block divides it).
const ALIGN: usize = 4096;

/// Bytes written the usual way before a file goes past the page cache: outputs this small gain
/// nothing from it.
pub const DIRECT_FROM: u64 = 64 << 20;

/// Buffers in flight: one being written while another is filled.
const IN_FLIGHT: usize = 2;

#[derive(Clone, Copy)]
#[repr(C, align(4096))]
struct Page([u8; ALIGN]);

/// Bytes aligned to a page, a whole number of pages.
struct Buffer(Vec<Page>);

impl Buffer {
    fn new(bytes: usize) -> Buffer {
        Buffer(vec![Page([0; ALIGN]); bytes / ALIGN])
    }

    fn bytes(&mut self) -> &mut [u8] {
        let len = self.0.len() * ALIGN;
        // SAFETY: the pages are `len` contiguous bytes the vector owns, any bit pattern is a
        // valid u8, and the borrow of `self` keeps them alive and unaliased
        unsafe { std::slice::from_raw_parts_mut(self.0.as_mut_ptr().cast::<u8>(), len) }
    }
}

/// A buffer to write and how many of its bytes.
type Job = (Buffer, usize);

/// The thread that writes the buffers, once the file writes past the page cache.
struct Writer {
    jobs: SyncSender<Job>,
    done: Receiver<io::Result<Buffer>>,
    in_flight: usize,
}

/// A `Write` to `file` that writes the usual way, [`SMALL`] bytes at a time, up to
/// [`DIRECT_FROM`] bytes, and past the page cache after, [`BLOCK`] bytes at a time, where it
/// can; [`finish`] writes the rest (the file is incomplete until then).
///
/// [`finish`]: DirectWrite::finish
pub struct DirectWrite<'scope, 'env> {
    file: &'env File,
    scope: &'scope Scope<'scope, 'env>,
    buffer: Buffer,
    filled: usize,
    /// Bytes handed on: written, or to the writer thread.
    handed: u64,
    writer: Option<Writer>,
    /// Whether going past the page cache was tried (once a file).
    tried: bool,
}

impl<'scope, 'env> DirectWrite<'scope, 'env> {
    /// Writes to `file` from its current position, which must be its start (a fresh file).
    pub fn new(file: &'env File, scope: &'scope Scope<'scope, 'env>) -> Self {
        DirectWrite {
            file,
            scope,
            buffer: Buffer::new(SMALL),
            filled: 0,
            handed: 0,
            writer: None,
            tried: false,
        }
    }

    /// Write what is buffered and wait for every write; the file then holds all that was
    /// written to it.
    pub fn finish(mut self) -> io::Result<()> {
        let len = self.filled;
        if self.writer.is_none() {
            return write_all(self.file, &self.buffer.bytes()[..len]);
        }
        // a direct write is of whole pages: the last one padded, and the file cut back after
        let padded = len.next_multiple_of(ALIGN);
        self.buffer.bytes()[len..padded].fill(0);
        self.hand_on(padded)?;
        let mut writer = self.writer.take().expect("checked above");
        while writer.in_flight > 0 {
            writer.in_flight -= 1;
            writer.done.recv().map_err(|_| gone())??;
        }
        drop(writer.jobs);
        self.file.set_len(self.handed - (padded - len) as u64)
    }

    /// Hand the buffer's first `len` bytes on: written here, or to the writer thread (which
    /// starts once [`DIRECT_FROM`] bytes are written, if the file can be written past the page
    /// cache: at a multiple of [`SMALL`], so at an aligned offset).
    fn hand_on(&mut self, len: usize) -> io::Result<()> {
        let Some(writer) = &mut self.writer else {
            write_all(self.file, &self.buffer.bytes()[..len])?;
            self.handed += len as u64;
            self.filled = 0;
            if !self.tried && self.handed >= DIRECT_FROM {
                self.tried = true;
                if takes_direct(self.file) && set_direct(self.file, true) {
                    self.writer = Some(self.start_writer());
                    self.buffer = Buffer::new(BLOCK);
                }
            }
            return Ok(());
        };
        // a new buffer until IN_FLIGHT are out, then the one written longest ago
        let next = if writer.in_flight < IN_FLIGHT {
            Buffer::new(BLOCK)
        } else {
            writer.in_flight -= 1;
            writer.done.recv().map_err(|_| gone())??
        };
        let full = std::mem::replace(&mut self.buffer, next);
        writer.jobs.send((full, len)).map_err(|_| gone())?;
        writer.in_flight += 1;
        self.handed += len as u64;
        self.filled = 0;
        Ok(())
    }

    fn start_writer(&self) -> Writer {
        let (jobs, todo) = sync_channel::<Job>(IN_FLIGHT);
        let (done_tx, done) = sync_channel(IN_FLIGHT);
        let file = self.file;
        self.scope.spawn(move || {
            let mut direct = true;
            for (mut buffer, len) in todo {
                let written = write_direct(file, &buffer.bytes()[..len], &mut direct);
                if done_tx.send(written.map(|()| buffer)).is_err() {
                    return;
                }
            }
        });
        Writer {
            jobs,
            done,
            in_flight: 0,
        }
    }
}

impl Write for DirectWrite<'_, '_> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let (at, buffer) = (self.filled, self.buffer.bytes());
        let n = data.len().min(buffer.len() - at);
        buffer[at..at + n].copy_from_slice(&data[..n]);
        self.filled += n;
        if self.filled == buffer.len() {
            self.hand_on(self.filled)?;
        }
        Ok(n)
    }

    /// Buffered bytes stay until the buffer is full or `finish` (a direct write is of whole
    /// pages, at an offset of whole pages).
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn gone() -> io::Error {
    io::Error::other("the thread writing the file stopped")
}

fn write_all(mut file: &File, bytes: &[u8]) -> io::Result<()> {
    file.write_all(bytes)
}

/// Write `bytes` past the page cache while `direct`; a file system that refuses (EINVAL)
/// has the rest written the usual way.
fn write_direct(mut file: &File, bytes: &[u8], direct: &mut bool) -> io::Result<()> {
    let mut at = 0;
    while at < bytes.len() {
        match file.write(&bytes[at..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => at += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if *direct && e.raw_os_error() == Some(libc::EINVAL) => {
                *direct = false;
                set_direct(file, false);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Whether `file` is on a local file system known to take direct writes (ext4, XFS, btrfs):
/// on a network one a direct write waits for the server, one at a time.
fn takes_direct(file: &File) -> bool {
    const EXT4: i64 = 0xEF53;
    const XFS: i64 = 0x5846_5342;
    const BTRFS: i64 = 0x9123_683E;
    // SAFETY: fstatfs on a descriptor `file` keeps open, into a zeroed statfs it may fill
    let f_type = unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        if libc::fstatfs(file.as_raw_fd(), &mut st) != 0 {
            return false;
        }
        st.f_type as i64
    };
    [EXT4, XFS, BTRFS].contains(&f_type)
}

/// Turn `O_DIRECT` on or off for `file`; whether it is now as asked.
fn set_direct(file: &File, on: bool) -> bool {
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on a descriptor `file` keeps open
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 {
            return false;
        }
        let flags = if on {
            flags | libc::O_DIRECT
        } else {
            flags & !libc::O_DIRECT
        };
        libc::fcntl(fd, libc::F_SETFL, flags) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes in writes of every size, past the point where the file goes past the page cache
    /// and ending inside a page, come back whole and no longer (the padding cut off), whether
    /// or not the file system took direct writes.
    #[test]
    fn a_file_past_the_page_cache_reads_back_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.bin");
        let file = File::create(&path).unwrap();
        let local = takes_direct(&file);
        let total = DIRECT_FROM as usize + 3 * BLOCK + 12345;
        let byte = |i: usize| (i.wrapping_mul(2654435761) >> 13) as u8;
        let expected: Vec<u8> = (0..total).map(byte).collect();
        std::thread::scope(|scope| {
            let mut w = DirectWrite::new(&file, scope);
            let mut at = 0;
            let mut size = 1;
            while at < total {
                let n = size.min(total - at);
                w.write_all(&expected[at..at + n]).unwrap();
                at += n;
                size = size * 7 % (3 * BLOCK) + 1;
            }
            assert_eq!(
                w.writer.is_some(),
                local,
                "past the page cache where it can be"
            );
            w.finish().unwrap();
        });
        if !local {
            eprintln!("(this file system takes no direct writes: written the usual way)");
        }
        let got = std::fs::read(&path).unwrap();
        assert_eq!(got.len(), total);
        assert!(got == expected, "the bytes differ");
    }

    #[test]
    fn a_small_file_is_written_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("small.txt");
        let file = File::create(&path).unwrap();
        std::thread::scope(|scope| {
            let mut w = DirectWrite::new(&file, scope);
            w.write_all(b"hello, ").unwrap();
            w.write_all(b"world\n").unwrap();
            w.finish().unwrap();
        });
        assert_eq!(std::fs::read(&path).unwrap(), b"hello, world\n");
    }
}
