//! `memtrack record` of several processes: every torchrun rank connects and gets its own file;
//! spawned workers too, without taking the program's output.

mod common;

use common::{export, memtrack_process as memtrack, python, record, script};

#[test]
fn two_ranks_with_gloo_give_two_complete_files_and_a_cross_rank_summary() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (code, stderr) = record(
        dir.path(),
        "run.pkl",
        &["--backend", "cpu"],
        &py,
        &[
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            &script("ddp_mlp.py"),
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(
        !dir.path().join("run.pkl").exists(),
        "the launcher is not recorded"
    );
    let mut peaks = Vec::new();
    for rank in 0..2 {
        let f = dir.path().join(format!("run.rank{rank}.pkl"));
        let j = export(&f);
        let mt = &j["memtrack"];
        assert_eq!(mt["rank"], rank);
        assert_eq!(mt["world_size"], 2);
        assert_eq!(mt["exit"]["ended"], "exit", "rank {rank}");
        assert_eq!(
            mt["modules"].as_array().unwrap().len(),
            2,
            "rank {rank}: 2 steps"
        );
        assert_eq!(mt["marker_events"].as_array().unwrap().len(), 4);
        let names = j["ops"].as_array().unwrap();
        assert!(names.iter().any(|o| o["name"]
            .as_str()
            .unwrap()
            .starts_with("DistributedDataParallel.module.blocks.0.fc.backward.")));
        // DDP's gradient all-reduce ran through the recorded ops
        assert!(names
            .iter()
            .any(|o| o["name"].as_str().unwrap().contains("allreduce")));
        peaks.push(mt["peak"]["cpu"]["Total"].as_i64().unwrap());
    }
    // rank 1 has a batch twice as large
    assert!(peaks[1] > peaks[0], "{peaks:?}");

    let o = memtrack()
        .current_dir(dir.path())
        .args(["summary", "run.rank0.pkl", "run.rank1.pkl"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(text.contains("Across ranks"), "{text}");
    assert!(text.contains("run.rank1.pkl"), "{text}");
}

#[test]
fn spawned_workers_write_their_own_files_and_the_program_writes_the_output() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (code, stderr) = record(
        dir.path(),
        "run.pkl",
        &["--backend", "cpu"],
        &py,
        &[&script("spawn_workers.py"), "slow-exit"],
    );
    assert_eq!(code, 0, "{stderr}");
    // the program's own process: its four training steps are in -o
    let main = export(&dir.path().join("run.pkl"));
    assert_eq!(main["memtrack"]["modules"].as_array().unwrap().len(), 4);
    let workers: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("run.worker-") && n.ends_with(".pkl"))
        .collect();
    assert_eq!(workers.len(), 1, "{workers:?}");
    let worker = export(&dir.path().join(&workers[0]));
    assert!(worker["op_count"].as_u64().unwrap() > 0);
    assert_ne!(worker["memtrack"]["pid"], main["memtrack"]["pid"]);
    // slow to leave, the worker was sent SIGTERM by the DataLoader: said so, not "vanished"
    // (issue 62, item 12)
    let exit = &worker["memtrack"]["exit"];
    assert_eq!(exit["ended"], "terminated", "{exit}");
    assert_eq!(exit["signal"], 15, "{exit}");
    assert!(
        stderr.contains("ended by its parent with signal 15 (SIGTERM"),
        "{stderr}"
    );
    assert!(!stderr.contains("vanished"), "{stderr}");
}

/// The `.pkl` files `record` wrote in `dir`, sorted.
fn written(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".pkl"))
        .collect();
    names.sort();
    names
}

#[test]
fn an_unrelated_python_subprocess_is_named_by_its_pid_not_as_a_worker() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (code, stderr) = record(
        dir.path(),
        "run.pkl",
        &["--backend", "cpu"],
        &py,
        &[&script("subprocess_tool.py")],
    );
    assert_eq!(code, 0, "{stderr}");
    let names = written(dir.path());
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names.contains(&"run.pkl".to_string()), "{names:?}");
    let tool = names.iter().find(|n| *n != "run.pkl").unwrap();
    let pid = export(&dir.path().join(tool))["memtrack"]["pid"].clone();
    assert_eq!(tool, &format!("run.pid{pid}.pkl"));
    // the program's file has its training step; each line of the report names its command
    let main = export(&dir.path().join("run.pkl"));
    assert_eq!(main["memtrack"]["modules"].as_array().unwrap().len(), 1);
    assert!(stderr.contains("--tool-only"), "{stderr}");
}

#[test]
fn a_shell_script_that_runs_python_twice_gets_one_pid_file_per_run() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    // a script file: `bash -c` would exec its last command, making that run the program's
    // own process (docs/record.md)
    let tool = script("subprocess_tool.py");
    let sh = dir.path().join("twice.sh");
    let line = format!(
        "'{0}' '{1}' --tool-only\n'{0}' '{1}' --tool-only\n",
        py.display(),
        tool
    );
    std::fs::write(&sh, line).unwrap();
    let (code, stderr) = record(
        dir.path(),
        "run.pkl",
        &["--backend", "cpu"],
        std::path::Path::new("bash"),
        &[sh.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{stderr}");
    let names = written(dir.path());
    assert_eq!(names.len(), 2, "{names:?}");
    for n in &names {
        let pid = export(&dir.path().join(n))["memtrack"]["pid"].clone();
        assert_eq!(n, &format!("run.pid{pid}.pkl"), "{names:?}");
    }
}

#[test]
fn a_process_that_execs_is_recorded_in_each_image() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (code, stderr) = record(
        dir.path(),
        "run.pkl",
        &["--backend", "cpu"],
        &py,
        &[&script("exec_self.py")],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(written(dir.path()), ["run.exec1.pkl", "run.pkl"]);
    // the script trains 1 step before its exec and 2 after (it says so)
    let before = export(&dir.path().join("run.pkl"));
    let after = export(&dir.path().join("run.exec1.pkl"));
    assert_eq!(before["memtrack"]["modules"].as_array().unwrap().len(), 1);
    assert_eq!(before["memtrack"]["exit"]["ended"], "exec");
    assert_eq!(after["memtrack"]["modules"].as_array().unwrap().len(), 2);
    assert_eq!(after["memtrack"]["exit"]["ended"], "exit");
    assert_eq!(after["memtrack"]["exit"]["code"], 0);
    assert_eq!(before["memtrack"]["pid"], after["memtrack"]["pid"]);
    assert!(!stderr.contains("recording stops here"), "{stderr}");
}

#[test]
fn a_process_whose_spool_cannot_be_written_does_not_end_with_a_silent_zero() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (code, stderr) = record(
        dir.path(),
        "run.pkl",
        &["--backend", "cpu"],
        &py,
        &[&script("spool_unwritable.py")],
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("a process stopped recording early"),
        "{stderr}"
    );
    assert!(
        stderr.contains("(No such file or directory); recording stops here"),
        "{stderr}"
    );
}
