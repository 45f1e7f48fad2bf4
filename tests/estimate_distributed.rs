//! `memtrack estimate` of a distributed job: one run per rank asked for, torchrun's world and
//! environment, a fake process group; per-rank model states against the sharding arithmetic
//! (FSDP2 with its padding, a 2-D mesh), DDP's buckets, CPU offload, and a bad mesh named
//! with its line. Each program runs once per rank asked for.

mod common;

use std::path::{Path, PathBuf};

use common::{exit_code, export, memtrack_process as memtrack, python, script};
use serde_json::Value;

const WORLD: u64 = 8;
/// tests/py/estimate_distributed.py's blocks: Linear(96, 100), Linear(100, 36), Linear(36, 96),
/// three of them; fp32.
const BLOCKS: usize = 3;
const LINEARS: [(u64, u64); 3] = [(96, 100), (100, 36), (36, 96)];

fn round512(n: u64) -> u64 {
    n.div_ceil(512) * 512
}

/// Each parameter of one block as (rows, elements a row): weights [out, in], biases [out].
fn block_params() -> Vec<(u64, u64)> {
    LINEARS
        .iter()
        .flat_map(|&(i, o)| [(o, i), (o, 1)])
        .collect()
}

/// One block's gradients whole (unsharded), each parameter's own storage: what FSDP2 still
/// holds of the first block when the root's backward ends (it reduces them in its final
/// callback, after).
fn whole_block_grad_bytes() -> u64 {
    block_params()
        .iter()
        .map(|&(r, e)| round512(r * e * 4))
        .sum()
}

/// `memtrack estimate --format json [extra] -o DIR/est.pkl -- torchrun --nproc-per-node 8
/// estimate_distributed.py MODE` in `dir`: (exit code, the JSON, the program's output).
fn estimate(dir: &Path, py: &Path, extra: &[&str], mode: &str) -> (i32, Value, String) {
    let torchrun = py.with_file_name("torchrun");
    let o = memtrack()
        .current_dir(dir)
        .args(["estimate", "--format", "json", "-o", "est.pkl"])
        .args(extra)
        .arg("--")
        .arg(&torchrun)
        .args(["--nproc-per-node", "8"])
        .arg(script("estimate_distributed.py"))
        .arg(mode)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&o.stderr);
    let start = stdout.rfind("\n{\n").map_or(0, |i| i + 1);
    let json = serde_json::from_str(&stdout[start..])
        .unwrap_or_else(|e| panic!("{mode}: {e}: {stdout}\n{stderr}"));
    (exit_code(o.status), json, stdout[..start].to_string())
}

/// The root module's bytes by category in `state` of the file's second iteration (after one
/// optimizer step; its Pre-Forward: nothing in flight, the gradients set to None).
fn root_state(file: &Path, state: &str) -> Value {
    let j = export(file);
    let it = &j["memtrack"]["modules"][1];
    let root = &it["modules"][0];
    let s = root["states"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["state"] == state)
        .unwrap_or_else(|| panic!("{state} in {root}"));
    s["calls"][0]["cuda:0"].clone()
}

fn files(j: &Value) -> Vec<(u64, PathBuf)> {
    j["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["verdict"]["rank"].as_u64().unwrap(),
                PathBuf::from(r["file"].as_str().unwrap()),
            )
        })
        .collect()
}

#[test]
fn fsdp2_per_rank_model_states_are_the_sharding_arithmetic_with_its_padding() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (code, j, program) = estimate(dir.path(), &py, &["--ranks", "0,7"], "fsdp");
    assert_eq!(code, 0, "{program}\n{j}");
    assert!(program.contains("done"), "{program}");
    let ranks = files(&j);
    assert_eq!(ranks.iter().map(|r| r.0).collect::<Vec<_>>(), vec![0, 7]);
    for (rank, file) in &ranks {
        let file = dir.path().join(file);
        assert!(file.ends_with(format!("est.rank{rank}.pkl")), "{file:?}");
        // FSDP2 pads each parameter's first dimension to a multiple of the world: every
        // rank holds ceil(rows / 8) rows of each, one storage a parameter
        let padded = |rows: u64| rows.div_ceil(WORLD);
        let params: u64 = block_params()
            .iter()
            .map(|&(r, e)| round512(padded(r) * e * 4))
            .sum::<u64>()
            * BLOCKS as u64;
        // gradients: one reduce-scatter output a block (its group), the parameters' shards in it
        let grads =
            round512(block_params().iter().map(|&(r, e)| padded(r) * e * 4).sum()) * BLOCKS as u64;
        // AdamW's two states: like each parameter's unpadded shard on this rank
        let local = |rows: u64| rows.saturating_sub(rank * padded(rows)).min(padded(rows));
        let states: u64 = 2
            * block_params()
                .iter()
                .map(|&(r, e)| round512(local(r) * e * 4))
                .sum::<u64>()
            * BLOCKS as u64;
        // before the second step's forward: the sharded parameters and the optimizer's states
        let before = root_state(&file, "Pre-Forward");
        assert_eq!(before["Parameter"], params, "rank {rank}: {before}");
        assert_eq!(before["Optstate"], states, "rank {rank}: {before}");
        // when the root's backward ends (as MemTracker sees it), the later blocks' gradients
        // are reduce-scattered; the first block's are still whole, one storage a parameter:
        // its inputs need no gradient, so FSDP2 reduces them in its final callback, after
        let after = root_state(&file, "Post-Backward");
        let expected = grads / BLOCKS as u64 * (BLOCKS as u64 - 1) + whole_block_grad_bytes();
        assert_eq!(after["Gradient"], expected, "rank {rank}: {after}");
        // in flight: a block's forward holds its unsharded (all-gathered) parameters too
        let it = &export(&file)["memtrack"]["modules"][1];
        let block = (it["modules"].as_array().unwrap().iter())
            .find(|m| m["fqn"].as_str().unwrap().ends_with(".1"))
            .unwrap();
        let peak = (block["states"].as_array().unwrap().iter())
            .find(|s| s["state"] == "Peak-Forward")
            .unwrap();
        let whole: u64 = block_params().iter().map(|&(r, e)| r * e * 4).sum();
        let in_flight = peak["calls"][0]["cuda:0"]["Parameter"].as_u64().unwrap();
        assert!(
            in_flight >= params + whole,
            "rank {rank}: {in_flight} {params} {whole}"
        );
    }
    // each rank's verdict, and the NCCL allowance for the one group that communicated
    let v = &j["ranks"][1]["verdict"];
    assert_eq!(
        (v["rank"].as_u64(), v["world_size"].as_u64()),
        (Some(7), Some(8))
    );
    assert_eq!(v["nccl_bytes"], 1u64 << 30);
}

#[test]
fn cpu_offload_keeps_the_model_states_off_the_device() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (code, j, program) = estimate(dir.path(), &py, &[], "offload");
    assert_eq!(code, 0, "{program}\n{j}");
    let file = dir.path().join(j["file"].as_str().unwrap());
    let before = root_state(&file, "Pre-Forward");
    for cat in ["Parameter", "Gradient", "Optstate"] {
        assert_eq!(before[cat], 0, "{cat}: {before}");
    }
    // when the root's backward ends, only the first block's whole gradients are on the
    // device: FSDP2 reduces and offloads them in its final callback, after
    let after = root_state(&file, "Post-Backward");
    assert_eq!(after["Gradient"], whole_block_grad_bytes(), "{after}");
    assert_eq!(after["Optstate"], 0, "{after}");
    // no value was read to offload it
    assert_eq!(j["values_read"].as_array().unwrap().len(), 0, "{j}");
}

#[test]
fn ddp_is_the_single_gpu_estimate_plus_its_buckets() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (code, j, _) = estimate(dir.path(), &py, &[], "ddp");
    assert_eq!(code, 0, "{j}");
    let ddp = export(&dir.path().join(j["file"].as_str().unwrap()));
    let single_file = dir.path().join("single.pkl");
    let o = memtrack()
        .current_dir(dir.path())
        .args(["estimate", "-o"])
        .arg(&single_file)
        .arg("--")
        .arg(&py)
        .args([script("estimate_distributed.py").as_str(), "single"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let single = export(&single_file);
    let last = |j: &Value| {
        (j["ops"].as_array().unwrap().last().unwrap()["allocated_bytes"])
            .as_f64()
            .unwrap() as u64
    };
    // all the gradients fit DDP's first bucket (1 MiB): one bucket of their bytes
    let grads: u64 = block_params().iter().map(|&(r, e)| r * e * 4).sum::<u64>() * BLOCKS as u64;
    let extra = last(&ddp) - last(&single);
    assert!(
        extra.abs_diff(round512(grads)) <= 1 << 20,
        "{extra} {grads}"
    );
    assert_eq!(extra, round512(grads));
}

/// A program that starts its ranks itself (mp.spawn, one a device as `--gpus-per-node`
/// says, rank and world named in `init_process_group`) under an `estimate` without a world:
/// each worker is that rank of that world, in its own file, with DDP's figures of the
/// torchrun run.
#[test]
fn spawned_workers_are_the_ranks_they_name() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (code, torchrun, _) = estimate(dir.path(), &py, &[], "ddp");
    assert_eq!(code, 0, "{torchrun}");
    let o = memtrack()
        .current_dir(dir.path())
        .args(["estimate", "--format", "json", "--gpus-per-node", "2"])
        .args(["-o", "spawn.pkl", "--"])
        .arg(&py)
        .args([script("estimate_distributed.py").as_str(), "spawn"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(exit_code(o.status), 0, "{stdout}\n{stderr}");
    assert_eq!(stdout.matches("done").count(), 2, "{stdout}");
    let start = stdout.rfind("\n{\n").unwrap() + 1;
    let j: Value = serde_json::from_str(&stdout[start..]).unwrap();
    let ranks = files(&j);
    assert_eq!(ranks.iter().map(|r| r.0).collect::<Vec<_>>(), [0, 1], "{j}");
    let peak = |j: &Value| j["verdict"]["peak_allocated_bytes"].as_u64().unwrap();
    for r in j["ranks"].as_array().unwrap() {
        assert_eq!(r["verdict"]["world_size"], 2, "{r}");
        assert_eq!(peak(r), peak(&torchrun), "{r}");
        assert_eq!(r["verdict"]["nccl_bytes"], 1u64 << 30, "{r}");
    }
    for (rank, file) in ranks {
        let file = dir.path().join(file);
        assert_eq!(
            export(&file)["memtrack"]["rank"],
            rank,
            "{}",
            file.display()
        );
    }

    // a worker that raises: the run did not finish, and that rank's verdict says where
    let o = memtrack()
        .current_dir(dir.path())
        .args(["estimate", "--format", "json", "--gpus-per-node", "2"])
        .args(["-o", "fail.pkl", "--"])
        .arg(&py)
        .args([script("estimate_distributed.py").as_str(), "spawnfail"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(exit_code(o.status), 5, "{stdout}");
    let start = stdout.rfind("\n{\n").map_or(0, |i| i + 1);
    let j: Value = serde_json::from_str(&stdout[start..]).unwrap();
    let failed = j["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["verdict"]["rank"] == 1)
        .unwrap_or_else(|| panic!("{j}"));
    let ending = &failed["verdict"]["ending"];
    assert_eq!(ending["exception"], "ValueError", "{ending}");
    let text = std::fs::read_to_string(script("estimate_distributed.py")).unwrap();
    let line = text
        .lines()
        .position(|l| l.contains("rank 1 fails"))
        .unwrap()
        + 1;
    assert_eq!(ending["line"], line as u64, "{ending}");
}

#[test]
fn a_two_dimensional_mesh_shards_by_both_and_a_bad_mesh_is_named_with_its_line() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (code, j, program) = estimate(dir.path(), &py, &[], "tp2d");
    assert_eq!(code, 0, "{program}\n{j}");
    // 4-way tensor parallel (up: rows, mid: columns, down: none), then 2-way FSDP on rows
    let (dp, tp) = (2, 4);
    let per_block = [
        (100 / tp, 96), // up.weight, Colwise
        (100 / tp, 1),  // up.bias
        (36, 100 / tp), // mid.weight, Rowwise
        (36, 1),        // mid.bias, replicated
        (96, 36),       // down.weight
        (96, 1),        // down.bias
    ];
    let params: u64 = per_block
        .iter()
        .map(|&(r, e): &(u64, u64)| round512(r.div_ceil(dp) * e * 4))
        .sum::<u64>()
        * BLOCKS as u64;
    let before = root_state(&dir.path().join(j["file"].as_str().unwrap()), "Pre-Forward");
    assert_eq!(before["Parameter"], params, "{before}");
    // two groups communicated: the tensor-parallel and the data-parallel one
    assert_eq!(j["verdict"]["nccl_bytes"], 2u64 << 30);

    let (code, j, _) = estimate(dir.path(), &py, &[], "badmesh");
    assert_eq!(code, 5);
    let ending = &j["verdict"]["ending"];
    assert!(
        ending["message"].as_str().unwrap().contains("12"),
        "{ending}"
    );
    let text = std::fs::read_to_string(script("estimate_distributed.py")).unwrap();
    let line = text
        .lines()
        .position(|l| l.contains("init_device_mesh(\"cuda\""))
        .unwrap()
        + 1;
    assert_eq!(ending["line"], line as u64, "{ending}");
}

/// Context parallel's ring runs inside one DTensor op: what it gathers is not seen, and the
/// verdict says so, with the most it could add.
#[test]
fn context_parallel_attention_names_what_it_does_not_count() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (code, j, program) = estimate(dir.path(), &py, &[], "cp");
    assert_eq!(code, 0, "{program}\n{j}");
    assert!(program.contains("local sequence 32 done"), "{program}");
    let not_counted = j["not_counted"].as_array().unwrap();
    assert_eq!(not_counted.len(), 1, "{j}");
    // the whole keys and values, and their gradients: 2 x 2 x [1, 2, 256, 64] bf16
    let kv = 2 * 256 * 64 * 2;
    assert_eq!(not_counted[0]["bytes"], 2 * 2 * kv, "{j}");
    assert_eq!(j["verdict"]["not_counted_bytes"], 2 * 2 * kv, "{j}");
    let text = std::fs::read_to_string(script("estimate_distributed.py")).unwrap();
    let line = text
        .lines()
        .position(|l| l.contains("scaled_dot_product_attention(q, k, v, is_causal=True)"))
        .unwrap()
        + 1;
    assert_eq!(not_counted[0]["line"], line as u64, "{j}");
}

#[test]
fn ranks_out_of_range_and_unknown_torchrun_options_are_usage_errors() {
    let run = |args: &[&str]| {
        let o = memtrack().args(args).output().unwrap();
        (
            exit_code(o.status),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (code, e) = run(&[
        "estimate",
        "--world-size",
        "4",
        "--ranks",
        "4",
        "--",
        "python",
        "t.py",
    ]);
    assert_eq!(code, 2);
    assert!(
        e.contains("rank 4 is out of range") && e.contains("0 to 3"),
        "{e}"
    );
    let (code, e) = run(&[
        "estimate",
        "--",
        "python",
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "auto",
        "t.py",
    ]);
    assert_eq!(code, 2);
    assert!(e.contains("--nproc-per-node auto"), "{e}");
}
