//! The private folders of attaches that did not end (SIGKILL leaves no chance to remove
//! one). Each attach's folder in TMPDIR (`memtrack-attach-XXXXXX`, 0700) names the memtrack
//! process that made it in a file `owner` (its pid and start time); the next attach of the
//! same user removes every such folder of its own whose maker has ended. What the folder
//! held (the agent's copy, the socket, the settings) is of no use once its attach is gone:
//! the process attached to takes the recording off when the connection closes, and the
//! recording itself lies in the journal beside the output.

use std::fs;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use crate::record::agent;

/// How an attach's folder is named, before its random letters.
const PREFIX: &str = "memtrack-attach-";

/// A fresh private folder for this attach, `owner` written in it.
pub fn private_dir() -> std::io::Result<tempfile::TempDir> {
    let dir = agent::private_dir(PREFIX)?;
    let me = std::process::id();
    let started = started_at(me).unwrap_or(0);
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(dir.path().join("owner"))?;
    writeln!(f, "{me} {started}")?;
    Ok(dir)
}

/// Remove the folders in `tmp` that attaches of this user left, whose memtrack has ended.
/// Only this user's own 0700 folders named as attach names them, with an `owner` that is not
/// a running process (its pid gone, or reused since: another start time); a folder without
/// one (an attach still making it) is left. Never fails: what cannot be removed stays.
pub fn sweep(tmp: &Path) {
    let Ok(entries) = fs::read_dir(tmp) else {
        return;
    };
    // SAFETY: geteuid has no preconditions
    let me = unsafe { libc::geteuid() };
    for entry in entries.flatten() {
        if !entry.file_name().as_bytes().starts_with(PREFIX.as_bytes()) {
            continue;
        }
        let path = entry.path();
        // (in a sticky TMPDIR no other user can rename or replace this user's folder)
        let ours = fs::symlink_metadata(&path)
            .is_ok_and(|m| m.is_dir() && m.uid() == me && m.mode() & 0o777 == 0o700);
        if !ours {
            continue;
        }
        let Some((pid, started)) = owner(&path.join("owner")) else {
            continue;
        };
        if started_at(pid) != Some(started) {
            let _ = fs::remove_dir_all(&path);
        }
    }
}

/// The pid and start time an `owner` file names.
fn owner(path: &Path) -> Option<(u32, u64)> {
    let mut text = String::new();
    fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .ok()?
        .take(64)
        .read_to_string(&mut text)
        .ok()?;
    let (pid, started) = text.trim().split_once(' ')?;
    Some((pid.parse().ok()?, started.parse().ok()?))
}

/// When process `pid` started (clock ticks after boot, `/proc/PID/stat`'s 22nd field); None
/// when there is no such process.
fn started_at(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "PID (comm) STATE …": comm may hold spaces and parentheses; STATE is field 3
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(22 - 3)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folders_of_ended_attaches_go_and_live_ones_stay() {
        let tmp = tempfile::tempdir().unwrap();
        let me = std::process::id();
        let made = private_dir().unwrap();
        assert_eq!(
            owner(&made.path().join("owner")),
            Some((me, started_at(me).unwrap()))
        );
        let make = |name: &str, owner_text: Option<String>| {
            let dir = tmp.path().join(name);
            fs::create_dir(&dir).unwrap();
            fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
            if let Some(text) = owner_text {
                fs::write(dir.join("owner"), text).unwrap();
            }
            fs::write(dir.join("boot.py"), "").unwrap();
            dir
        };
        let mine = make(
            "memtrack-attach-live",
            Some(format!("{me} {}\n", started_at(me).unwrap())),
        );
        let reused = make("memtrack-attach-reused", Some(format!("{me} 1\n")));
        let gone = make("memtrack-attach-gone", Some("4000000 5\n".into()));
        let unfinished = make("memtrack-attach-making", None);
        let record = make("memtrack-abcdef", Some("4000000 5\n".into()));
        sweep(tmp.path());
        assert!(mine.exists() && unfinished.exists() && record.exists());
        assert!(!reused.exists() && !gone.exists());
    }
}
