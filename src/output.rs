//! Writing results: to stdout (`-`) or to a file, as the shell's `>` would but never half
//! written. A regular file (or none yet) is written under a fresh random name in its folder,
//! created exclusively, then renamed over it, so a reader never sees half a file and an
//! existing file is replaced only by a complete one, with its mode kept. What is not a regular
//! file is written through as `>` does: a symlink's target is written (the link stays), a
//! device or FIFO is streamed into. A file the user may not write is refused, as `cp` does, and
//! so is any file the run reads (`inputs`), whatever name or link leads to it.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::direct_write::DirectWrite;
use crate::error::{Error, Result};

pub fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_atomically_with(path, |f| f.write_all(bytes))
}

/// Write through `write` to `path` (see the module doc): output that is written as it is
/// produced (never whole in memory), all or nothing where the destination is a regular file.
pub fn write_atomically_with(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> io::Result<()> {
    let path = follow_links(path)?;
    let existing = match std::fs::metadata(&path) {
        Ok(m) => Some(m),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    if let Some(m) = &existing {
        // captures are often impossible to make again: an input is never written over, as
        // `cp` refuses to copy a file onto itself
        if let Some(input) = crate::inputs::read_as(m) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!(
                    "it is the input {} (the same file{}): memtrack does not write over what it reads; name another output",
                    crate::quote::path(&input),
                    if path.as_path() == input.as_path() { "" } else { ", through a link or another name" }
                ),
            ));
        }
        let kind = m.file_type();
        if kind.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::IsADirectory,
                "it is a directory",
            ));
        }
        if kind.is_char_device() || kind.is_block_device() || kind.is_fifo() || kind.is_socket() {
            // a device or FIFO is written into, as `>` does; there is nothing to rename over
            let f = OpenOptions::new().write(true).truncate(true).open(&path)?;
            let mut w = io::BufWriter::with_capacity(1 << 16, f);
            write(&mut w)?;
            return w.flush();
        }
        if !may_write(&path) {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "permission denied: the file exists and you may not write it (it is not replaced)",
            ));
        }
    }
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".into());
    // a random name, created exclusively: a link planted at a predictable name is not followed;
    // a new file gets the mode `>` would give it (0666 less the umask), not a temporary's 0600
    let tmp = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".tmp")
        .permissions(std::fs::Permissions::from_mode(0o666))
        .tempfile_in(dir)?;
    std::thread::scope(|scope| {
        let mut w = DirectWrite::new(tmp.as_file(), scope);
        write(&mut w)?;
        w.finish()
    })?;
    if let Some(m) = &existing {
        keep_mode_and_owner(tmp.as_file(), m)?;
    }
    tmp.as_file().sync_all()?;
    tmp.persist(&path).map_err(|e| e.error)?;
    Ok(())
}

/// The file a path names once its symlinks are followed, without requiring it to exist (a
/// dangling link names the file to create), as `>` does.
fn follow_links(path: &Path) -> io::Result<PathBuf> {
    let mut p = path.to_path_buf();
    // the kernel's own limit on a chain of links (MAXSYMLINKS)
    for _ in 0..40 {
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {
                let target = std::fs::read_link(&p)?;
                p = match p.parent() {
                    Some(dir) if target.is_relative() => dir.join(target),
                    _ => target,
                };
            }
            _ => return Ok(p),
        }
    }
    Err(io::Error::other("too many levels of symbolic links"))
}

/// Whether this process may write the file (access(2) with W_OK: root may, a read-only
/// file's owner may not).
fn may_write(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}

/// The replacement keeps the replaced file's mode and, where this process may set it, its
/// owner; a file another user owns that we may write but not give back is refused rather
/// than silently handed to us.
fn keep_mode_and_owner(tmp: &File, old: &std::fs::Metadata) -> io::Result<()> {
    tmp.set_permissions(std::fs::Permissions::from_mode(old.mode() & 0o7777))?;
    let ours = tmp.metadata()?;
    if (ours.uid(), ours.gid()) != (old.uid(), old.gid()) {
        std::os::unix::fs::fchown(tmp, Some(old.uid()), Some(old.gid())).map_err(|_| {
            io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "the file belongs to {}:{} (user:group) and replacing it would make it yours (not replaced)",
                    old.uid(),
                    old.gid()
                ),
            )
        })?;
    }
    Ok(())
}

/// Write `bytes` to `path`, or to stdout when `path` is `-`.
pub fn emit(path: &Path, bytes: &[u8]) -> Result<()> {
    if path.as_os_str() == "-" {
        let mut out = std::io::stdout().lock();
        return match out.write_all(bytes).and_then(|_| out.flush()) {
            // a closed pipe (`| head`) is the reader's choice, not an error
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
            r => r.map_err(|e| Error::output(Path::new("<stdout>"), e)),
        };
    }
    write_atomically(path, bytes).map_err(|e| Error::output(path, e))
}

/// Like `emit`, for output produced piece by piece: `write` gets a buffered writer to stdout
/// or to the file's temporary name, so the whole text never sits in memory.
pub fn emit_with(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<()> {
    if path.as_os_str() == "-" {
        let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
        return match write(&mut out).and_then(|_| out.flush()) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
            r => r.map_err(|e| Error::output(Path::new("<stdout>"), e)),
        };
    }
    write_atomically_with(path, write).map_err(|e| Error::output(path, e))
}
