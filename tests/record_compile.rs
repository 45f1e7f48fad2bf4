//! `memtrack record` of a torch.compile'd model: the program stays compiled (a dispatch mode
//! would make dynamo skip every frame), and its compiled graphs are sampled in forward and
//! backward, named after the module that ran them.

mod common;

use common::{export, op_names, python, record, script};

#[test]
fn a_compiled_mlp_stays_compiled_and_is_sampled_in_forward_and_backward() {
    check_compiled("function"); // torch.compile(model)
}

#[test]
fn a_module_compiled_in_place_is_sampled_as_that_module() {
    check_compiled("method"); // model.compile()
}

fn check_compiled(how: &str) {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let counters_path = dir.path().join("counters.json");
    let (code, stderr) = record(
        dir.path(),
        "compiled.pkl",
        &[],
        &py,
        &[
            &script("compiled_mlp.py"),
            counters_path.to_str().unwrap(),
            "3",
            how,
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("global hooks"), "{stderr}");
    // dynamo's own view, from inside the recorded program
    let counters: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&counters_path).unwrap()).unwrap();
    assert!(counters["frames"]["ok"].as_u64().unwrap() > 0, "{counters}");
    assert_eq!(
        counters["graph_breaks"], 0,
        "memtrack's hooks broke a graph: {counters}"
    );
    // and the same program run plainly: dynamo compiles the same frames, none of memtrack's
    // (its global hooks, which torch.compile(module) calls outside the compiled forward,
    // were each compiled as a frame of their own: 3 frames where the program has 1)
    let plain = run_plain(&py, dir.path(), "compiled_mlp.py", &["3", how]);
    assert_eq!(
        counters["frames"], plain["frames"],
        "dynamo compiled other frames under memtrack than without it"
    );

    let j = export(&dir.path().join("compiled.pkl"));
    let compile = &j["memtrack"]["compile"];
    assert_eq!(compile["frames_ok"], counters["frames"]["ok"]);
    let regions: Vec<(&str, u64)> = compile["regions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["region"].as_str().unwrap(),
                r["graph_calls"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(regions, [("MLP.forward", 3), ("MLP.backward", 3)]);

    let names = op_names(&j);
    let at = |name: &str| {
        names
            .iter()
            .position(|n| *n == name)
            .unwrap_or_else(|| panic!("no {name} in {names:?}"))
    };
    // the last step: its forward graph between fw_start and fw_bw_boundary, backward after
    let fw = at("MLP.forward.compiled_graph_4");
    let bw = at("MLP.backward.compiled_graph_5");
    let marker = |name: &str| {
        j["markers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == name)
            .unwrap()["op_index"]
            .as_u64()
            .unwrap() as usize
    };
    let (start, boundary) = (marker("fw_start"), marker("fw_bw_boundary"));
    assert!(
        start <= fw && fw < boundary && boundary <= bw,
        "{start} {fw} {boundary} {bw}"
    );
    // what the forward graph saved for backward is counted as the module's activations
    let ops = j["ops"].as_array().unwrap();
    let before = ops[start.saturating_sub(1)]["allocated_bytes"]
        .as_f64()
        .unwrap();
    let after_fw = ops[fw]["allocated_bytes"].as_f64().unwrap();
    assert!(
        after_fw >= before + 32.0 * 128.0 * 4.0,
        "{before} -> {after_fw}"
    );
    let summary = common::stdout(&["summary", dir.path().join("compiled.pkl").to_str().unwrap()]);
    assert!(
        summary.contains("torch.compile: 1 of 1 frames compiled, 0 graph breaks")
            && summary.contains("MLP.forward (3 calls), MLP.backward (3 calls)"),
        "{summary}"
    );
}

/// Run `tests/py/SCRIPT COUNTERS.json ARGS…` without memtrack; the counters it wrote.
fn run_plain(
    py: &std::path::Path,
    dir: &std::path::Path,
    name: &str,
    args: &[&str],
) -> serde_json::Value {
    let path = dir.join(format!("plain-{name}.json"));
    let o = std::process::Command::new(py)
        .arg(script(name))
        .arg(&path)
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// PyTorch's compiled-optimizer recipe (`torch.compile` of a function that calls
/// `opt.step()`): dynamo traces the optimizer's global step hooks, memtrack's. They used to
/// be traced for real: a graph break in the agent's JSON writer and twice the frames.
#[test]
fn a_compiled_optimizer_step_is_compiled_as_without_memtrack() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let counters_path = dir.path().join("counters.json");
    let (code, stderr) = record(
        dir.path(),
        "opt.pkl",
        &[],
        &py,
        &[
            &script("compiled_optimizer.py"),
            counters_path.to_str().unwrap(),
            "3",
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    let recorded: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&counters_path).unwrap()).unwrap();
    let plain = run_plain(&py, dir.path(), "compiled_optimizer.py", &["3"]);
    for key in ["graph_breaks", "graph_break_reasons", "losses"] {
        assert_eq!(
            recorded[key], plain[key],
            "{key}: recorded {recorded}, plain {plain}"
        );
    }
    // no frame of memtrack's is compiled (there were 20 for the program's 10). Recorded runs
    // can offer dynamo one frame fewer than plain ones (torch 2.15: 9 of 10; the same frames
    // are traced, TORCH_LOGS=dynamo lists them), never more.
    let frames = |c: &serde_json::Value| c["frames"]["total"].as_u64().unwrap();
    assert!(
        frames(&recorded) <= frames(&plain),
        "recorded {recorded}, plain {plain}"
    );

    let j = export(&dir.path().join("opt.pkl"));
    assert_eq!(j["memtrack"]["exit"]["code"], 0);
    assert_eq!(
        j["memtrack"]["compile"]["frames_ok"],
        recorded["frames"]["ok"]
    );
    // a compiled step runs no hook: its state changing ends each of the 3 iterations
    assert_eq!(
        j["memtrack"]["iteration_starts"].as_array().unwrap().len(),
        3
    );
    // the step's compiled graphs are sampled, in each of the 3 iterations
    let names = op_names(&j);
    let graphs = names
        .iter()
        .filter(|n| n.contains(".compiled_graph_"))
        .count();
    assert!(graphs >= 3, "{names:?}");
    // Adam's state, made inside the compiled step, is Optstate: exp_avg and exp_avg_sq as
    // large as the parameters, plus a 4-byte step per parameter (4 of them)
    let peak = &j["memtrack"]["peak"]["cpu"];
    let params = peak["Parameter"].as_u64().unwrap();
    assert_eq!(params, (64 * 64 + 64 + 64 * 10 + 10) * 4);
    assert_eq!(
        peak["Optstate"].as_u64().unwrap(),
        2 * params + 4 * 4,
        "{peak}"
    );
}
