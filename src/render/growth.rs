//! The growth line of a stats file's `summary`: what is retained per iteration, or that
//! memory is flat.

use crate::analysis::growth::{Growth, MIN_STEPS};
use crate::model::{format_bytes, Units};

use super::document::Document;
use super::signed;
use super::table::Table;

/// One paragraph saying whether memory grows across iterations, by how much, and in which
/// categories.
pub(super) fn write(doc: &mut Document, g: &Growth, units: Units) {
    let training = g.compared == "training steps";
    let measured = |g: &Growth| {
        let numbers = number_ranges(&g.measured_iterations);
        if training {
            format!("the training steps of iterations {numbers}")
        } else {
            format!("iterations {numbers}")
        }
    };
    let what = if training {
        ("training step", "training steps")
    } else {
        ("iteration", "iterations")
    };
    let text = match (g.verdict, g.bytes_per_iteration) {
        (_, None) if g.iterations == 0 => {
            "Unknown: the file has no fw_start markers, so no iterations to compare.".to_string()
        }
        ("unknown", _) | (_, None) => format!(
            "Unknown: {} {} (the first is warm-up; at least {} are needed to \
             compare the starts of {} {} after it){}.",
            g.iterations - g.inference_calls_left_out,
            if g.iterations - g.inference_calls_left_out == 1 {
                what.0
            } else {
                what.1
            },
            g.warmup_iterations.max(1) + 1 + MIN_STEPS,
            1 + MIN_STEPS,
            what.1,
            if g.iterations <= 1 {
                ". A MemoryTracker file keeps only the last iteration's markers; `memtrack \
                 record` keeps every iteration"
            } else {
                ""
            }
        ),
        ("flat", Some(_)) => format!(
            "Flat: allocated at the start of each {} after warm-up ({}) stays \
             at {}.",
            what.0,
            measured(g),
            (part_starts(g).iter())
                .map(|&b| format_bytes(b, units))
                .collect::<Vec<_>>()
                .join(", then at "),
        ),
        (verdict, Some(per)) => {
            let first = g.allocated_at_start_bytes[0];
            let last = g.allocated_at_start_bytes[g.allocated_at_start_bytes.len() - 1];
            let how = match verdict {
                "grows" => format!("retained per {} after warm-up", what.0),
                "shrinks" => format!("per {} after warm-up: memory is given back", what.0),
                _ => format!("per {} after warm-up on average, up and down", what.0),
            };
            // from the first start to the last, where one model is trained throughout
            let span = if g.new_models_at.is_empty() {
                format!(
                    ", {} to {}",
                    format_bytes(first, units),
                    format_bytes(last, units)
                )
            } else {
                String::new()
            };
            let mut s = format!(
                "{} {how} ({}: allocated at each start rose at {} of {} steps{span})",
                signed(per, units),
                measured(g),
                g.rising_steps,
                g.steps,
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
    doc.heading(if training {
        "Growth across training steps"
    } else {
        "Growth across iterations"
    });
    doc.para(&text);
    if !g.new_models_at.is_empty() {
        let n = g.new_models_at.len();
        doc.para(&format!(
            "Iteration{} {} start{} training a model or using an optimizer that none before \
             did: each part is compared with itself, its first iteration its warm-up, as a new \
             model's parameters and state are made once.",
            if n == 1 { "" } else { "s" },
            number_ranges(&g.new_models_at),
            if n == 1 { "s" } else { "" },
        ));
    }
    if training {
        let n = g.inference_calls_left_out;
        doc.para(&format!(
            "{n} inference call{} (forward only) left out: {} start{} at another point of \
             the program than a step; they are reported under Inference calls.",
            if n == 1 { "" } else { "s" },
            if n == 1 { "it" } else { "they" },
            if n == 1 { "s" } else { "" },
        ));
    }
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

/// Allocated at the first start measured of each part ([`Growth::new_models_at`]).
fn part_starts(g: &Growth) -> Vec<f64> {
    let mut out = Vec::new();
    let mut before = 0;
    for (&it, &bytes) in g
        .measured_iterations
        .iter()
        .zip(&g.allocated_at_start_bytes)
    {
        if out.is_empty() || g.new_models_at.iter().any(|&m| before < m && m <= it) {
            out.push(bytes);
        }
        before = it;
    }
    out
}

/// 1-based numbers as ranges: `2-4, 6, 8-9`.
pub(super) fn number_ranges(numbers: &[usize]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut k = 0;
    while k < numbers.len() {
        let mut j = k;
        while j + 1 < numbers.len() && numbers[j + 1] == numbers[j] + 1 {
            j += 1;
        }
        parts.push(if j == k {
            numbers[k].to_string()
        } else {
            format!("{}-{}", numbers[k], numbers[j])
        });
        k = j + 1;
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    #[test]
    fn numbers_read_as_ranges() {
        assert_eq!(super::number_ranges(&[2, 3, 4, 6, 8, 9]), "2-4, 6, 8-9");
        assert_eq!(super::number_ranges(&[5]), "5");
        assert_eq!(super::number_ranges(&[]), "");
    }
}
