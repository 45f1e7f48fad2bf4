//! The journal folder beside the output (`run.pkl.journal-XXXXXXXX`): what every recorded
//! process sends, on disk as it arrives, so a killed `record` loses nothing (`--recover`).
//!
//! It is the user's alone and only what this run wrote is read back (docs/record.md,
//! "Shared machines"): the folder is made fresh under a random name, 0700 whatever the
//! umask, and held open; every file in it is reached through that handle (`openat`), created
//! exclusively without following links, and checked to be a regular file of this user. The
//! collector keeps each file it made or found open, so a journal removed while the program
//! runs (a `/tmp` cleaner) is still read to the end.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Most bytes of one connection kept in memory once its file cannot be written (a full disk):
/// the connection is still read, so the program never blocks on its socket.
const MEMORY_TAIL: usize = 4 << 20;

pub struct Journal {
    path: PathBuf,
    /// The folder as made (or opened by `--recover`): every file is reached through it.
    dir: File,
    held: Mutex<BTreeMap<String, Held>>,
}

struct Held {
    /// None: the file could not be made, everything is in `spilled`.
    file: Option<File>,
    /// Set once the file could not be written: its good length, then what followed.
    spilled: Option<(u64, Vec<u8>)>,
}

/// One process image's spool: its segments' bytes in order (`spool-<pid>-<segment>.bin`,
/// `spool-<pid>.<image>-<segment>.bin` for the image a process became by `exec`).
pub struct Spool {
    pub pid: u32,
    pub image: u32,
    pub segments: Vec<FileBytes>,
}

/// A file of the journal: its path (for messages) and its bytes.
pub type FileBytes = (PathBuf, io::Result<Vec<u8>>);

/// What a journal holds: each connection's bytes (`connNNNN.bin`) and each spool.
pub struct Contents {
    pub connections: Vec<FileBytes>,
    pub spools: Vec<Spool>,
}

impl Journal {
    /// A fresh folder `NAME.journal-XXXXXXXX` beside `output`.
    pub fn create(output: &Path) -> io::Result<Journal> {
        let name = output
            .file_name()
            .map_or_else(|| "memtrack".into(), |n| n.to_string_lossy().into_owned());
        let parent = match output.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let made = tempfile::Builder::new()
            .prefix(&format!("{name}.journal-"))
            .rand_bytes(8)
            .permissions(std::fs::Permissions::from_mode(0o700))
            .disable_cleanup(true)
            .tempdir_in(parent)?;
        let path = made.path().to_path_buf();
        let dir = open_dir(&path)?;
        // the umask may have taken bits off the 0700 asked for; nobody else had any
        dir.set_permissions(std::fs::Permissions::from_mode(0o700))?;
        Ok(Journal::holding(path, dir))
    }

    /// A journal a `record` left behind (`--recover`): refused unless it is this user's and
    /// nobody else may write into it.
    pub fn open(path: &Path) -> Result<Journal, String> {
        let dir = open_dir(path).map_err(|e| e.to_string())?;
        let meta = dir.metadata().map_err(|e| e.to_string())?;
        let me = unsafe { libc::geteuid() };
        if meta.uid() != me {
            return Err(format!(
                "the folder belongs to user id {}, not to you (id {me}): a journal is read only by the user who recorded it",
                meta.uid()
            ));
        }
        if meta.mode() & 0o022 != 0 {
            return Err(format!(
                "other users may write into the folder (mode {:o}): what it holds cannot be trusted to be your recording",
                meta.mode() & 0o777
            ));
        }
        let journal = Journal::holding(path.to_path_buf(), dir);
        journal.adopt();
        Ok(journal)
    }

    fn holding(path: PathBuf, dir: File) -> Journal {
        Journal {
            path,
            dir,
            held: Mutex::new(BTreeMap::new()),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The folder as this run holds it: what each recorded process is handed (server.rs), so
    /// that none reaches the journal by its path.
    pub fn folder(&self) -> &File {
        &self.dir
    }

    /// Whether the folder's path no longer leads to the folder this run made (renamed or
    /// removed while the program ran: by another user in a shared folder, a cleaner).
    pub fn moved(&self) -> bool {
        match (std::fs::symlink_metadata(&self.path), self.dir.metadata()) {
            (Ok(a), Ok(b)) => a.dev() != b.dev() || a.ino() != b.ino(),
            _ => true,
        }
    }

    /// A new file `name` in the folder, for writing (0600, exclusive); a reading handle stays
    /// with the journal.
    pub fn create_file(&self, name: &str) -> io::Result<File> {
        let file = self.open_at(
            name,
            libc::O_RDWR | libc::O_CREAT | libc::O_EXCL,
            "cannot be made",
        )?;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        let reader = file.try_clone()?;
        self.held.lock().unwrap().insert(
            name.to_string(),
            Held {
                file: Some(reader),
                spilled: None,
            },
        );
        Ok(file)
    }

    /// Keep `bytes` of file `name` in memory: its file could be written up to `good` bytes
    /// only. Later calls append (up to a bound, then the rest is dropped, as a cut).
    pub fn spill(&self, name: &str, good: u64, bytes: &[u8]) {
        let mut held = self.held.lock().unwrap();
        let h = held.entry(name.to_string()).or_insert(Held {
            file: None,
            spilled: None,
        });
        let (_, tail) = h.spilled.get_or_insert_with(|| (good, Vec::new()));
        let room = MEMORY_TAIL.saturating_sub(tail.len());
        tail.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    /// Open every spool file the agents made that is not held yet, so it can be read even if
    /// the folder is removed later. Called while the program runs, and before reading.
    pub fn adopt(&self) {
        for name in self.names() {
            if spool_name(&name).is_none() && !is_connection(&name) {
                continue;
            }
            if self.held.lock().unwrap().contains_key(&name) {
                continue;
            }
            if let Ok(file) = self.open_at(&name, libc::O_RDONLY, "is not readable") {
                self.held.lock().unwrap().entry(name).or_insert(Held {
                    file: Some(file),
                    spilled: None,
                });
            }
        }
    }

    /// The names in the folder, listed through its handle: the folder this run made, even
    /// if its path was taken over (removed, or renamed and another put in its place).
    fn names(&self) -> Vec<String> {
        let mut names = Vec::new();
        // SAFETY: openat of "." on a valid descriptor gives a fresh one that fdopendir owns
        // from then on; readdir's entries are read before the next call; closedir frees it
        unsafe {
            let fd = libc::openat(
                self.dir.as_raw_fd(),
                c".".as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            );
            if fd < 0 {
                return names; // removed: what was adopted is all there will be
            }
            let d = libc::fdopendir(fd);
            if d.is_null() {
                libc::close(fd);
                return names;
            }
            loop {
                let e = libc::readdir(d);
                if e.is_null() {
                    break;
                }
                let name = std::ffi::CStr::from_ptr((*e).d_name.as_ptr());
                if let Ok(n) = name.to_str() {
                    names.push(n.to_string());
                }
            }
            libc::closedir(d);
        }
        names
    }

    /// Everything the journal holds, read through the handles.
    pub fn contents(&self) -> Contents {
        self.adopt();
        let held = self.held.lock().unwrap();
        let mut connections = Vec::new();
        let mut found: Vec<((u32, u32, u32), FileBytes)> = Vec::new();
        for (name, h) in held.iter() {
            let bytes = read_held(h);
            let path = self.path.join(name);
            if is_connection(name) {
                connections.push((path, bytes));
            } else if let Some((pid, image, segment)) = spool_name(name) {
                found.push(((pid, image, segment), (path, bytes)));
            }
        }
        found.sort_by_key(|f| f.0);
        let mut spools: Vec<Spool> = Vec::new();
        for ((pid, image, _), file) in found {
            match spools.last_mut() {
                Some(s) if (s.pid, s.image) == (pid, image) => s.segments.push(file),
                _ => spools.push(Spool {
                    pid,
                    image,
                    segments: vec![file],
                }),
            }
        }
        Contents {
            connections,
            spools,
        }
    }

    /// Each spool file held (new ones adopted first), as (pid, image, segment) and a handle
    /// of its own to read it by position: for following the recording while it is written
    /// (`memtrack watch`).
    pub fn spool_files(&self) -> Vec<((u32, u32, u32), File)> {
        self.adopt();
        let held = self.held.lock().unwrap();
        let mut files: Vec<((u32, u32, u32), File)> = (held.iter())
            .filter_map(|(name, h)| Some((spool_name(name)?, h.file.as_ref()?.try_clone().ok()?)))
            .collect();
        files.sort_by_key(|f| f.0);
        files
    }

    /// Remove the folder, if the path still names the folder this journal holds.
    pub fn remove(&self) {
        if !self.moved() {
            let _ = std::fs::remove_dir_all(&self.path);
            return;
        }
        // moved: its files go through the handle (its path is another's now, or none); the
        // empty folder stays wherever it was moved
        for name in self.names() {
            if let Ok(c) = CString::new(name) {
                // SAFETY: unlinkat of a NUL-terminated name in a valid directory descriptor
                unsafe { libc::unlinkat(self.dir.as_raw_fd(), c.as_ptr(), 0) };
            }
        }
    }

    /// `name` in the folder through its handle, never through a link, and only a regular file
    /// of this user.
    fn open_at(&self, name: &str, flags: libc::c_int, what: &str) -> io::Result<File> {
        let c = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: a plain openat on a valid descriptor and a NUL-terminated name
        let fd = unsafe {
            libc::openat(
                self.dir.as_raw_fd(),
                c.as_ptr(),
                flags | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK,
                0o600 as libc::c_uint,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd was just opened and is owned by nobody else
        let file = unsafe { File::from_raw_fd(fd) };
        let meta = file.metadata()?;
        if !meta.is_file() || meta.uid() != unsafe { libc::geteuid() } {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("{name} {what}: not a regular file of yours"),
            ));
        }
        Ok(file)
    }
}

fn open_dir(path: &Path) -> io::Result<File> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: a plain open of a NUL-terminated path
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        let e = io::Error::last_os_error();
        // O_NOFOLLOW on a link says ELOOP (or ENOTDIR): say what it is
        return Err(match std::fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_symlink() => io::Error::new(
                io::ErrorKind::InvalidInput,
                "a symbolic link, not a journal folder (a journal is never reached through a link)",
            ),
            _ => e,
        });
    }
    // SAFETY: fd was just opened and is owned by nobody else
    Ok(unsafe { File::from_raw_fd(fd) })
}

fn read_held(h: &Held) -> io::Result<Vec<u8>> {
    let len = match (&h.spilled, &h.file) {
        (Some((good, _)), _) => *good,
        (None, Some(f)) => f.metadata()?.len(),
        (None, None) => 0,
    };
    let mut bytes = vec![0u8; usize::try_from(len).map_err(io::Error::other)?];
    let mut at = 0;
    while let (true, Some(file)) = (at < bytes.len(), &h.file) {
        match file.read_at(&mut bytes[at..], at as u64) {
            Ok(0) => {
                bytes.truncate(at); // cut while we read: what is there
                break;
            }
            Ok(n) => at += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    if let Some((_, tail)) = &h.spilled {
        bytes.extend_from_slice(tail);
    }
    Ok(bytes)
}

/// `connNNNN.bin`: one connection's bytes.
fn is_connection(name: &str) -> bool {
    name.starts_with("conn") && name.ends_with(".bin")
}

/// `connNNNN.bin` for connection `n`.
pub fn connection_name(n: usize) -> String {
    format!("conn{n:04}.bin")
}

/// (pid, image, segment) of a spool file's name.
fn spool_name(name: &str) -> Option<(u32, u32, u32)> {
    let rest = name.strip_prefix("spool-")?.strip_suffix(".bin")?;
    let (process, seg) = rest.split_once('-')?;
    let (pid, image) = process.split_once('.').unwrap_or((process, "0"));
    Some((pid.parse().ok()?, image.parse().ok()?, seg.parse().ok()?))
}

/// `run.pkl.journal-XXXXXXXX` → `run.pkl`: the output a journal's run was writing (a
/// journal of an earlier version, `run.pkl.journal-<pid>`, too).
pub fn output_of(dir: &Path) -> Option<PathBuf> {
    let name = dir.file_name()?.to_str()?;
    let (out, tag) = name.rsplit_once(".journal-")?;
    let ok = !out.is_empty()
        && !tag.is_empty()
        && tag.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    ok.then(|| dir.with_file_name(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_read_back() {
        assert_eq!(spool_name("spool-12-0003.bin"), Some((12, 0, 3)));
        assert_eq!(spool_name("spool-12.2-0000.bin"), Some((12, 2, 0)));
        assert_eq!(spool_name("spool-x-0000.bin"), None);
        assert_eq!(
            output_of(Path::new("d/run.pkl.journal-ab12_z9q")),
            Some(PathBuf::from("d/run.pkl"))
        );
        assert_eq!(
            output_of(Path::new("run.pkl.journal-4242")),
            Some(PathBuf::from("run.pkl"))
        );
        assert_eq!(output_of(Path::new("run.pkl.journal-")), None);
        assert_eq!(output_of(Path::new("run.pkl.journal-a/b")), None);
        assert_eq!(output_of(Path::new("run.pkl")), None);
    }

    #[test]
    fn a_fresh_journal_is_private_and_survives_its_removal() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("run.pkl");
        // (under umask 000 too: tests/record_trust.rs, in a process of its own)
        let j = Journal::create(&out).unwrap();
        let meta = std::fs::symlink_metadata(j.path()).unwrap();
        assert!(meta.is_dir());
        assert_eq!(meta.mode() & 0o777, 0o700);
        assert_eq!(output_of(j.path()), Some(out.clone()));
        let mut f = j.create_file(&connection_name(0)).unwrap();
        assert_eq!(f.metadata().unwrap().mode() & 0o777, 0o600);
        use std::io::Write;
        f.write_all(b"hello").unwrap();
        // an existing name is refused, a link is never followed
        assert!(j.create_file(&connection_name(0)).is_err());
        let target = dir.path().join("victim");
        std::fs::write(&target, b"keep").unwrap();
        std::os::unix::fs::symlink(&target, j.path().join("conn0001.bin")).unwrap();
        assert!(j.create_file("conn0001.bin").is_err());
        std::os::unix::fs::symlink(&target, j.path().join("spool-1-0000.bin")).unwrap();
        std::fs::write(j.path().join("spool-2-0000.bin"), b"spool").unwrap();
        j.adopt();
        std::fs::remove_dir_all(j.path()).unwrap();
        f.write_all(b" again").unwrap();
        let c = j.contents();
        assert_eq!(c.connections.len(), 1);
        assert_eq!(c.connections[0].1.as_ref().unwrap(), b"hello again");
        assert_eq!(c.spools.len(), 1, "the link is not a spool");
        assert_eq!(c.spools[0].pid, 2);
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
    }

    #[test]
    fn a_journal_others_may_write_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let j = dir.path().join("run.pkl.journal-1");
        std::fs::create_dir(&j).unwrap();
        std::fs::set_permissions(&j, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = Journal::open(&j).err().unwrap();
        assert!(e.contains("other users may write"), "{e}");
        std::fs::set_permissions(&j, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(Journal::open(&j).is_ok());
        let link = dir.path().join("run2.pkl.journal-1");
        std::os::unix::fs::symlink(&j, &link).unwrap();
        let e = Journal::open(&link).err().unwrap();
        assert!(e.contains("symbolic link"), "{e}");
    }
}
