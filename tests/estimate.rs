//! `memtrack estimate` on real torch programs: as if on CUDA without a GPU; parameter,
//! gradient and Adam state bytes exactly as CUDA's allocator counts them; the verdict.

mod common;

use common::{export, memtrack_process as memtrack, python, script};
use serde_json::Value;

const MIB: u64 = 1 << 20;

fn round512(n: u64) -> u64 {
    n.div_ceil(512) * 512
}

/// `memtrack estimate --format json [extra] -o OUT -- python estimate_mlp.py DIMS` in a temp
/// folder: (exit code, verdict JSON, the file's export, stderr).
fn estimate(dims: &str, extra: &[&str]) -> Option<(i32, Value, Value, String)> {
    let py = python()?;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("est.pkl");
    let o = memtrack()
        .arg("estimate")
        .args(["--format", "json", "-o"])
        .arg(&out)
        .args(extra)
        .arg("--")
        .arg(&py)
        .arg(script("estimate_mlp.py"))
        .arg(dims)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    // the program's own output comes first; the verdict follows it, from a line `{`
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    let start = stdout.rfind("\n{\n").map_or(0, |i| i + 1);
    let verdict: Value = serde_json::from_str(&stdout[start..])
        .unwrap_or_else(|e| panic!("{e}: {stdout}\n{stderr}"));
    assert!(stdout.starts_with("sum 0.0\n"), "{stdout}");
    Some((common::exit_code(o.status), verdict, export(&out), stderr))
}

#[test]
fn parameter_gradient_and_adam_state_bytes_are_the_arithmetic() {
    let Some((code, v, j, stderr)) = estimate("300,500,10", &[]) else {
        return;
    };
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(j["memtrack"]["backend"], "estimate");
    assert_eq!(v["verdict"]["fits"], true);
    // each parameter a block of its own: weight and bias of both layers, 4 bytes an element
    let params: u64 = [300 * 500, 500, 500 * 10, 10]
        .iter()
        .map(|n| round512(n * 4))
        .sum();
    // after the step: parameters, gradients, Adam's exp_avg and exp_avg_sq (its `step` is a
    // CPU tensor), the input, and cuBLAS's workspaces (forward 32 MiB + cuBLASLt's 1 MiB,
    // backward 32 MiB, on compute capability 9.0)
    let input = round512(8 * 300 * 4);
    let workspaces = 65 * MIB;
    let ops = j["ops"].as_array().unwrap();
    let last = ops.last().unwrap()["allocated_bytes"].as_f64().unwrap() as u64;
    assert_eq!(last, 4 * params + input + workspaces);
    // the per-op series are the allocator's: reserved covers allocated everywhere
    for o in ops {
        assert!(o["reserved_bytes"].as_f64() >= o["allocated_bytes"].as_f64());
    }
    // the value read is reported with the program's line, never a silent zero
    let reads = v["values_read"].as_array().unwrap();
    assert_eq!(reads.len(), 1, "{reads:?}");
    assert!(reads[0]["file"]
        .as_str()
        .unwrap()
        .ends_with("estimate_mlp.py"));
    assert_eq!(reads[0]["line"], 18);
    assert_eq!(reads[0]["what"], "float()");
}

#[test]
fn a_device_too_small_is_out_of_memory_at_the_first_backward_gemm() {
    // 50 MiB: parameters and the forward's 33 MiB of workspaces fit; backward's own 32 MiB
    // cuBLAS workspace, made by its first GEMM, does not
    let Some((code, v, _, stderr)) = estimate("300,500,10", &["--gpu", "50MiB"]) else {
        return;
    };
    assert_eq!(code, 1, "does not fit: exit 1\n{stderr}");
    let verdict = &v["verdict"];
    assert_eq!(verdict["fits"], false);
    let oom = &verdict["oom"];
    let op = oom["op"].as_str().unwrap();
    assert!(op.contains(".backward.mm."), "{op}");
    assert_eq!(oom["requested_bytes"], 32 * MIB);
    assert_eq!(oom["iteration"], 1);
    assert_eq!(verdict["usable_bytes"], 50 * MIB);
}

#[test]
fn an_unknown_gpu_is_a_usage_error() {
    let o = memtrack()
        .args(["estimate", "--gpu", "H900", "--", "python", "x.py"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("--gpu H900") && e.contains("A100-40GB"), "{e}");
}
