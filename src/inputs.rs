//! The files a run reads, each opened once: a command asks about an input by its path several
//! times (is it a trace? then read it), and each ask after the first uses the file opened by
//! the first, never the path again. So a pipe (`<(cat snap.pickle)`, `/dev/stdin`, a FIFO) reads
//! as a file does: its first bytes, read to tell its kind, are kept and read again from memory,
//! and the rest is read once, as a stream or put aside. A regular file is read by position
//! (mapped, or `pread`), whoever else reads it. What is none of these (a terminal, /dev/zero)
//! is refused before a byte of it is read.
//!
//! The inputs opened are also what `output` checks an output against: no run writes over a
//! file it reads.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::formats::kind::{self, Looks};

/// Bytes read from an input to tell its kind (and, of gzip, inflated).
const HEAD: usize = 4096;

/// A stream that is not a pickle of protocol 2 or later (which starts with 0x80) is read into
/// memory up to this much: protocol 0 and 1 pickles are small, and no endless stream of
/// something else (`<(cat /dev/zero)`) is read for long.
pub const MAX_UNTYPED_STREAM: u64 = 64 << 20;

/// One input, opened.
#[derive(Clone)]
pub struct Input {
    pub path: PathBuf,
    /// (device, inode) of what was opened.
    id: (u64, u64),
    handle: Handle,
    /// The first bytes (up to `HEAD`).
    head: Arc<Vec<u8>>,
    pub looks: Looks,
    /// A pipe or a socket (`<(cat snap.pickle)`, `/dev/stdin` of `cat … |`): read once, it
    /// cannot be named again to another command.
    pub piped: bool,
}

#[derive(Clone)]
enum Handle {
    Folder,
    /// A regular file (or a stream put aside in an unlinked temporary file), read by position.
    File(Arc<File>),
    /// A stream: after `head`, the rest, read once.
    Stream(Arc<Mutex<Option<File>>>),
}

static OPENED: Mutex<Vec<Input>> = Mutex::new(Vec::new());

fn opened() -> std::sync::MutexGuard<'static, Vec<Input>> {
    OPENED.lock().unwrap_or_else(|p| p.into_inner())
}

fn id_of(m: &std::fs::Metadata) -> (u64, u64) {
    (m.dev(), m.ino())
}

/// The input at `path`, opened on the first ask. The error says why it cannot be read (the
/// caller names the path).
pub fn open(path: &Path) -> Result<Input, String> {
    let now = std::fs::metadata(path).ok().map(|m| id_of(&m));
    {
        let list = opened();
        // the same path naming the same file (one replaced since is opened anew)
        if let Some(i) = list
            .iter()
            .find(|i| i.path == path && now.is_none_or(|id| id == i.id))
        {
            return Ok(i.clone());
        }
    }
    let input = open_new(path)?;
    opened().push(input.clone());
    Ok(input)
}

fn open_new(path: &Path) -> Result<Input, String> {
    let file = File::open(path).map_err(|e| format!("cannot read: {e}"))?;
    let meta = file.metadata().map_err(|e| format!("cannot read: {e}"))?;
    let kind = meta.file_type();
    let id = id_of(&meta);
    let input = |handle, head: Vec<u8>, looks| Input {
        path: path.to_path_buf(),
        id,
        handle,
        head: Arc::new(head),
        looks,
        piped: kind.is_fifo() || kind.is_socket(),
    };
    if kind.is_dir() {
        return Ok(input(Handle::Folder, Vec::new(), Looks::Folder));
    }
    if kind.is_char_device() || kind.is_block_device() {
        let what = if kind.is_char_device() {
            "a character device (a terminal, /dev/zero, /dev/null)"
        } else {
            "a block device (a disk)"
        };
        return Err(format!("is {what}, not a file or a pipe; {}", kind::READS));
    }
    if kind.is_file() && meta.len() > 0 {
        let file = Arc::new(file);
        let mut head = vec![0u8; HEAD.min(meta.len() as usize)];
        let n = read_full(&mut At::new(file.clone()), &mut head);
        head.truncate(n);
        let looks = kind::of_head(&head, || inflated(At::new(file.clone())));
        return Ok(input(Handle::File(file), head, looks));
    }
    // a pipe, a FIFO, a socket, or a file whose size reads 0 (empty, or a /proc file)
    let mut file = file;
    let mut head = vec![0u8; HEAD];
    let n = read_full(&mut file, &mut head);
    head.truncate(n);
    let looks = kind::of_head(&head, || inflated(io::Cursor::new(head.clone())));
    let handle = Handle::Stream(Arc::new(Mutex::new(Some(file))));
    Ok(input(handle, head, looks))
}

/// The first bytes of gzip data, inflated (as many as the bytes at hand give).
fn inflated(compressed: impl Read) -> Vec<u8> {
    let mut z = flate2::read::MultiGzDecoder::new(compressed);
    let mut text = vec![0u8; 512];
    let n = read_full(&mut z, &mut text);
    text.truncate(n);
    text
}

pub fn read_full(r: &mut impl Read, buf: &mut [u8]) -> usize {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    n
}

/// The input that is the file `meta` describes, if any was read (outputs are checked so).
pub fn read_as(meta: &std::fs::Metadata) -> Option<PathBuf> {
    let id = id_of(meta);
    opened()
        .iter()
        .find(|i| i.id == id && !matches!(i.handle, Handle::Folder))
        .map(|i| i.path.clone())
}

impl Input {
    /// Its size, where it is a file.
    pub fn file_size(&self) -> Option<u64> {
        match &self.handle {
            Handle::File(f) => f.metadata().ok().map(|m| m.len()),
            _ => None,
        }
    }

    /// Its bytes from the start, as a stream: a file by position, a pipe once.
    pub fn stream(&self) -> io::Result<Box<dyn Read + Send>> {
        match &self.handle {
            Handle::Folder => Err(io::Error::new(
                io::ErrorKind::IsADirectory,
                "is a directory",
            )),
            Handle::File(f) => Ok(Box::new(At::new(f.clone()))),
            Handle::Stream(rest) => {
                let rest = rest.lock().unwrap_or_else(|p| p.into_inner()).take();
                let rest = rest.ok_or_else(|| {
                    io::Error::other("a pipe is read once, and this one was read already")
                })?;
                Ok(Box::new(io::Cursor::new(self.head.to_vec()).chain(rest)))
            }
        }
    }

    /// Its bytes mapped into memory: a file as it is; a stream put aside first, once, in an
    /// unlinked temporary file (where other readers of this path then find it).
    pub fn mapped(&self) -> Result<crate::pickle::MappedFile, String> {
        let file = match &self.handle {
            Handle::Folder => return Err("is a directory, not a file".into()),
            Handle::File(f) => f.clone(),
            Handle::Stream(_) => self.put_aside()?,
        };
        crate::pickle::map_open(&file).map_err(|e| format!("cannot read: {e}"))
    }

    fn put_aside(&self) -> Result<Arc<File>, String> {
        let mut from = self.stream().map_err(|e| format!("cannot read: {e}"))?;
        let mut aside = tempfile::tempfile().map_err(|e| {
            format!(
                "cannot put the pipe's bytes aside in a temporary file ({}): {e}; set TMPDIR to a directory with room, or name a file",
                crate::quote::path(&std::env::temp_dir())
            )
        })?;
        // what is not a pickle of protocol 2 or later is read only so far
        let limit = if self.head.first() == Some(&0x80) {
            u64::MAX
        } else {
            MAX_UNTYPED_STREAM + 1
        };
        let copied = io::copy(&mut (&mut from).take(limit), &mut aside)
            .map_err(|e| format!("cannot read: {e}"))?;
        if copied > MAX_UNTYPED_STREAM {
            return Err(format!(
                "a stream that does not start as a pickle memtrack reads (first byte 0x{:02x}, where a pickle of protocol 2 or later has 0x80) and runs past {} MiB: memtrack stopped reading it; {}",
                self.head[0],
                MAX_UNTYPED_STREAM >> 20,
                kind::READS
            ));
        }
        let aside = Arc::new(aside);
        let mut list = opened();
        if let Some(i) = list
            .iter_mut()
            .find(|i| i.path == self.path && i.id == self.id)
        {
            i.handle = Handle::File(aside.clone());
        }
        Ok(aside)
    }

    /// All of its bytes (small inputs: memtrack's own JSON summaries).
    pub fn read_all(&self) -> Result<Vec<u8>, String> {
        let mut bytes = Vec::new();
        self.stream()
            .and_then(|mut s| s.read_to_end(&mut bytes))
            .map_err(|e| format!("cannot read: {e}"))?;
        Ok(bytes)
    }
}

/// Reads a file from `pos` on by position (`pread`), whoever else reads it.
struct At {
    file: Arc<File>,
    pos: u64,
}

impl At {
    fn new(file: Arc<File>) -> At {
        At { file, pos: 0 }
    }
}

impl Read for At {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}
