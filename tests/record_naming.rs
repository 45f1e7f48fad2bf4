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
