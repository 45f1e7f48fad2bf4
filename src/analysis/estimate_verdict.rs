//! What an estimated file says (docs/estimate.md, "The verdict"): whether the run fits the
//! device, where it runs out, or that it did not finish; and what the figures rest on —
//! branches values decided, upper bounds, convolutions whose workspaces are not modelled.

use serde::Serialize;

use crate::model::estimate::{
    EstimateFacts, Stopped, NCCL_BYTES, OOM_OP_INDEX, OOM_REQUESTED, USABLE_BYTES,
};
use crate::model::{op_module, TrackerStats};

/// Whether the estimated run fits the device, and how far to trust that.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Verdict {
    /// The rank of a distributed job, and its world; None for a program of one process.
    pub rank: Option<i64>,
    pub world_size: Option<i64>,
    pub device: String,
    pub device_bytes: u64,
    /// What the allocator may use: the device less its CUDA context (named devices).
    pub usable_bytes: u64,
    /// Of that, what NCCL's buffers are allowed (a distributed job: the allowance for each
    /// process group that communicated); the allocator has the rest.
    pub nccl_bytes: u64,
    pub peak_allocated_bytes: u64,
    pub peak_allocated_op: Option<String>,
    pub peak_reserved_bytes: u64,
    /// Whether it fits; None where the run did not finish (the figures are what ran).
    pub fits: Option<bool>,
    pub finished: bool,
    /// How the run ended, where it did not finish.
    pub ending: Option<Ending>,
    /// The last op recorded, where the run did not finish: how far it got.
    pub reached: Option<Place>,
    /// Values the estimate does not have decided branches (`EstimateFacts::branches`): the
    /// figures hold for the path the program took.
    pub path_taken_only: bool,
    /// A data-dependent op was sized by its upper bound: the figures are upper bounds.
    pub upper_bound: bool,
    /// The program ran convolutions: reserved may be higher by cuDNN's workspaces.
    pub convolutions: bool,
    /// usable − NCCL's allowance − peak reserved, when it fits.
    pub spare_bytes: Option<u64>,
    pub alloc_retries: i64,
    pub oom: Option<OomPlace>,
}

/// An op of the run: its index, name, module and iteration.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Place {
    pub op_index: usize,
    pub op: String,
    pub module: Option<String>,
    /// 1-based iteration; None before the first forward.
    pub iteration: Option<usize>,
}

/// Where the device would run out.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OomPlace {
    #[serde(flatten)]
    pub at: Place,
    pub requested_bytes: u64,
    pub allocated_bytes: u64,
    pub reserved_bytes: u64,
}

/// How a run that did not finish ended.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Ending {
    /// An uncaught exception: its type, its message's first line, and where it was raised.
    Exception {
        exception: String,
        message: String,
        file: Option<String>,
        line: Option<i64>,
    },
    /// Killed by a signal (a `timeout`, Ctrl-C, the OOM killer).
    Signal { signal: i64 },
    /// The estimate stopped it: a read deciding a branch repeated past the limit.
    Stopped(Stopped),
    /// It exited with this code.
    Exit { code: i64 },
    /// It vanished without a word (its exit is not known).
    Vanished,
}

fn place(stats: &TrackerStats, i: usize) -> Place {
    let op = if i < stats.names.len() {
        stats.names.get(i).to_string()
    } else {
        "?".into()
    };
    let iteration = stats.record.as_ref().and_then(|r| {
        r.iteration_starts
            .iter()
            .rposition(|&s| s as usize <= i)
            .map(|k| k + 1)
    });
    Place {
        op_index: i,
        module: op_module(&op)
            .filter(|m| !m.is_empty() && *m != "Global")
            .map(str::to_string),
        op,
        iteration,
    }
}

/// How the run ended, where it did not run to its end (exit code 0 after its last line).
fn ending(stats: &TrackerStats) -> Option<Ending> {
    let r = stats.record.as_ref()?;
    if let Some(s) = r.estimate.as_ref().and_then(|f| f.stopped.clone()) {
        return Some(Ending::Stopped(s));
    }
    let exit = r.exit.as_ref()?;
    if let Some(text) = &exit.exception {
        let (exception, message) = raised(text);
        return Some(Ending::Exception {
            exception,
            message,
            file: exit.exception_at.as_ref().map(|(f, _)| f.clone()),
            line: exit.exception_at.as_ref().map(|&(_, l)| l),
        });
    }
    if let Some(signal) = exit.signal {
        return Some(Ending::Signal { signal });
    }
    match exit.code {
        Some(0) => None,
        Some(code) => Some(Ending::Exit { code }),
        // a file recovered from a journal knows no exit code: how the agent said it ended
        None => match exit.ended.as_deref() {
            Some("exit") => None,
            Some("signal") => Some(Ending::Signal { signal: 15 }),
            _ => Some(Ending::Vanished),
        },
    }
}

/// The exception and the first line of its message from a Python traceback. Read forwards:
/// a traceback block (its header, then its frames: `  File …` and indented source lines) ends
/// at `Type: message`, whose message may go on over more lines, even holding another
/// traceback (mp.spawn's ProcessRaisedException holds the worker's); a chained exception's
/// block follows a separator line. The last block's exception is the one that ended it.
fn raised(traceback: &str) -> (String, String) {
    const HEADER: &str = "Traceback (most recent call last):";
    const CHAINED: [&str; 2] = [
        "During handling of the above exception, another exception occurred:",
        "The above exception was the direct cause of the following exception:",
    ];
    let mut lines = traceback.lines().peekable();
    let mut last = "";
    let mut expecting = true; // at the start, or after a chain's separator
    while let Some(line) = lines.next() {
        if CHAINED.contains(&line) {
            expecting = true;
        } else if expecting && line == HEADER {
            expecting = false;
            while lines
                .peek()
                .is_some_and(|l| l.starts_with(' ') || l.is_empty())
            {
                lines.next();
            }
            last = lines.next().unwrap_or("");
        }
    }
    if last.is_empty() {
        // no traceback (an exception raised without frames): its line alone
        last = traceback
            .lines()
            .rfind(|l| !l.starts_with(' ') && !l.is_empty())
            .unwrap_or("");
    }
    match last.split_once(": ") {
        Some((t, m)) => (t.trim().to_string(), m.trim().to_string()),
        None => (last.trim().trim_end_matches(':').to_string(), String::new()),
    }
}

/// Whether the program ran a convolution (cuDNN's, on CUDA).
fn convolutions(stats: &TrackerStats) -> bool {
    (0..stats.names.len()).any(|i| {
        let n = stats.names.get(i);
        n.contains(".convolution.") || n.contains("convolution_backward")
    })
}

/// The verdict of an estimated file (None for a file that is not one).
pub fn verdict(stats: &TrackerStats) -> Option<Verdict> {
    let r = stats.record.as_ref()?;
    if r.backend != "estimate" {
        return None;
    }
    let stat = |k: &str| r.memory_stats.get(k).map_or(0, |&v| v.max(0) as u64);
    let device_bytes = r.device_total_bytes.unwrap_or(0);
    let usable_bytes = r
        .memory_stats
        .get(USABLE_BYTES)
        .map_or(device_bytes, |&v| v as u64);
    let peak_reserved_bytes = stat("reserved_bytes.all.peak");
    let nccl_bytes = stat(NCCL_BYTES);
    let peak_at = stats
        .allocated
        .iter()
        .enumerate()
        .fold(None, |best: Option<(usize, f64)>, (i, &v)| match best {
            Some((_, b)) if b >= v => best,
            _ => Some((i, v)),
        })
        .map(|(i, _)| stats.names.get(i).to_string());
    let oom = r.memory_stats_oom.get(OOM_OP_INDEX).map(|&i| {
        let o = |k: &str| r.memory_stats_oom.get(k).map_or(0, |&v| v.max(0) as u64);
        OomPlace {
            at: place(stats, i.max(0) as usize),
            requested_bytes: o(OOM_REQUESTED),
            allocated_bytes: o("allocated_bytes.all.current"),
            reserved_bytes: o("reserved_bytes.all.current"),
        }
    });
    let ending = ending(stats);
    let finished = ending.is_none();
    let (branches, bounded) = r.estimate.as_ref().map_or((false, false), |f| {
        (f.branches().next().is_some(), !f.upper_bounds.is_empty())
    });
    // running out is known even of a run that stopped after it
    let fits = match (&oom, finished) {
        (Some(_), _) => Some(false),
        (None, true) => Some(true),
        (None, false) => None,
    };
    Some(Verdict {
        rank: r.rank.filter(|_| r.world_size.unwrap_or(1) > 1),
        world_size: r.world_size.filter(|&w| w > 1),
        device: r.device_name.clone().unwrap_or_default(),
        device_bytes,
        usable_bytes,
        nccl_bytes,
        peak_allocated_bytes: stat("allocated_bytes.all.peak"),
        peak_allocated_op: peak_at,
        peak_reserved_bytes,
        fits,
        finished,
        reached: (!finished && !stats.names.is_empty())
            .then(|| place(stats, stats.names.len() - 1)),
        ending,
        path_taken_only: branches,
        upper_bound: bounded,
        convolutions: convolutions(stats),
        spare_bytes: (fits == Some(true)).then(|| {
            usable_bytes
                .saturating_sub(nccl_bytes)
                .saturating_sub(peak_reserved_bytes)
        }),
        alloc_retries: stats.num_alloc_retries,
        oom,
    })
}

/// The estimate's facts of a file (empty for a file without them).
pub fn facts(stats: &TrackerStats) -> EstimateFacts {
    stats
        .record
        .as_ref()
        .and_then(|r| r.estimate.clone())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::raised;

    #[test]
    fn the_exception_is_the_line_after_the_last_frame() {
        let t = "Traceback (most recent call last):\n  File \"x.py\", line 3, in <module>\n    raise ValueError(f\"got {a}\\n{b}\")\n    ^^^\nValueError: got [4, 9]\nand more\n";
        assert_eq!(raised(t), ("ValueError".into(), "got [4, 9]".into()));
        let chained = format!("{t}\nDuring handling of the above exception, another exception occurred:\n\nTraceback (most recent call last):\n  File \"y.py\", line 1, in f\n    g()\nKeyError: 'k'\n");
        assert_eq!(raised(&chained), ("KeyError".into(), "'k'".into()));
        // a message that holds another traceback (mp.spawn's) is the outer exception's
        let spawned = "Traceback (most recent call last):\n  File \"p.py\", line 16, in <module>\n    mp.spawn(w, nprocs=2)\ntorch.multiprocessing.spawn.ProcessRaisedException: \n\n-- Process 1 terminated with the following error:\nTraceback (most recent call last):\n  File \"p.py\", line 12, in w\n    raise ValueError(\"x\")\nValueError: x\n";
        assert_eq!(
            raised(spawned),
            (
                "torch.multiprocessing.spawn.ProcessRaisedException".into(),
                String::new()
            )
        );
        assert_eq!(
            raised("KeyboardInterrupt\n"),
            ("KeyboardInterrupt".into(), String::new())
        );
    }
}
