//! The Python agent, embedded in the binary and written into a private folder per run.

use std::path::Path;

/// (file name, contents): the folder that goes first on the child's `PYTHONPATH`.
pub const FILES: [(&str, &str); 2] = [
    ("sitecustomize.py", include_str!("agent/sitecustomize.py")),
    (
        crate::model::AGENT_FILE,
        include_str!("agent/_memtrack_agent.py"),
    ),
];

pub fn write_to(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for (name, text) in FILES {
        std::fs::write(dir.join(name), text)?;
    }
    Ok(())
}
