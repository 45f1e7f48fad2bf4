//! Writing results: to stdout (`-`) or to a file through a temporary name and a rename, so a
//! reader never sees half a file and an existing file is replaced only by a complete one.

use std::io::Write;
use std::path::Path;

use crate::error::{Error, Result};

pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_atomically_with(path, |f| f.write_all(bytes))
}

/// Write through `write` to a temporary name next to `path`, then rename: output that is
/// written as it is produced (never whole in memory) with the same all-or-nothing file.
pub fn write_atomically_with(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".into());
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let result = (|| {
        let mut f = std::io::BufWriter::with_capacity(1 << 16, std::fs::File::create(&tmp)?);
        write(&mut f)?;
        let f = f.into_inner().map_err(|e| e.into_error())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
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
