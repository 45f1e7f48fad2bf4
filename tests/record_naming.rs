//! Who ops belong to: forward and backward run inside `optimizer.step(closure)` (LBFGS,
//! Lightning) belong to their modules, and a leaf's backward ops to the leaf, not to the
//! ancestor whose output it shares.

mod common;

use common::{export, json_out, op_names, python, record, script};

#[test]
fn closures_and_leaf_backward_are_named_by_the_module_that_ran_them() {
    let Some(py) = python() else { return };
    for optimizer in ["adam", "lbfgs"] {
        let dir = tempfile::tempdir().unwrap();
        let (code, stderr) = record(
            dir.path(),
            "run.pkl",
            &["--backend", "cpu"],
            &py,
            &[&script("closure_naming.py"), optimizer],
        );
        assert_eq!(code, 0, "{stderr}");
        let file = dir.path().join("run.pkl");
        let j = export(&file);
        let names = op_names(&j);
        for expected in [
            "Net.fc.forward.addmm.default_",
            "MSELoss.forward.mse_loss.default_",
            // fc's output is Net's output: both backward hooks fire, fc ran the op
            "Net.fc.backward.mm.default_",
            // the ReLU's output is body's output
            "Net.body.1.backward.threshold_backward.default_",
        ] {
            assert!(
                names.iter().any(|n| n.starts_with(expected)),
                "{optimizer}: no {expected}* in {names:?}"
            );
        }
        let step_prefix = if optimizer == "adam" {
            "Adam.step."
        } else {
            "LBFGS.step."
        };
        assert!(
            names.iter().any(|n| n.starts_with(step_prefix)),
            "{optimizer}"
        );
        for n in &names {
            assert!(
                !(n.starts_with(step_prefix) && (n.contains("addmm") || n.contains("mse_loss"))),
                "{optimizer}: the closure's {n} is counted as the optimizer's"
            );
        }
        // the closure's activations are activations, not optimizer state
        let m = json_out(&[
            "modules",
            file.to_str().unwrap(),
            "--format",
            "json",
            "--iteration",
            "1",
        ]);
        let net = m["iterations"][0]["modules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["fqn"] == "Net")
            .unwrap();
        let post_fw = net["states"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["state"] == "Post-Forward")
            .unwrap();
        let cpu = &post_fw["calls"][0]["cpu"];
        assert!(
            cpu["Activation"].as_i64().unwrap() >= 16 * 64 * 4,
            "{optimizer}: {cpu}"
        );
        assert_eq!(cpu["Optstate"], 0, "{optimizer}: {cpu}");
    }
}

/// The fqn an op name starts with (`{module}.{phase}.{op}_{n}`), and its phase.
fn module_and_phase(op: &str) -> Option<(&str, &str)> {
    ["forward", "backward", "step"].iter().find_map(|p| {
        let (m, _) = op.split_once(&format!(".{p}."))?;
        Some((m, *p))
    })
}

#[test]
fn modules_that_pass_their_input_through_own_no_backward_op() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (code, stderr) = record(
        dir.path(),
        "run.pkl",
        &["--backend", "cpu"],
        &py,
        &[&script("passthrough_naming.py")],
    );
    assert_eq!(code, 0, "{stderr}");
    let j = export(&dir.path().join("run.pkl"));
    let names = op_names(&j);
    // (module, op name) of each backward op
    let backward: Vec<(&str, &str)> = names
        .iter()
        .filter_map(|n| {
            let (m, phase) = module_and_phase(n)?;
            (phase == "backward").then_some((m, *n))
        })
        .collect();
    assert!(backward.len() > 200, "{} backward ops", backward.len());
    // the script's Identity and Dropout(p=0) modules: their outputs are their inputs
    let pass_through = |m: &str| {
        m.ends_with(".drop_path")
            || m.ends_with(".pos_drop")
            || m.ends_with(".pre_logits")
            || m.ends_with(".mlp.2")
            || m.ends_with(".mlp.4")
    };
    let misnamed: Vec<&str> = backward
        .iter()
        .filter(|(m, _)| pass_through(m))
        .map(|(_, n)| *n)
        .collect();
    assert!(
        misnamed.is_empty(),
        "{} of {} backward ops named after a module that runs none: {:?}",
        misnamed.len(),
        backward.len(),
        &misnamed[..misnamed.len().min(10)]
    );
    // each op's node was created by the module below, in both blocks and both steps
    for (op, module) in [
        (
            "_scaled_dot_product_flash_attention_for_cpu_backward",
            ".attn",
        ),
        ("native_layer_norm_backward", ".norm1"),
        ("native_layer_norm_backward", ".norm2"),
        ("gelu_backward", ".mlp.1"),
    ] {
        for block in ["ViT.blocks.0", "ViT.blocks.1"] {
            let owner = format!("{block}{module}");
            let n = backward
                .iter()
                .filter(|(m, n)| *m == owner && n.contains(&format!(".{op}.")))
                .count();
            assert_eq!(n, 2, "{owner}.backward.{op}: {n} in 2 steps");
        }
    }
    let heads = backward
        .iter()
        .filter(|(m, n)| *m == "ViT.norm" && n.contains(".native_layer_norm_backward."))
        .count();
    assert_eq!(heads, 2, "ViT.norm's layer norm backward");
}

/// How many ops of `names` are `{module}.{phase}.{op}_{n}`.
fn count(names: &[&str], module: &str, phase: &str, op: &str) -> usize {
    let prefix = format!("{module}.{phase}.{op}_");
    names.iter().filter(|n| n.starts_with(&prefix)).count()
}

#[test]
fn two_models_and_optimizers_of_one_class_get_the_programs_names() {
    let Some(py) = python() else { return };
    // (mode, generator, discriminator, generator's optimizer, discriminator's, discriminator
    // calls per step)
    for (mode, gen, disc, opt_g, opt_d, disc_calls) in [
        ("plain", "gen", "disc", "opt_g", "opt_d", 3),
        (
            "lightning-style",
            "generator",
            "discriminator",
            "opt_g",
            "opt_d",
            2,
        ),
        ("anonymous", "Sequential", "Sequential#2", "", "", 1),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (code, stderr) = record(
            dir.path(),
            "run.pkl",
            &["--backend", "cpu"],
            &py,
            &[&script("gan_naming.py"), mode],
        );
        assert_eq!(code, 0, "{stderr}");
        let j = export(&dir.path().join("run.pkl"));
        let names = op_names(&j);
        // each model's two Linear layers run addmm once per call; 2 steps; generator once
        for (model, calls) in [(gen, 1), (disc, disc_calls)] {
            for layer in ["0", "2"] {
                let m = format!("{model}.{layer}");
                assert_eq!(
                    count(&names, &m, "forward", "addmm.default"),
                    2 * calls,
                    "{mode}: {m}"
                );
            }
        }
        if !opt_g.is_empty() {
            // Adam's step on the generator's 4 parameters and on the discriminator's 4:
            // the same ops, as many, under each name
            let g = names
                .iter()
                .filter(|n| n.starts_with(&format!("{opt_g}.step.")))
                .count();
            let d = names
                .iter()
                .filter(|n| n.starts_with(&format!("{opt_d}.step.")))
                .count();
            assert!(g > 0 && g == d, "{mode}: {opt_g} {g}, {opt_d} {d}");
            assert!(
                !names.iter().any(|n| n.starts_with("Adam.step.")),
                "{mode}: an optimizer still named Adam"
            );
        }
        // the module tables, every iteration, name the same modules
        let fqns: Vec<String> = j["memtrack"]["modules"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|it| it["modules"].as_array().unwrap().iter())
            .map(|m| m["fqn"].as_str().unwrap().to_string())
            .collect();
        for expected in [gen, disc] {
            assert!(fqns.iter().any(|f| f == expected), "{mode}: {fqns:?}");
        }
        if mode != "anonymous" {
            assert!(
                !fqns.iter().any(|f| f.starts_with("Sequential")),
                "{mode}: {fqns:?}"
            );
        }
    }
}

/// Per iteration of a `modules --format json` (ours or memtracker_reference.py's): each
/// module's fqn and its number of Post-Backward calls.
fn post_backward_calls(j: &serde_json::Value) -> Vec<Vec<(String, usize)>> {
    j["iterations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|it| {
            it["modules"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| {
                    let calls = m["states"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .find(|s| s["state"] == "Post-Backward")
                        .map_or(0, |s| s["calls"].as_array().unwrap().len());
                    (m["fqn"].as_str().unwrap().to_string(), calls)
                })
                .collect()
        })
        .collect()
}

#[test]
fn parametrizations_are_named_where_they_are_and_end_backward_once_per_step() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let program = script("parametrization_naming.py");
    let (code, stderr) = record(
        dir.path(),
        "run.pkl",
        &["--backend", "cpu"],
        &py,
        &[&program, "--steps", "4"],
    );
    assert_eq!(code, 0, "{stderr}");
    let file = dir.path().join("run.pkl");
    let ours = post_backward_calls(&json_out(&[
        "modules",
        file.to_str().unwrap(),
        "--format",
        "json",
        "--iteration",
        "all",
    ]));
    // MemTracker on the same model, made before the tracker: it meets each parametrization
    // where it is attached (MemTracker's own Post-Backward counts pile up: not compared)
    let o = std::process::Command::new(&py)
        .arg(script("memtracker_reference.py"))
        .arg(&program)
        .args(["--steps", "2", "--build-outside"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let theirs = post_backward_calls(&serde_json::from_slice(&o.stdout).unwrap());
    let mut their_fqns: Vec<&str> = theirs[1].iter().map(|(f, _)| f.as_str()).collect();
    their_fqns.sort();
    assert!(
        their_fqns.contains(&"Sequential.0.parametrizations.weight.0"),
        "{their_fqns:?}"
    );
    assert_eq!(ours.len(), 4, "iterations");
    // iteration 1 also holds the calls made while building the model
    for (k, it) in ours.iter().enumerate().skip(1) {
        let mut fqns: Vec<&str> = it.iter().map(|(f, _)| f.as_str()).collect();
        fqns.sort();
        assert_eq!(fqns, their_fqns, "iteration {}", k + 1);
        for (fqn, calls) in it {
            assert_eq!(*calls, 1, "iteration {}: {fqn} Post-Backward calls", k + 1);
        }
    }
}

#[test]
fn backward_of_forwards_under_torch_func_transforms_belongs_to_their_modules() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (code, stderr) = record(
        dir.path(),
        "run.pkl",
        &["--backend", "cpu"],
        &py,
        &[&script("func_transforms_backward.py")],
    );
    assert_eq!(code, 0, "{stderr}");
    // the program's `cases N threshold_backward M` (on stderr, where record's report goes)
    let passes: usize = stderr
        .lines()
        .find_map(|l| l.strip_prefix("cases ")?.split_once(" threshold_backward "))
        .map(|(_, m)| m.trim().parse().unwrap())
        .expect("the program's counts");
    let j = export(&dir.path().join("run.pkl"));
    let names = op_names(&j);
    let backward: Vec<(&str, &str)> = names
        .iter()
        .filter_map(|n| {
            let (m, phase) = module_and_phase(n)?;
            (phase == "backward").then_some((m, *n))
        })
        .collect();
    // the layers' ops (matrix products, relu's backward) are never the loss's, outside them
    let layer_op = |n: &str| {
        [".mm.", ".bmm.", ".addmm.", ".threshold_backward."]
            .iter()
            .any(|k| n.contains(k))
    };
    let global: Vec<&str> = backward
        .iter()
        .filter(|(m, n)| *m == "Global" && layer_op(n))
        .map(|(_, n)| *n)
        .collect();
    assert!(
        global.is_empty(),
        "layers' backward ops named Global: {global:?}"
    );
    // relu runs in MLP.forward: one threshold_backward per backward pass, each the MLP's
    // (the module is named by the program's variable: `net`, and `base` for the ensemble)
    let relu: Vec<&str> = backward
        .iter()
        .filter(|(_, n)| n.contains(".threshold_backward."))
        .map(|(m, _)| *m)
        .collect();
    assert_eq!(relu.len(), passes, "{relu:?}");
    assert!(relu.iter().all(|m| *m == "net" || *m == "base"), "{relu:?}");
    for layer in ["fc1", "fc2"] {
        for m in ["net", "base"] {
            let owner = format!("{m}.{layer}");
            assert!(
                backward.iter().any(|(o, n)| *o == owner && layer_op(n)),
                "no backward op of {owner}"
            );
        }
    }
}

/// LBFGS's step(closure) runs the closure several times (its line search): the summary shows
/// one optimizer step with its closure calls, not micro-batches each with a step (issue 62,
/// item 5); the closures' ops are still their modules', and the program's own forward hook
/// sees every call as alone.
#[test]
fn an_lbfgs_step_is_one_step_with_its_closure_calls() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (code, stderr) = record(
        dir.path(),
        "lbfgs.pkl",
        &["--backend", "cpu"],
        &py,
        &[&script("lbfgs_hooks.py"), "3"],
    );
    assert_eq!(code, 0, "{stderr}");
    let file = dir.path().join("lbfgs.pkl");
    let file = file.to_str().unwrap();
    let s = json_out(&["summary", file, "--format", "json"]);
    for it in 1..=3 {
        let phases: Vec<&serde_json::Value> = (s["phases"].as_array().unwrap().iter())
            .filter(|p| p["iteration"] == it)
            .collect();
        let names: Vec<&str> = phases
            .iter()
            .map(|p| p["phase"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["optimizer step", "after step"], "iteration {it}");
        assert_eq!(phases[0]["calls"], 5, "iteration {it}");
        assert!(phases.iter().all(|p| p["micro_batch"].is_null()));
    }
    let text = common::stdout(&["summary", file]);
    assert!(text.contains("optimizer step (5 closure calls)"), "{text}");
    assert!(!text.contains("micro-batch"), "{text}");
    let j = export(std::path::Path::new(file));
    let names = op_names(&j);
    for expected in [
        "Sequential.0.forward.addmm.default_",
        "Sequential.0.backward.mm.default_",
    ] {
        assert!(
            names.iter().any(|n| n.starts_with(expected)),
            "no {expected}*"
        );
    }
}
