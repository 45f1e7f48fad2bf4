//! FSDP2 (`fully_shard`): `record`'s module tables equal PyTorch's MemTracker's to the byte on a
//! language model sharded over a one-rank gloo group, and FSDP's own end-of-backward work is
//! named as nobody's module.

mod common;

use std::collections::BTreeMap;

use common::{export, json_out, op_names, python, record, script};
use serde_json::Value;

/// (iteration, fqn, state, call, device) -> the snapshot's bytes by category, of a
/// `modules --format json --iteration all` (ours, or the program's `--memtracker` output).
fn tables(j: &Value) -> BTreeMap<(u64, String, String, usize, String), Value> {
    let mut out = BTreeMap::new();
    for it in j["iterations"].as_array().unwrap() {
        let k = it["iteration"].as_u64().unwrap();
        for m in it["modules"].as_array().unwrap() {
            let fqn = m["fqn"].as_str().unwrap();
            for s in m["states"].as_array().unwrap() {
                let state = s["state"].as_str().unwrap();
                for (c, call) in s["calls"].as_array().unwrap().iter().enumerate() {
                    for (dev, row) in call.as_object().unwrap() {
                        let key = (k, fqn.to_string(), state.to_string(), c, dev.clone());
                        out.insert(key, row.clone());
                    }
                }
            }
        }
    }
    out
}

#[test]
fn fsdp2_module_tables_equal_memtrackers_and_its_final_callback_is_nobodys() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let program = script("fsdp2_lm.py");
    let (code, stderr) = record(
        dir.path(),
        "run.pkl",
        &["--backend", "cpu"],
        &py,
        &[&program],
    );
    assert_eq!(code, 0, "{stderr}");
    // FSDP2 runs FakeTensorMode: nothing of the agent's (torch's data-pointer warning) shows
    assert!(!stderr.contains("FakeTensor"), "{stderr}");
    let file = dir.path().join("run.pkl");
    let ours = json_out(&[
        "modules",
        file.to_str().unwrap(),
        "--format",
        "json",
        "--iteration",
        "all",
    ]);
    let o = std::process::Command::new(&py)
        .args([&program, "--memtracker"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let theirs: Value = serde_json::from_slice(&o.stdout).unwrap();
    let (ours_t, theirs_t) = (tables(&ours), tables(&theirs));
    assert!(theirs_t.len() > 100, "{} snapshots", theirs_t.len());
    let keys = |t: &BTreeMap<_, _>| t.keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&ours_t), keys(&theirs_t), "modules, states and calls");
    // each block's Pre-Backward is taken before FSDP2's all-gather of its parameters, and
    // the root's Post-Backward before FSDP2's final callback (its reduce-scatter, reshard)
    for (key, t) in &theirs_t {
        assert_eq!(&ours_t[key], t, "{key:?}");
    }
    assert_eq!(ours["peak"], theirs["peak"]);
    // that callback runs after every module's backward ended: its ops are no module's
    let j = export(&file);
    let names = op_names(&j);
    assert!(
        names
            .iter()
            .any(|n| n.starts_with("Global.backward.chunk_cat")),
        "{names:?}"
    );
    for n in &names {
        assert!(
            !n.starts_with("FSDPFSDPLM.tok.backward.") || n.contains("embedding_dense_backward"),
            "the root's final callback named after the embedding: {n}"
        );
    }
}
