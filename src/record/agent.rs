//! The Python agent, embedded in the binary and written into a private folder per run: the
//! bootstrap `sitecustomize.py` and the agent package (`crate::model::AGENT_PACKAGE`). Their
//! one copy is in the Python package `python/memtrack/` (what a wheel installs beside the
//! binary, where `memtrack.record` imports the same agent in-process).

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
pub const FILES: [(&str, &str); 21] = [
    (
        "sitecustomize.py",
        include_str!("../../python/memtrack/_bootstrap/sitecustomize.py"),
    ),
    agent_file!("__init__.py"),
    agent_file!("activate.py"),
    agent_file!("compiled.py"),
    agent_file!("cuda.py"),
    agent_file!("cycles.py"),
    agent_file!("dynamo.py"),
    agent_file!("importhook.py"),
    agent_file!("inprocess.py"),
    agent_file!("modules.py"),
    agent_file!("names.py"),
    agent_file!("native.py"),
    agent_file!("observer.cpp"),
    agent_file!("ops.py"),
    agent_file!("optim.py"),
    agent_file!("process.py"),
    agent_file!("protocol.py"),
    agent_file!("state.py"),
    agent_file!("subclass.py"),
    agent_file!("transport.py"),
    agent_file!("versions.py"),
];

pub fn write_to(dir: &Path) -> std::io::Result<()> {
    for (name, text) in FILES {
        let path = dir.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(path, text)?;
    }
    Ok(())
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
                (name.ends_with(".py") || name.ends_with(".cpp"))
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
    fn writes_the_package_folder() {
        let dir = std::env::temp_dir().join(format!("memtrack-agent-test-{}", std::process::id()));
        write_to(&dir).unwrap();
        assert!(dir.join("sitecustomize.py").is_file());
        assert!(dir.join("_memtrack_agent/__init__.py").is_file());
        assert!(dir.join("_memtrack_agent/protocol.py").is_file());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
