//! `estimate`'s verdict: fits with how much to spare, or where the device runs out; and the
//! values the program read that an estimate does not have.

use std::path::Path;

use serde::Serialize;

use crate::estimate::{program::ValueRead, Verdict};
use crate::model::{format_bytes, Units};

/// `estimate --format json`.
#[derive(Serialize)]
pub struct Report<'a> {
    pub file: String,
    pub exit_code: i32,
    pub verdict: &'a Verdict,
    pub values_read: &'a [ValueRead],
}

fn b(x: u64) -> String {
    format_bytes(x as f64, Units::Auto)
}

pub fn text(file: &Path, v: &Verdict, reads: &[ValueRead], code: i32) -> String {
    let mut s = String::new();
    let usable = if v.usable_bytes == v.device_bytes {
        b(v.usable_bytes)
    } else {
        format!(
            "{} of its {} (the CUDA context takes the rest)",
            b(v.usable_bytes),
            b(v.device_bytes)
        )
    };
    s.push_str(&format!(
        "{}: estimated for {}, {usable}\n",
        crate::quote::path(file),
        v.device
    ));
    s.push_str(&format!(
        "  peak allocated {}{}\n  peak reserved  {}\n",
        b(v.peak_allocated_bytes),
        v.peak_allocated_op
            .as_deref()
            .map(|o| format!(" at {o}"))
            .unwrap_or_default(),
        b(v.peak_reserved_bytes),
    ));
    match (&v.oom, v.spare_bytes) {
        (None, Some(spare)) => {
            s.push_str(&format!("Fits, with {} to spare", b(spare)));
            if v.alloc_retries > 0 {
                s.push_str(&format!(
                    " (after {} allocation retries that free the cache: slower steps)",
                    v.alloc_retries
                ));
            }
            s.push('\n');
        }
        (Some(o), _) => {
            s.push_str(&format!(
                "Does not fit: out of memory at op {} {}{}{}, asking for {} with {} allocated and {} reserved\n",
                o.op_index,
                o.op,
                o.module
                    .as_deref()
                    .map(|m| format!(" in module {m}"))
                    .unwrap_or_default(),
                o.iteration
                    .map(|i| format!(", iteration {i}"))
                    .unwrap_or_else(|| ", before the first iteration".into()),
                b(o.requested_bytes),
                b(o.allocated_bytes),
                b(o.reserved_bytes),
            ));
        }
        _ => {}
    }
    if code != 0 {
        s.push_str(&format!(
            "The program exited with code {code}: the estimate covers what ran until then\n"
        ));
    }
    if !reads.is_empty() {
        s.push_str(
            "Values the program read, which an estimate does not have (it got zeros; what depends on them is not estimated):\n",
        );
        for r in reads {
            s.push_str(&format!(
                "  {}:{}: {} ({} time{})\n",
                r.file,
                r.line,
                r.what,
                r.count,
                if r.count == 1 { "" } else { "s" }
            ));
        }
    }
    s
}
