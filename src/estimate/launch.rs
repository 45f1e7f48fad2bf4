//! The job an estimate runs (docs/estimate.md, "Distributed jobs"): a `torchrun` command is
//! read for its world (`--nnodes` × `--nproc-per-node`) and turned into the Python command
//! each rank would run, given torchrun's environment; `--world-size` does the same for a
//! program started without torchrun. Nothing is spawned per rank: each rank estimated is one
//! run of the program.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

/// How the program runs: the command one rank runs, and the world around it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Job {
    /// What each rank runs (`python train.py --fsdp`).
    pub command: Vec<OsString>,
    /// Ranks in all; 1 for a program of one process.
    pub world_size: u32,
    /// Ranks per node (LOCAL_WORLD_SIZE).
    pub local_world_size: u32,
    /// Started by torchrun: its environment even for a world of one.
    pub torchrun: bool,
}

impl Job {
    /// Whether each rank runs with torchrun's environment and a fake process group.
    pub fn distributed(&self) -> bool {
        self.world_size > 1 || self.torchrun
    }

    /// torchrun's environment for `rank`.
    pub fn env(&self, rank: u32) -> Vec<(&'static str, String)> {
        let local = self.local_world_size.max(1);
        vec![
            ("RANK", rank.to_string()),
            ("WORLD_SIZE", self.world_size.to_string()),
            ("LOCAL_RANK", (rank % local).to_string()),
            ("LOCAL_WORLD_SIZE", local.to_string()),
            ("GROUP_RANK", (rank / local).to_string()),
            ("ROLE_RANK", rank.to_string()),
            ("ROLE_WORLD_SIZE", self.world_size.to_string()),
            ("MASTER_ADDR", "127.0.0.1".to_string()),
            ("MASTER_PORT", "29500".to_string()),
        ]
    }
}

/// torchrun's options that take a value (`--name value` or `--name=value`); the others it
/// has are flags. Both spellings (`-` and `_`) are accepted, as torchrun does.
const WITH_VALUE: &[&str] = &[
    "nnodes",
    "nproc-per-node",
    "node-rank",
    "rdzv-backend",
    "rdzv-endpoint",
    "rdzv-id",
    "rdzv-conf",
    "max-restarts",
    "monitor-interval",
    "start-method",
    "role",
    "master-addr",
    "master-port",
    "local-addr",
    "log-dir",
    "redirects",
    "tee",
    "logs-specs",
    "local-ranks-filter",
    "event-log-handler",
    "numa-binding",
    "signals-to-handle",
    "duplicate-stdout-filters",
    "duplicate-stderr-filters",
    "rdzv_backend",
    "r",
    "t",
];
const FLAGS: &[&str] = &[
    "standalone",
    "use-env",
    "no-python",
    "module",
    "m",
    "run-path",
    "virtual-local-rank",
];

/// Whether `command` starts torchrun: the `torchrun` script, or `python -m torch.distributed.run`
/// (or `.launch`); Some(index of its first own argument).
fn torchrun_at(command: &[OsString]) -> Option<usize> {
    let name = Path::new(command.first()?).file_name()?.to_string_lossy();
    if name == "torchrun" {
        return Some(1);
    }
    let m = command.iter().position(|a| a == "-m")?;
    let module = command.get(m + 1)?.to_string_lossy();
    matches!(
        module.as_ref(),
        "torch.distributed.run" | "torch.distributed.launch"
    )
    .then_some(m + 2)
}

/// The Python that runs torchrun's script: its `#!` line (a console script's interpreter):
/// `#!/venv/bin/python`, `#!/usr/bin/env python3`, or pip's `#!/bin/sh` then `'''exec'
/// /long/path/python` for a path too long for a `#!` line.
fn torchrun_python(torchrun: &OsStr) -> Result<OsString, String> {
    let path: PathBuf = if Path::new(torchrun).components().count() > 1 {
        PathBuf::from(torchrun)
    } else {
        std::env::var_os("PATH")
            .iter()
            .flat_map(std::env::split_paths)
            .map(|d| d.join(torchrun))
            .find(|p| p.is_file())
            .ok_or_else(|| format!("{}: not found on PATH", crate::quote::quote(torchrun)))?
    };
    let head = std::fs::read(&path).map_err(|e| format!("{}: {e}", crate::quote::path(&path)))?;
    let head = String::from_utf8_lossy(&head[..head.len().min(4096)]).into_owned();
    let mut lines = head.lines();
    let words: Vec<&str> = lines
        .next()
        .and_then(|l| l.strip_prefix("#!"))
        .map(|l| l.split_whitespace().collect())
        .unwrap_or_default();
    let interpreter = match words.as_slice() {
        [env, python, ..] if env.ends_with("/env") => Some(python.to_string()),
        [sh] if sh.ends_with("/sh") => lines
            .find_map(|l| l.strip_prefix("'''exec' "))
            .and_then(|rest| rest.split_whitespace().next())
            .map(str::to_string),
        [python, ..] => Some(python.to_string()),
        [] => None,
    };
    interpreter.map(OsString::from).ok_or_else(|| {
        format!(
            "{}: not a Python script with a #! line; run `python -m torch.distributed.run …` instead",
            crate::quote::path(&path)
        )
    })
}

fn count(what: &str, v: &str) -> Result<u32, String> {
    match v.parse::<u32>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!(
            "torchrun {what} {v}: expected a number of at least 1 (the estimate cannot count GPUs that are not here)"
        )),
    }
}

/// The job `command` runs: torchrun's world and the rank's own command, or the command as
/// given in a world of `world_size` (`--world-size`) with `gpus_per_node` ranks a node.
pub fn job(
    command: &[OsString],
    world_size: Option<u32>,
    gpus_per_node: u32,
) -> Result<Job, String> {
    let Some(start) = torchrun_at(command) else {
        let world = world_size.unwrap_or(1);
        return Ok(Job {
            command: command.to_vec(),
            world_size: world,
            local_world_size: gpus_per_node.min(world).max(1),
            torchrun: false,
        });
    };
    let (mut nnodes, mut nproc) = (1, 1);
    let (mut module, mut no_python, mut use_env) = (false, false, false);
    let launch = start > 1 && command[start - 1] == "torch.distributed.launch";
    let mut i = start;
    while i < command.len() {
        let a = command[i].to_string_lossy().into_owned();
        let Some(opt) = a.strip_prefix("--").or_else(|| a.strip_prefix('-')) else {
            break; // the script
        };
        if a == "--" {
            i += 1;
            break;
        }
        let (name, inline) = match opt.split_once('=') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None => (opt.to_string(), None),
        };
        let canonical = name.replace('_', "-");
        if FLAGS.contains(&canonical.as_str()) || FLAGS.contains(&name.as_str()) {
            match canonical.as_str() {
                "module" | "m" => module = true,
                "no-python" => no_python = true,
                "use-env" => use_env = true,
                _ => {}
            }
            i += 1;
            continue;
        }
        if !WITH_VALUE.contains(&canonical.as_str()) && !WITH_VALUE.contains(&name.as_str()) {
            return Err(format!(
                "torchrun {a}: an option the estimate does not know; give the world with --world-size and run the script with python"
            ));
        }
        let value = match inline {
            Some(v) => v,
            None => {
                i += 1;
                command
                    .get(i)
                    .map(|v| v.to_string_lossy().into_owned())
                    .ok_or_else(|| format!("torchrun {a}: a value is missing"))?
            }
        };
        match canonical.as_str() {
            "nnodes" => {
                // MIN:MAX for an elastic job: the most nodes it may have
                let max = value.rsplit(':').next().unwrap_or(&value);
                nnodes = count("--nnodes", max)?;
            }
            "nproc-per-node" => nproc = count("--nproc-per-node", &value)?,
            _ => {}
        }
        i += 1;
    }
    let Some(script) = command.get(i) else {
        return Err("torchrun: no script to run".into());
    };
    if launch && !use_env {
        return Err(
            "python -m torch.distributed.launch without --use-env passes --local-rank to the script: run it with torchrun (or --use-env), whose ranks read LOCAL_RANK"
                .into(),
        );
    }
    let mut rank_command = Vec::new();
    if !no_python {
        if start == 1 {
            rank_command.push(torchrun_python(&command[0])?);
        } else {
            // the Python and its own options (`python -u -m torch.distributed.run`)
            rank_command.extend(command[..start - 2].iter().cloned());
        }
        if module {
            rank_command.push("-m".into());
        }
    }
    rank_command.push(script.clone());
    rank_command.extend(command[i + 1..].iter().cloned());
    let world = nnodes * nproc;
    if let Some(w) = world_size.filter(|&w| w != world) {
        return Err(format!(
            "--world-size {w}, but torchrun's --nnodes {nnodes} --nproc-per-node {nproc} make {world} ranks"
        ));
    }
    Ok(Job {
        command: rank_command,
        world_size: world,
        local_world_size: nproc,
        torchrun: true,
    })
}

/// `--ranks`: `0`, `0,7`, `0-3`, `all`; each within the world.
pub fn ranks(spec: &str, world: u32) -> Result<Vec<u32>, String> {
    if spec == "all" {
        return Ok((0..world).collect());
    }
    let mut out = Vec::new();
    for part in spec.split(',').map(str::trim) {
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (a, b),
            None => (part, part),
        };
        let parse = |s: &str| {
            s.trim().parse::<u32>().map_err(|_| {
                format!("--ranks {spec}: {part:?} is not a rank, a range (0-3) or `all`")
            })
        };
        let (lo, hi) = (parse(lo)?, parse(hi)?);
        if lo > hi || hi >= world {
            return Err(format!(
                "--ranks {spec}: rank {} is out of range: the world has ranks 0 to {}",
                if lo > hi { lo } else { hi },
                world - 1
            ));
        }
        for r in lo..=hi {
            if !out.contains(&r) {
                out.push(r);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn torchrun_gives_the_world_and_each_ranks_command() {
        let j = job(
            &os(&[
                "/venv/bin/python",
                "-m",
                "torch.distributed.run",
                "--nproc-per-node",
                "8",
                "--nnodes=4",
                "--rdzv_backend",
                "c10d",
                "--standalone",
                "train.py",
                "--fsdp",
                "--nproc-per-node",
                "3",
            ]),
            None,
            8,
        )
        .unwrap();
        assert_eq!(j.world_size, 32);
        assert_eq!(j.local_world_size, 8);
        assert_eq!(
            j.command,
            os(&[
                "/venv/bin/python",
                "train.py",
                "--fsdp",
                "--nproc-per-node",
                "3"
            ])
        );
        let env = j.env(13);
        let get = |k: &str| env.iter().find(|(n, _)| *n == k).unwrap().1.clone();
        assert_eq!(
            (get("RANK"), get("LOCAL_RANK"), get("GROUP_RANK")),
            ("13".into(), "5".into(), "1".into())
        );
        // an elastic range: its most nodes
        let j = job(
            &os(&[
                "python",
                "-m",
                "torch.distributed.run",
                "--nnodes",
                "2:4",
                "--nproc_per_node=2",
                "-m",
                "pkg.train",
            ]),
            None,
            8,
        )
        .unwrap();
        assert_eq!(
            (j.world_size, j.command),
            (8, os(&["python", "-m", "pkg.train"]))
        );
    }

    #[test]
    fn the_pythons_own_options_and_a_torchrun_scripts_interpreter_are_kept() {
        let cmd = [
            "python",
            "-u",
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "t.py",
        ];
        let j = job(&os(&cmd), None, 8).unwrap();
        assert_eq!(j.command, os(&["python", "-u", "t.py"]));
        let dir = tempfile::tempdir().unwrap();
        for (head, python) in [
            ("#!/venv/bin/python3.11\n", "/venv/bin/python3.11"),
            ("#!/usr/bin/env python3\n", "python3"),
            (
                "#!/bin/sh\n'''exec' /a/long/venv/bin/python \"$0\" \"$@\"\n' '''\n",
                "/a/long/venv/bin/python",
            ),
        ] {
            let torchrun = dir.path().join("torchrun");
            std::fs::write(&torchrun, head).unwrap();
            let cmd = [torchrun.to_str().unwrap(), "--nproc-per-node", "2", "t.py"];
            assert_eq!(
                job(&os(&cmd), None, 8).unwrap().command,
                os(&[python, "t.py"])
            );
        }
        let cmd = ["python", "-m", "torch.distributed.launch", "t.py"];
        let e = job(&os(&cmd), None, 8).unwrap_err();
        assert!(e.contains("--use-env"), "{e}");
    }

    #[test]
    fn without_torchrun_the_world_is_given() {
        let j = job(&os(&["python", "t.py"]), Some(64), 8).unwrap();
        assert_eq!((j.world_size, j.local_world_size), (64, 8));
        let j = job(&os(&["python", "t.py"]), None, 8).unwrap();
        assert!(!j.distributed());
    }

    #[test]
    fn bad_worlds_and_ranks_are_named() {
        let torchrun = |nproc: &str, world: Option<u32>| {
            let cmd = [
                "python",
                "-m",
                "torch.distributed.run",
                "--nproc-per-node",
                nproc,
                "t.py",
            ];
            job(&os(&cmd), world, 8).unwrap_err()
        };
        let e = torchrun("gpu", None);
        assert!(e.contains("--nproc-per-node gpu"), "{e}");
        let e = torchrun("2", Some(4));
        assert!(e.contains("make 2 ranks"), "{e}");
        assert_eq!(ranks("0,7", 8).unwrap(), vec![0, 7]);
        assert_eq!(ranks("2-4,0", 8).unwrap(), vec![2, 3, 4, 0]);
        assert_eq!(ranks("all", 3).unwrap(), vec![0, 1, 2]);
        let e = ranks("8", 8).unwrap_err();
        assert!(
            e.contains("rank 8 is out of range") && e.contains("0 to 7"),
            "{e}"
        );
    }
}
