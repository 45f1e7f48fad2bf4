//! The growth line of a stats file's `summary`: what is retained per iteration, or that
//! memory is flat.

use crate::analysis::growth::Growth;
use crate::model::{format_bytes, Units};

use super::document::Document;
use super::signed;
use super::table::Table;

/// One paragraph saying whether memory grows across iterations, by how much, and in which
/// categories.
pub(super) fn write(doc: &mut Document, g: &Growth, units: Units) {
    let measured = |g: &Growth| {
        format!(
            "iterations {}-{}",
            g.warmup_iterations + 1,
            g.warmup_iterations + g.allocated_at_start_bytes.len()
        )
    };
    let text = match (g.verdict, g.bytes_per_iteration) {
        (_, None) if g.iterations == 0 => {
            "Unknown: the file has no fw_start markers, so no iterations to compare.".to_string()
        }
        ("unknown", _) | (_, None) => format!(
            "Unknown: {} iteration{} (the first is warm-up; at least {} are needed to \
             compare the start of one iteration with the next){}.",
            g.iterations,
            if g.iterations == 1 { "" } else { "s" },
            g.warmup_iterations.max(1) + 2,
            if g.iterations <= 1 {
                ". A MemoryTracker file keeps only the last iteration's markers; `memtrack \
                 record` keeps every iteration"
            } else {
                ""
            }
        ),
        ("flat", Some(_)) => format!(
            "Flat: allocated at the start of each iteration after warm-up ({}) stays \
             at {}.",
            measured(g),
            format_bytes(g.allocated_at_start_bytes[0], units),
        ),
        (verdict, Some(per)) => {
            let first = g.allocated_at_start_bytes[0];
            let last = g.allocated_at_start_bytes[g.allocated_at_start_bytes.len() - 1];
            let how = match verdict {
                "grows" => "retained per iteration after warm-up".to_string(),
                "shrinks" => "per iteration after warm-up: memory is given back".to_string(),
                _ => "per iteration after warm-up on average, up and down".to_string(),
            };
            let mut s = format!(
                "{} {how} ({}: allocated at each start rose at {} of {} steps, {} to \
                 {})",
                signed(per, units),
                measured(g),
                g.rising_steps,
                g.steps,
                format_bytes(first, units),
                format_bytes(last, units),
            );
            if !g.categories.is_empty() {
                let cats: Vec<String> = (g.categories.iter())
                    .map(|c| format!("{} {}", c.category, signed(c.bytes_per_iteration, units)))
                    .collect();
                s.push_str(&format!(
                    "; by category, at the start of the forward: {}",
                    cats.join(", ")
                ));
            }
            s.push('.');
            s
        }
    };
    doc.heading("Growth across iterations");
    doc.para(&text);
    if let Some(checked) = g.retained_iterations_checked.filter(|_| !g.ops.is_empty()) {
        doc.para(&format!(
            "Allocations still alive two iterations after the one that made them ({checked} \
             iteration{} checked), per iteration:",
            if checked == 1 { "" } else { "s" }
        ));
        let mut t = Table::new(&[
            ">per iteration",
            ">tensors",
            ">iterations",
            "category",
            "op",
        ]);
        for o in &g.ops {
            t.row(vec![
                format_bytes(o.bytes_per_iteration, units),
                format!("{:.1}", o.tensors_per_iteration),
                format!("{} of {checked}", o.iterations),
                o.category.clone(),
                o.name.clone(),
            ]);
        }
        doc.table(&t);
        let modules: Vec<String> = (g.modules.iter())
            .map(|m| format!("{} {}", m.name, format_bytes(m.bytes_per_iteration, units)))
            .collect();
        doc.para(&format!("By module: {}.", modules.join(", ")));
    }
}
