//! Whose a stack frame is: the agent's, or torch's module-call machinery (which reports of
//! stacks leave out or name).

/// The name of `memtrack record`'s Python agent package: written so by `record`, seen so in
/// the stacks of snapshots taken under it (`.../_memtrack_agent/ops.py`).
pub const AGENT_PACKAGE: &str = "_memtrack_agent";

/// Whether a frame's file is the agent's: any file of its package, or the single
/// `_memtrack_agent.py` the agent was before it became a package (older recordings).
pub fn is_agent_file(filename: &str) -> bool {
    if filename.ends_with("_memtrack_agent.py") {
        return true;
    }
    let mut parts = filename.rsplit(['/', '\\']);
    parts.next(); // the file's own name
    parts.next() == Some(AGENT_PACKAGE)
}

/// Whether a frame is the `inner` function of torch's `Module._call_impl`: the path a module
/// call takes where hooks are registered, as `memtrack record`'s global module hooks are (in a
/// file the agent shows in, left out with its frames).
pub fn is_hooks_inner_frame(filename: &str, function: &str) -> bool {
    function == "inner" && path_ends_with(filename, "torch/nn/modules/module.py")
}

/// Whether `filename`'s last components are those of `tail` (`/`-separated), whichever
/// separator the file uses.
pub fn path_ends_with(filename: &str, tail: &str) -> bool {
    let mut parts = filename.rsplit(['/', '\\']);
    tail.rsplit('/').all(|part| parts.next() == Some(part))
}

#[cfg(test)]
mod tests {
    use super::{is_agent_file, path_ends_with};

    #[test]
    fn a_path_ends_with_whole_components_on_either_separator() {
        assert!(path_ends_with(
            "/venv/site-packages/torch/_ops.py",
            "torch/_ops.py"
        ));
        assert!(path_ends_with(r"C:\venv\torch\_ops.py", "torch/_ops.py"));
        assert!(path_ends_with("torch/_ops.py", "torch/_ops.py"));
        assert!(!path_ends_with("/src/mytorch/_ops.py", "torch/_ops.py"));
        assert!(!path_ends_with("_ops.py", "torch/_ops.py"));
    }

    #[test]
    fn agent_files_are_the_package_and_the_old_single_file() {
        assert!(is_agent_file(
            "/tmp/memtrack-agent-1/_memtrack_agent/ops.py"
        ));
        assert!(is_agent_file(
            "/tmp/memtrack-agent-1/_memtrack_agent/__init__.py"
        ));
        assert!(is_agent_file("/tmp/memtrack-agent-1/_memtrack_agent.py"));
        assert!(is_agent_file("_memtrack_agent.py"));
        assert!(!is_agent_file("/home/u/train.py"));
        assert!(!is_agent_file("/home/u/_memtrack_agent/sub/x.py"));
        assert!(!is_agent_file("ops.py"));
    }
}
