//! The Python agent, embedded in the binary and written into a private folder per run: the
//! bootstrap `sitecustomize.py` and the agent package (`crate::model::AGENT_PACKAGE`). Their
//! one copy is in the Python package `python/memtrack/` (what a wheel installs beside the
//! binary, where `memtrack.record` imports the same agent in-process).

use std::fs::Permissions;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// `("_memtrack_agent/NAME", contents)` for a file of the agent package.
macro_rules! agent_file {
    ($name:literal) => {
        (
            concat!("_memtrack_agent/", $name),
            include_str!(concat!("../../python/memtrack/_memtrack_agent/", $name)),
        )
    };
}
/// (path relative to the folder, contents): the folder that goes first on the child's
/// `PYTHONPATH`. Every file of the package is listed (a test checks none is missing).
pub const FILES: [(&str, &str); 38] = [
    (
        "sitecustomize.py",
        include_str!("../../python/memtrack/_bootstrap/sitecustomize.py"),
    ),
    agent_file!("__init__.py"),
    agent_file!("activate.py"),
    agent_file!("attach.py"),
    agent_file!("compiled.py"),
    agent_file!("cuda.py"),
    agent_file!("cycles.py"),
    agent_file!("dynamo.py"),
    agent_file!("fast_path.h"),
    agent_file!("fake_autocast.py"),
    agent_file!("fake_cuda.py"),
    agent_file!("fake_dist.py"),
    agent_file!("fake_files.py"),
    agent_file!("fake_kernels.py"),
    agent_file!("fake_memory.py"),
    agent_file!("fake_mode.py"),
    agent_file!("fake_values.py"),
    agent_file!("gradhooks.py"),
    agent_file!("importhook.py"),
    agent_file!("inprocess.py"),
    agent_file!("modnames.py"),
    agent_file!("module_path.h"),
    agent_file!("modules.py"),
    agent_file!("names.py"),
    agent_file!("native.py"),
    agent_file!("observer.cpp"),
    agent_file!("ops.py"),
    agent_file!("optim.py"),
    agent_file!("params.py"),
    agent_file!("parts.py"),
    agent_file!("process.py"),
    agent_file!("protocol.py"),
    agent_file!("state.py"),
    agent_file!("subclass.py"),
    agent_file!("threads.py"),
    agent_file!("transport.py"),
    agent_file!("versions.py"),
    agent_file!("warnlocations.py"),
];

/// A fresh temporary folder only this user may enter (0700 whatever the umask), its name
/// `prefix` and random letters: what is in it runs inside the recorded program.
pub fn private_dir(prefix: &str) -> std::io::Result<tempfile::TempDir> {
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .permissions(Permissions::from_mode(0o700))
        .tempdir()?;
    std::fs::set_permissions(dir.path(), Permissions::from_mode(0o700))?;
    Ok(dir)
}

/// Write the agent into `dir`, which must not exist: folders 0700, files 0600, each made
/// exclusively and never through a link.
pub fn write_to(dir: &Path) -> std::io::Result<()> {
    for (name, text) in FILES {
        let path = dir.join(name);
        for folder in path.ancestors().skip(1) {
            if folder == dir.parent().unwrap_or(Path::new("")) {
                break;
            }
            if !folder.is_dir() {
                make_private_dir(folder)?;
            }
        }
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)?;
        f.set_permissions(Permissions::from_mode(0o600))?;
        f.write_all(text.as_bytes())?;
    }
    Ok(())
}

fn make_private_dir(path: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new().mode(0o700).create(path)?;
    std::fs::set_permissions(path, Permissions::from_mode(0o700))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_of_the_package_is_embedded() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("python/memtrack")
            .join(crate::model::AGENT_PACKAGE);
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| {
                let name = e.unwrap().file_name().into_string().unwrap();
                [".py", ".cpp", ".h"]
                    .iter()
                    .any(|ext| name.ends_with(ext))
                    .then(|| format!("{}/{name}", crate::model::AGENT_PACKAGE))
            })
            .collect();
        on_disk.sort();
        let mut embedded: Vec<String> = FILES
            .iter()
            .map(|(n, _)| n.to_string())
            .filter(|n| n.contains('/'))
            .collect();
        embedded.sort();
        assert_eq!(on_disk, embedded);
    }

    #[test]
    fn writes_the_package_folder_for_this_user_alone() {
        use std::os::unix::fs::MetadataExt;
        // (under umask 000 too: tests/record_trust.rs, in a process of its own)
        let tmp = private_dir("memtrack-").unwrap();
        let dir = tmp.path().join("agent");
        write_to(&dir).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o777;
        assert_eq!(mode(tmp.path()), 0o700);
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join("_memtrack_agent")), 0o700);
        assert_eq!(mode(&dir.join("sitecustomize.py")), 0o600);
        assert_eq!(mode(&dir.join("_memtrack_agent/protocol.py")), 0o600);
        // a folder that exists already is not written into
        assert!(write_to(&dir).is_err());
    }
}
