//! `estimate`'s verdict: fits with how much to spare, where the device runs out, or that the
//! program did not finish; then what the figures rest on (branches values decided, upper
//! bounds, convolutions), the values read that an estimate does not have, and the files the
//! program saved that were not written.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::analysis::estimate_verdict::{Ending, Place, Verdict};
use crate::model::estimate::EstimateFacts;
use crate::model::{format_bytes, Units};
use crate::render::table::Table;

/// How much more ResNet-18's reserved memory was on an H100 than the estimate, for want of
/// cuDNN's workspaces (docs/estimate.md, "Accuracy").
pub const CONVOLUTION_RESERVED_GAP: &str = "22%";

/// `estimate --format json`.
#[derive(Serialize)]
pub struct Report<'a> {
    pub file: String,
    /// The program's own exit code (128 + a signal that killed it).
    pub exit_code: i32,
    pub verdict: &'a Verdict,
    pub values_read: &'a [crate::model::estimate::ValueRead],
    pub upper_bounds: &'a [crate::model::estimate::UpperBound],
    pub unwritten: &'a [crate::model::estimate::Unwritten],
}

/// `estimate --format json` of several ranks.
#[derive(Serialize)]
pub struct Ranks<'a> {
    pub ranks: Vec<Report<'a>>,
}

/// The ranks side by side: what each holds at its peaks, and its verdict.
pub fn ranks_table(reports: &[(PathBuf, i32, Verdict, EstimateFacts)]) -> String {
    let mut t = Table::new(&["rank", "peak allocated", "peak reserved", "verdict", "file"]);
    for (file, _, v, _) in reports {
        let verdict = match (v.finished, v.fits, v.spare_bytes) {
            (false, _, _) => "did not finish".to_string(),
            (true, Some(false), _) => "does not fit".to_string(),
            (true, Some(true), Some(spare)) if v.path_taken_only => {
                format!("fits on the path taken, {} spare", b(spare))
            }
            (true, Some(true), Some(spare)) => format!("fits, {} spare", b(spare)),
            _ => "-".to_string(),
        };
        t.row(vec![
            v.rank.map_or_else(|| "-".into(), |r| r.to_string()),
            b(v.peak_allocated_bytes),
            b(v.peak_reserved_bytes),
            verdict,
            crate::quote::title(file.as_os_str()).into_owned(),
        ]);
    }
    format!("Ranks:\n{}", t.text())
}

fn b(x: u64) -> String {
    format_bytes(x as f64, Units::Auto)
}

fn at(file: &str, line: u32) -> String {
    // a program's path, as the program's files are named: shown, never acted on
    format!("{}:{line}", crate::quote::visible(file))
}

fn place(p: &Place) -> String {
    format!(
        "op {} {}{}{}",
        p.op_index,
        p.op,
        p.module
            .as_deref()
            .map(|m| format!(" in module {m}"))
            .unwrap_or_default(),
        p.iteration
            .map(|i| format!(", iteration {i}"))
            .unwrap_or_else(|| ", before the first iteration".into()),
    )
}

/// The first line of a run that did not finish.
fn did_not_finish(v: &Verdict) -> String {
    let how = match &v.ending {
        Some(Ending::Exception {
            exception,
            message,
            file,
            line,
        }) => {
            let whence = match (file, line) {
                (Some(f), Some(l)) => format!(" at {f}:{l}"),
                _ => String::new(),
            };
            let msg = if message.is_empty() {
                String::new()
            } else {
                format!(" ({})", first_chars(message, 160))
            };
            format!("the program raised {exception}{whence}{msg}")
        }
        Some(Ending::Signal { signal }) => format!("the program was killed by signal {signal}"),
        Some(Ending::Stopped(s)) => format!(
            "stopped by the estimate: {} at {} repeated {} times (limit {}, --max-repeats): a loop whose end depends on a value the estimate does not have",
            s.what,
            at(&s.file, s.line),
            s.count,
            s.limit
        ),
        Some(Ending::Exit { code }) => format!("the program exited with code {code}"),
        Some(Ending::Vanished) | None => "the program ended without a word".into(),
    };
    let reached = v
        .reached
        .as_ref()
        .map(|p| format!("; it got to {}", place(p)))
        .unwrap_or_default();
    format!("Did not finish: {how}{reached}\n")
}

fn first_chars(s: &str, n: usize) -> String {
    match s.char_indices().nth(n) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

pub fn text(file: &Path, v: &Verdict, facts: &EstimateFacts) -> String {
    let mut s = String::new();
    if !v.finished {
        s.push_str(&did_not_finish(v));
    }
    let usable = if v.usable_bytes == v.device_bytes {
        b(v.usable_bytes)
    } else {
        format!(
            "{} of its {} (the CUDA context takes the rest)",
            b(v.usable_bytes),
            b(v.device_bytes)
        )
    };
    let what = if v.finished {
        "estimated"
    } else {
        "what ran, estimated"
    };
    let rank = match (v.rank, v.world_size) {
        (Some(r), Some(w)) => format!(" as rank {r} of {w}"),
        _ => String::new(),
    };
    s.push_str(&format!(
        "{}: {what}{rank} for {}, {usable}\n",
        crate::quote::path(file),
        v.device
    ));
    if v.nccl_bytes > 0 {
        let groups = match facts.process_groups.len() {
            1 => "the process group".to_string(),
            n => format!("each of the {n} process groups"),
        };
        s.push_str(&format!(
            "  less {} for NCCL's buffers: an allowance of {} for {groups} that communicated (not measured; --nccl-allowance)\n",
            b(v.nccl_bytes),
            b(facts.nccl_allowance_bytes),
        ));
    }
    let bound = if v.upper_bound {
        " (an upper bound)"
    } else {
        ""
    };
    s.push_str(&format!(
        "  peak allocated {}{}{bound}\n  peak reserved  {}{bound}\n",
        b(v.peak_allocated_bytes),
        v.peak_allocated_op
            .as_deref()
            .map(|o| format!(" at {o}"))
            .unwrap_or_default(),
        b(v.peak_reserved_bytes),
    ));
    let branches: Vec<String> = facts.branches().map(|r| at(&r.file, r.line)).collect();
    let path = if v.path_taken_only {
        format!(
            ", on the path the program took: values the estimate does not have decided {} at {} (other values may take another path)",
            if branches.len() == 1 { "a branch" } else { "branches" },
            branches.join(", ")
        )
    } else {
        String::new()
    };
    match (&v.oom, v.fits, v.spare_bytes) {
        (None, Some(true), Some(spare)) => {
            s.push_str(&format!("Fits, with {} to spare", b(spare)));
            if v.alloc_retries > 0 {
                s.push_str(&format!(
                    " (after {} allocation retries that free the cache: slower steps)",
                    v.alloc_retries
                ));
            }
            s.push_str(&path);
            s.push('\n');
        }
        (Some(o), _, _) => {
            s.push_str(&format!(
                "Does not fit: out of memory at {}, asking for {} with {} allocated and {} reserved{path}\n",
                place(&o.at),
                b(o.requested_bytes),
                b(o.allocated_bytes),
                b(o.reserved_bytes),
            ));
        }
        _ => s.push_str("No verdict: what the rest of the program needs is not known\n"),
    }
    if v.upper_bound {
        s.push_str("Upper bounds: these ops' sizes depend on values; each was sized as if every element were selected:\n");
        for u in &facts.upper_bounds {
            s.push_str(&format!(
                "  {}: {} ({})\n",
                at(&u.file, u.line),
                u.op,
                times(u.count)
            ));
        }
    }
    if v.convolutions {
        s.push_str(&format!(
            "Reserved may be higher: cuDNN's convolution workspaces are not modelled (ResNet-18 on an H100 reserved {CONVOLUTION_RESERVED_GAP} more than estimated)\n"
        ));
    }
    if !facts.reads.is_empty() {
        s.push_str(
            "Values the program read, which an estimate does not have (it got zeros; what depends on them is not estimated):\n",
        );
        for r in &facts.reads {
            s.push_str(&format!(
                "  {}: {} ({}){}\n",
                at(&r.file, r.line),
                r.what,
                times(r.count),
                if r.branch { ", decided a branch" } else { "" }
            ));
        }
    }
    if !facts.unwritten.is_empty() {
        s.push_str("Not written (the estimate has no values to save; existing files are left as they were):\n");
        for u in &facts.unwritten {
            s.push_str(&format!(
                "  {} by {} at {} ({})\n",
                u.path,
                u.what,
                at(&u.file, u.line),
                times(u.count)
            ));
        }
    }
    s
}

fn times(n: u64) -> String {
    format!("{n} time{}", if n == 1 { "" } else { "s" })
}
