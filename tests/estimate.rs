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

/// The ops of the second training step (its forward and backward), each with the change in
/// allocated bytes it made.
fn second_step(j: &Value) -> Vec<(String, i64)> {
    let ops = j["ops"].as_array().unwrap();
    let start = j["memtrack"]["iteration_starts"][1].as_u64().unwrap() as usize;
    let allocated = |i: usize| ops[i]["allocated_bytes"].as_f64().unwrap() as i64;
    (start..ops.len())
        .map(|i| (i, ops[i]["name"].as_str().unwrap()))
        .take_while(|(_, n)| !n.starts_with("SGD") && !n.contains("record_function"))
        .map(|(i, n)| {
            let base = n.trim_end_matches(|c: char| c.is_ascii_digit());
            (
                base.trim_end_matches('_').to_string(),
                allocated(i) - allocated(i - 1),
            )
        })
        .collect()
}

#[test]
fn autocast_casts_as_cuda_would_and_allocates_as_the_cpus_own_autocast() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let run = |cmd: &[&str], device: &str, model: &str| {
        let out = dir.path().join(format!("{device}-{model}.pkl"));
        let o = memtrack()
            .args(cmd)
            .arg("-o")
            .arg(&out)
            .arg("--")
            .arg(&py)
            .arg(script("autocast_train.py"))
            .args([device, model])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(
            o.status.success(),
            "{stdout}\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
        (stdout, export(&out))
    };
    // autocast's CPU and CUDA policies agree on every op of the MLP: the same casts, in the
    // same order, and the same bytes (CUDA rounds each block up to 512 bytes)
    let (stdout, cpu) = run(&["record", "--backend", "cpu"], "cpu", "mlp");
    assert!(
        stdout.starts_with("torch.bfloat16 torch.float32"),
        "{stdout}"
    );
    let (stdout, est) = run(&["estimate"], "cuda", "mlp");
    assert!(
        stdout.starts_with("torch.bfloat16 torch.float32"),
        "{stdout}"
    );
    let (cpu, est) = (second_step(&cpu), second_step(&est));
    let names = |s: &[(String, i64)]| s.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(names(&est), names(&cpu));
    let casts = est.iter().filter(|(n, _)| n.ends_with("_to_copy.default"));
    assert!(casts.count() >= 12, "{est:?}");
    for ((name, e), (_, c)) in est.iter().zip(&cpu) {
        assert!((e - c).abs() <= 1024, "{name}: estimate {e} B, cpu {c} B");
    }
    // attention gets bf16 inputs: CUDA's flash kernel, as on an H100; the layer ends in a
    // layer_norm, which autocast runs in fp32
    let (stdout, est) = run(&["estimate"], "cuda", "transformer");
    assert!(
        stdout.starts_with("torch.float32 torch.float32"),
        "{stdout}"
    );
    let ops: Vec<&str> = (est["ops"].as_array().unwrap().iter())
        .map(|o| o["name"].as_str().unwrap())
        .collect();
    assert!(
        ops.iter()
            .any(|n| n.contains("_scaled_dot_product_flash_attention")),
        "{ops:?}"
    );
    assert!(ops.iter().any(|n| n.contains("native_layer_norm")));
}
