//! The many-ranks recipe of docs/snapshots.md, as a user copies it: its Python block run on a
//! real engine in local mode (Dask's `processes` scheduler), with `memtrack` on PATH, over real
//! captures standing in for the ranks. The table it prints is the one `summary` gives of the
//! snapshots themselves.

mod common;

use std::process::Command;

use common::{fixture, memtrack, python, root};

/// The Python block after the `<!-- many-ranks recipe -->` marker of docs/snapshots.md.
fn recipe() -> String {
    let doc = std::fs::read_to_string(root().join("docs/snapshots.md")).unwrap();
    let after = doc
        .split_once("<!-- many-ranks recipe -->")
        .expect("docs/snapshots.md marks the recipe")
        .1;
    let block = after
        .split_once("```python\n")
        .expect("a python block follows the marker")
        .1;
    block.split_once("```").unwrap().0.to_string()
}

#[test]
fn the_documented_recipe_maps_with_dask_and_reduces_to_the_same_table() {
    let Some(py) = python() else { return };
    if Command::new(&py)
        .args(["-c", "import dask"])
        .status()
        .is_ok_and(|s| !s.success())
    {
        // scripts/setup-python.sh installs it; a Python given by hand may lack it
        assert!(
            std::env::var_os("CI").is_none(),
            "{} has no dask (scripts/setup-python.sh installs it)",
            py.display()
        );
        eprintln!("SKIPPED: {} has no dask", py.display());
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let snaps = dir.path().join("snapshots");
    std::fs::create_dir(&snaps).unwrap();
    let ranks = [
        "cs336_windows_partial_frames",
        "flexgen_oom_snapshot_legacy",
        "verl_mem_no_trace_multi_pool",
        "synthetic_multi_device_oom",
    ];
    for (i, name) in ranks.iter().enumerate() {
        std::fs::copy(
            fixture(&format!("snapshots/{name}.pickle")),
            snaps.join(format!("rank{i}.pickle")),
        )
        .unwrap();
    }
    std::fs::write(dir.path().join("recipe.py"), recipe()).unwrap();
    let bin_dir = std::path::Path::new(env!("CARGO_BIN_EXE_memtrack"))
        .parent()
        .unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let o = Command::new(&py)
        .arg("recipe.py")
        .current_dir(dir.path())
        .env("PATH", path)
        .output()
        .unwrap();
    let reduced = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{reduced}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    for i in 0..ranks.len() {
        assert!(
            dir.path()
                .join(format!("snapshots/rank{i}.summary.json"))
                .exists(),
            "the map wrote rank{i}'s summary beside it"
        );
    }
    // the same table as the snapshots read directly, row names included
    let direct: Vec<String> = (0..ranks.len())
        .map(|i| format!("snapshots/rank{i}.pickle"))
        .collect();
    let o = memtrack()
        .current_dir(dir.path())
        .arg("summary")
        .args(&direct)
        .output()
        .unwrap();
    assert!(o.status.success());
    let table = String::from_utf8_lossy(&o.stdout);
    assert_eq!(reduced, table);
    assert!(reduced.contains("snapshots/rank3.pickle"), "{reduced}");
}
