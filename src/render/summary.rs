//! `summary` of tracker stats as text, Markdown, CSV or JSON.

use crate::analysis::cross_rank::CrossRank;
use crate::analysis::ending::Raised;
use crate::analysis::iteration_kinds::OUTSIDE_ITERATIONS;
use crate::analysis::summary::{Phase, TrackerSummary};
use crate::model::{format_bytes, CompileInfo, Units};

use super::document::Document;
use super::table::Table;
use super::{json, signed, thousands, Format};

/// Tracker stats' `summary` in `format` (`title`: the file's name).
pub fn tracker(s: &TrackerSummary, title: &str, format: Format, units: Units) -> String {
    match format {
        Format::Json => json(s),
        Format::Csv => top_table(s, units, true).csv(),
        Format::Text | Format::Markdown => {
            let mut doc = Document::new(format);
            write_tracker(&mut doc, s, title, units);
            doc.close_up();
            doc.finish()
        }
    }
}

/// The text or Markdown summary of one file onto `doc`.
fn write_tracker(doc: &mut Document, s: &TrackerSummary, title: &str, units: Units) {
    let md = doc.is_markdown();
    if md {
        doc.title(title);
    }
    doc.line(&headline(s, if md { None } else { Some(title) }));
    if let Some(r) = &s.raised {
        doc.line(&raised_line(r));
    }
    if let Some(c) = s.record.as_ref().and_then(|r| r.compile.as_ref()) {
        doc.line(&compile_line(c));
    }
    for line in s.unmeasured.iter().chain(&s.threads) {
        doc.line(line);
    }
    doc.gap();

    let mut peaks = Table::new(&["series", ">peak", ">op index", "op"]);
    for p in &s.peaks {
        peaks.row(vec![
            p.series.name().into(),
            format_bytes(p.bytes, units),
            thousands(p.op_index),
            p.op.clone(),
        ]);
    }
    for d in &s.device_peaks {
        peaks.row(vec![
            format!("device (driver, GPU {})", d.nvml_index),
            format_bytes(d.bytes as f64, units),
            d.op_index.map_or_else(|| "-".into(), thousands),
            d.op.clone().unwrap_or_default(),
        ]);
    }
    doc.heading("Peaks");
    doc.table(&peaks);
    for d in &s.device_peaks {
        if let (Some(r), Some(o)) = (d.reserved_bytes, d.outside_allocator_bytes) {
            doc.gap();
            doc.para(&format!(
                "{}: the driver counted {} at its peak, where the allocator had {} reserved: {} outside PyTorch's caching allocator (CUDA context, NCCL, cuBLAS workspaces, other libraries)",
                d.device,
                format_bytes(d.bytes as f64, units),
                format_bytes(r, units),
                format_bytes(o, units),
            ));
        }
    }
    // allocated and active usually peak together: one line names both
    for (i, p) in s.peaks_inside_ops.iter().enumerate() {
        let same = |q: &crate::analysis::summary::PeakInsideOp| {
            (q.counter_peak_bytes, q.sampled_peak_bytes)
                == (p.counter_peak_bytes, p.sampled_peak_bytes)
        };
        if i > 0 && same(&s.peaks_inside_ops[i - 1]) {
            continue;
        }
        let names: Vec<&str> = s.peaks_inside_ops[i..]
            .iter()
            .take_while(|q| same(q))
            .map(|q| q.series.name())
            .collect();
        doc.gap();
        doc.para(&format!(
            "{}: the allocator's own peak counter reached {}, {} above the highest per-op sample: memory held only inside an op (workspaces, temporaries freed before it returned)",
            names.join(" and "),
            format_bytes(p.counter_peak_bytes as f64, units),
            format_bytes(p.counter_peak_bytes as f64 - p.sampled_peak_bytes, units),
        ));
    }

    if !s.phases.is_empty() {
        let mut t = Table::new(&[
            "iter",
            "phase",
            ">ops",
            ">peak allocated",
            ">at op",
            ">allocated change",
        ]);
        let shown = |i: usize| {
            s.iterations
                .iter()
                .find(|it| it.iteration == i)
                .is_none_or(|it| it.shown)
        };
        let mut folded = 0;
        for p in &s.phases {
            if !shown(p.iteration) {
                continue;
            }
            t.row(vec![
                // setup belongs to no iteration
                if p.iteration == 0 {
                    "-".to_string()
                } else {
                    p.iteration.to_string()
                },
                phase_label(p),
                format!("{}..{}", thousands(p.first_op), thousands(p.end_op)),
                format_bytes(p.peak_allocated_bytes, units),
                thousands(p.peak_op_index),
                signed(p.allocated_change_bytes, units),
            ]);
        }
        let mut notes = Vec::new();
        for it in &s.iterations {
            if !it.shown {
                folded += 1;
            }
        }
        if folded > 0 {
            notes.push(format!(
                "{} of {} iterations not shown: each is like its neighbours (the same phases and op counts); shown are the first, the highest peak and the last of each such run; --all-iterations shows all",
                thousands(folded),
                thousands(s.iterations.len())
            ));
        }
        doc.heading(if s.phases.iter().any(|p| p.phase == "earlier iterations") {
            "Forward / backward (split at fw_start and fw_bw_boundary; the file marks only its last iteration: earlier iterations is what ran before it)"
        } else if s.phases.iter().any(|p| p.phase.starts_with("partial")) {
            "Forward / backward (split at fw_start and fw_bw_boundary; partial is what ran of the iteration under way at the attach)"
        } else if s.phases.iter().any(|p| p.iteration == 0) {
            "Forward / backward (split at fw_start and fw_bw_boundary; setup is what ran before the first forward)"
        } else {
            "Forward / backward (split at fw_start and fw_bw_boundary)"
        });
        doc.table(&t);
        for n in &notes {
            doc.gap();
            doc.para(n);
        }
    }

    if let Some(mp) = &s.module_peaks {
        let mut t = Table::new(&[
            "module",
            ">parameters",
            ">peak forward",
            ">peak backward",
            "at its peak, most memory is",
        ]);
        for m in &mp.modules {
            let opt = |b: Option<i64>| {
                b.map_or_else(|| "-".to_string(), |b| format_bytes(b as f64, units))
            };
            t.row(vec![
                m.module.clone(),
                format_bytes(m.parameter_bytes as f64, units),
                opt(m.peak_forward_bytes),
                opt(m.peak_backward_bytes),
                m.top_category.map_or_else(String::new, |(c, b)| {
                    format!("{c} {}", format_bytes(b as f64, units))
                }),
            ]);
        }
        let which = if mp.chosen == OUTSIDE_ITERATIONS {
            mp.chosen.to_string()
        } else {
            format!(
                "iteration {} of {}, {}",
                mp.iteration, mp.iterations, mp.chosen
            )
        };
        doc.heading(&format!(
            "Module peaks ({which}, depth <= {}): all memory in use while the module ran, its own or not, and the category with the most of it then; `memtrack modules --iteration N` for another iteration",
            mp.max_depth
        ));
        doc.table(&t);
    }

    if let Some(c) = &s.inference_calls {
        doc.heading("Inference calls");
        doc.para(&format!(
            "{} forward-only call{} (no backward, no optimizer step) beside the training steps, in iteration{} {}: peak allocated {} at op {} ({}) in iteration {}.",
            thousands(c.calls),
            if c.calls == 1 { "" } else { "s" },
            if c.calls == 1 { "" } else { "s" },
            super::growth::number_ranges(&c.iterations),
            format_bytes(c.peak_allocated_bytes, units),
            thousands(c.peak_op_index),
            c.peak_op,
            c.peak_iteration,
        ));
    }

    super::growth::write(doc, &s.growth, units);

    doc.heading(&format!(
        "Top {} ops that generate memory (allocated after the op minus after the op before)",
        s.top_ops.len()
    ));
    doc.table(&top_table(s, units, false));
    // an attach counts what the process held then before its first op: in no op's line
    let held = held_parts(s.record.as_ref().and_then(|r| r.attached.as_ref()));
    if !held.is_empty() {
        doc.gap();
        doc.para(&format!(
            "Held at the attach, counted before the first op and so in no op's line: {}",
            held.join(", ")
        ));
    }
}

/// `The program raised RuntimeError: …, after op 89 (…) in Sequential.0's forward`.
fn raised_line(r: &Raised) -> String {
    let mut line = format!("The program raised {}", r.exception);
    if let Some((i, name)) = &r.after_op {
        line.push_str(&format!(
            "\n  after op {} ({name}), the last recorded",
            thousands(*i)
        ));
        if let (Some(m), Some(p)) = (&r.module, &r.phase) {
            let m = if m.is_empty() { "the root module" } else { m };
            line.push_str(&format!(", in {m}'s {p}"));
        }
    } else {
        line.push_str("\n  before any op was recorded");
    }
    line
}

/// The first line: ops, retries, how it was recorded and ended, the markers.
fn headline(s: &TrackerSummary, title: Option<&str>) -> String {
    let mut line = String::new();
    if let Some(t) = title {
        line.push_str(t);
        line.push_str(": ");
    }
    line.push_str(&format!(
        "{} ops, {} alloc retries",
        thousands(s.ops),
        s.num_alloc_retries
    ));
    if let Some(r) = &s.record {
        line.push_str(&format!(", recorded on {}", r.backend));
        if let Some(d) = &r.device_name {
            line.push_str(&format!(" ({d})"));
        }
        if r.observer.as_deref() == Some("compiled") {
            line.push_str(", ops seen by the compiled observer");
        }
        if let (Some(rank), Some(w)) = (r.rank, r.world_size) {
            line.push_str(&format!(", rank {rank} of {w}"));
        }
        if let Some(e) = &r.exit {
            match (e.code, e.signal) {
                (_, Some(sig)) if e.ended.as_deref() == Some("terminated") => {
                    line.push_str(&format!(", ended by its parent with signal {sig}"))
                }
                (_, Some(sig)) => line.push_str(&format!(", killed by signal {sig}")),
                (Some(c), _) if c != 0 => line.push_str(&format!(", exited with code {c}")),
                _ => {}
            }
            if e.oom {
                line.push_str(", ran out of memory");
            }
        }
        if r.attached.is_some() {
            let how = r.exit.as_ref().and_then(|e| e.ended.as_deref());
            line.push_str(&format!(
                ", attached to the running process{}: what ran before the first iteration \
                 start was under way at the attach (partial), and the last iteration {}",
                attached_held(r.attached.as_ref()),
                if how == Some("detached") {
                    "was cut by the detach"
                } else {
                    "ended with the process"
                }
            ));
        }
    }
    let every = s
        .record
        .as_ref()
        .map_or(&[][..], |r| r.marker_events.as_slice());
    if every.len() > s.markers.len() {
        // every iteration's markers, by name in order of first appearance
        let mut names: Vec<&str> = Vec::new();
        for m in every {
            if !names.contains(&m.name.as_str()) {
                names.push(&m.name);
            }
        }
        let parts: Vec<String> = names
            .iter()
            .map(|name| {
                let at: Vec<String> = every
                    .iter()
                    .filter(|m| m.name == *name)
                    .map(|m| m.op_index.to_string())
                    .collect();
                let shown = if at.len() > 8 {
                    format!(
                        "{}, … {} ({} in all)",
                        at[..3].join(", "),
                        at[at.len() - 1],
                        at.len()
                    )
                } else {
                    at.join(", ")
                };
                format!("{name} at {shown}")
            })
            .collect();
        line.push_str(&format!("; markers {}", parts.join("; ")));
    } else if !s.markers.is_empty() {
        let m: Vec<String> = s
            .markers
            .iter()
            .map(|m| format!("{}={}", m.name, m.op_index))
            .collect();
        line.push_str(&format!(
            "; markers {} (the last iteration's: MemoryTracker keeps no others)",
            m.join(" ")
        ));
    }
    line
}

/// `forward`, `forward (21 calls)`, `backward (micro-batch 2 of 4)`, `optimizer step (5
/// closure calls)`.
fn phase_label(p: &Phase) -> String {
    let mut extra = Vec::new();
    if let Some(mb) = p.micro_batch {
        extra.push(format!("micro-batch {mb} of {}", p.micro_batches));
    }
    if p.calls > 1 {
        let what = if p.phase == "optimizer step" {
            "closure calls"
        } else {
            "calls"
        };
        extra.push(format!("{} {what}", thousands(p.calls)));
    }
    if extra.is_empty() {
        p.phase.to_string()
    } else {
        format!("{} ({})", p.phase, extra.join(", "))
    }
}

/// Which regions ran compiled, and how finely they were measured.
fn compile_line(c: &CompileInfo) -> String {
    let mut line = format!(
        "torch.compile: {} of {} frames compiled, {} graph break{}",
        c.frames_ok,
        c.frames_total,
        c.graph_breaks,
        if c.graph_breaks == 1 { "" } else { "s" }
    );
    if c.regions.is_empty() {
        line.push_str("; no compiled graph ran");
        return line;
    }
    let regions: Vec<String> = c
        .regions
        .iter()
        .map(|r| {
            format!(
                "{} ({} calls)",
                r.region,
                thousands(r.graph_calls.max(0) as usize)
            )
        })
        .collect();
    line.push_str(&format!(
        "; compiled regions, one sample per graph call (compiled_graph_N) plus the ops compiled code dispatches: {}",
        regions.join(", ")
    ));
    line
}

fn top_table(s: &TrackerSummary, units: Units, raw: bool) -> Table {
    if raw {
        let mut t = Table::new(&["rank", "op_index", "op", "generated_bytes"]);
        for o in &s.top_ops {
            t.row(vec![
                o.rank.to_string(),
                o.op_index.to_string(),
                o.op.clone(),
                o.generated_bytes.to_string(),
            ]);
        }
        return t;
    }
    let mut t = Table::new(&[">#", ">op index", "op", ">generated"]);
    for o in &s.top_ops {
        t.row(vec![
            o.rank.to_string(),
            thousands(o.op_index),
            o.op.clone(),
            signed(o.generated_bytes, units),
        ]);
    }
    t
}

/// Several ranks' files side by side (`summary run.rank*.pkl`), then each file's summary.
pub fn cross_rank(
    c: &CrossRank,
    each: &[(String, TrackerSummary)],
    format: Format,
    units: Units,
) -> String {
    if format == Format::Json {
        #[derive(serde::Serialize)]
        struct Doc<'a> {
            cross_rank: &'a CrossRank,
            files: Vec<FileSummary<'a>>,
        }
        #[derive(serde::Serialize)]
        struct FileSummary<'a> {
            file: &'a str,
            summary: &'a TrackerSummary,
        }
        return json(&Doc {
            cross_rank: c,
            files: each
                .iter()
                .map(|(f, s)| FileSummary {
                    file: f,
                    summary: s,
                })
                .collect(),
        });
    }
    let mut t = Table::new(&[
        "file",
        ">rank",
        ">ops",
        ">iterations",
        ">peak allocated",
        ">at op",
        ">peak reserved",
        "ended",
    ]);
    for r in &c.ranks {
        let pa = r.peak_allocated.as_ref();
        t.row(vec![
            r.file.clone(),
            r.rank.map_or_else(|| "-".into(), |x| x.to_string()),
            thousands(r.ops),
            r.iterations.to_string(),
            pa.map_or_else(|| "-".into(), |p| format_bytes(p.bytes, units)),
            pa.map_or_else(|| "-".into(), |p| thousands(p.op_index)),
            r.peak_reserved
                .as_ref()
                .map_or_else(|| "-".into(), |p| format_bytes(p.bytes, units)),
            match (r.exit_signal, r.ended.as_deref()) {
                (Some(sig), _) => format!("signal {sig}"),
                (None, Some(e)) => e.to_string(),
                _ => "-".into(),
            },
        ]);
    }
    if format == Format::Csv {
        return t.csv();
    }
    let mut doc = Document::new(format);
    doc.title("Across ranks");
    doc.table(&t);
    if let Some(s) = c.peak_allocated_spread {
        doc.gap();
        doc.para(&format!(
            "The highest peak allocated is {:.1}% above the lowest.",
            s * 100.0
        ));
    }
    for (f, s) in each {
        doc.gap();
        write_tracker(&mut doc, s, f, units);
    }
    doc.close_up();
    doc.finish()
}

/// ` (holding parameters 1 MiB, …)`: what `attach` found held, where it found any.
fn attached_held(a: Option<&crate::model::Attached>) -> String {
    let parts = held_parts(a);
    if parts.is_empty() {
        String::new()
    } else {
        format!(" (holding {} then)", parts.join(", "))
    }
}

/// `parameters 1 MiB`, …: what `attach` found held, where it found any.
fn held_parts(a: Option<&crate::model::Attached>) -> Vec<String> {
    let Some(a) = a else { return Vec::new() };
    (a.held.iter())
        .filter(|(_, &b)| b > 0)
        .map(|(k, &b)| {
            format!(
                "{} {}",
                k.replace('_', " "),
                crate::model::format_bytes(b as f64, crate::model::Units::Auto)
            )
        })
        .collect()
}
