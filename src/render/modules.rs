//! `modules`: MemTracker's `display_modulewise_snapshots(tabulate=True)` tables, and the same
//! data as Markdown, CSV or JSON.

use crate::analysis::modules::{IterationView, ModulesView};
use crate::model::{DeviceBytes, ModuleSnapshot, Units, CATEGORIES};

use super::document::{Document, TextStyle};
use super::table::Table;
use super::{json, Format};

/// Per-module tables in `format` (`title`: the file's name), text in MemTracker's look.
pub fn modules(v: &ModulesView, title: &str, format: Format, units: Units) -> String {
    match format {
        Format::Json => json(v),
        Format::Csv => csv(v),
        Format::Text | Format::Markdown => {
            let mut doc = Document::styled(format, TextStyle::MemTracker);
            if doc.is_markdown() {
                doc.title(title);
            }
            for it in &v.iterations {
                // always say which iteration this is: by default the last of several
                doc.heading(&if v.outside_iterations {
                    format!(
                        "The other threads' calls, outside any iteration (from op {})",
                        it.first_op
                    )
                } else {
                    format!(
                        "Iteration {} of {} (from op {})",
                        it.iteration, v.iterations_recorded, it.first_op
                    )
                });
                iteration(&mut doc, it, units);
            }
            if v.iterations.is_empty() {
                doc.line("No module was called while recording.");
            }
            if let Some(p) = &v.peak {
                doc.heading("Peak of the run");
                doc.table(&snapshot_table(p, units));
            }
            doc.finish()
        }
    }
}

/// One iteration's modules: a heading, the sizes and a table of states for each.
fn iteration(doc: &mut Document, it: &IterationView, units: Units) {
    for m in &it.modules {
        let s = &m.stats;
        // MemTracker prints `Module:  fqn`
        doc.subheading(&if doc.is_markdown() {
            format!("Module: {}", s.fqn)
        } else {
            format!("Module:  {}", s.fqn)
        });
        doc.para(&format!(
            "parameters {}, buffers {}, inputs {}, outputs {}",
            amount(s.parameter_bytes, units),
            amount(s.buffer_bytes, units),
            amount(s.input_bytes, units),
            amount(s.output_bytes, units),
        ));
        let mut headers = vec!["State & Call", "Device"];
        let cats = category_headers();
        headers.extend(cats.iter().map(String::as_str));
        let mut t = Table::new(&headers);
        let mut last_call = String::new();
        for st in &s.states {
            for (i, snap) in st.calls.iter().enumerate() {
                let call = format!("{} # {}", st.state.name(), i + 1);
                for d in &snap.0 {
                    // MemTracker skips devices whose total rounds to nothing
                    if round(d.total, units) <= 0.0 {
                        continue;
                    }
                    let mut row = vec![
                        if call != last_call {
                            call.clone()
                        } else {
                            String::new()
                        },
                        d.device.clone(),
                    ];
                    last_call = call.clone();
                    row.extend(category_cells(d, units));
                    t.row(row);
                }
            }
        }
        doc.table(&t);
    }
}

/// Right-aligned column headers: MemTracker's categories, then Total.
fn category_headers() -> Vec<String> {
    (CATEGORIES.iter().chain(std::iter::once(&"Total")))
        .map(|c| format!(">{c}"))
        .collect()
}

/// One device's bytes under `category_headers`.
fn category_cells(d: &DeviceBytes, units: Units) -> impl Iterator<Item = String> + '_ {
    (d.by_category.iter().chain(std::iter::once(&d.total))).map(move |&b| amount(b, units))
}

fn snapshot_table(s: &ModuleSnapshot, units: Units) -> Table {
    let mut headers = vec!["Device"];
    let cats = category_headers();
    headers.extend(cats.iter().map(String::as_str));
    let mut t = Table::new(&headers);
    for d in &s.0 {
        let mut row = vec![d.device.clone()];
        row.extend(category_cells(d, units));
        t.row(row);
    }
    t
}

fn divisor(units: Units) -> f64 {
    match units {
        Units::KiB => 1024.0,
        Units::MiB => 1024.0 * 1024.0,
        Units::GiB => 1024.0 * 1024.0 * 1024.0,
        Units::B | Units::Auto => 1.0,
    }
}

/// MemTracker's `_rounding_fn`: bytes as they are, other units rounded to 2 decimals.
fn round(bytes: i64, units: Units) -> f64 {
    let d = divisor(units);
    if d == 1.0 {
        bytes as f64
    } else {
        (bytes as f64 / d * 100.0).round() / 100.0
    }
}

/// `1024 B`, `1.5 KiB`, `3.0 MiB`: as MemTracker prints (Python's float repr); `auto` (the
/// default) picks each number's largest unit in which it is at least 1.
fn amount(bytes: i64, units: Units) -> String {
    let u = units.resolve(bytes as f64);
    if divisor(u) == 1.0 {
        return format!("{bytes} B");
    }
    let v = round(bytes, u);
    if v.fract() == 0.0 {
        format!("{v:.1} {}", u.name())
    } else {
        format!("{v} {}", u.name())
    }
}

fn csv(v: &ModulesView) -> String {
    let mut headers = vec!["iteration", "module", "depth", "state", "call", "device"];
    headers.extend(CATEGORIES);
    headers.push("Total");
    let mut t = Table::new(&headers);
    for it in &v.iterations {
        for m in &it.modules {
            for st in &m.stats.states {
                for (i, snap) in st.calls.iter().enumerate() {
                    for d in &snap.0 {
                        let mut row = vec![
                            it.iteration.to_string(),
                            m.stats.fqn.clone(),
                            m.depth.to_string(),
                            st.state.name().to_string(),
                            (i + 1).to_string(),
                            d.device.clone(),
                        ];
                        row.extend(d.by_category.iter().map(i64::to_string));
                        row.push(d.total.to_string());
                        t.row(row);
                    }
                }
            }
        }
    }
    t.csv()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_print_as_memtracker_does() {
        assert_eq!(amount(1536, Units::B), "1536 B");
        assert_eq!(amount(1536, Units::KiB), "1.5 KiB");
        assert_eq!(amount(3 << 20, Units::MiB), "3.0 MiB");
        assert_eq!(amount(1_000_000, Units::MiB), "0.95 MiB");
        assert_eq!(amount(1536, Units::Auto), "1.5 KiB");
        assert_eq!(amount(932_980, Units::Auto), "911.11 KiB");
        assert_eq!(amount(0, Units::Auto), "0 B");
    }
}
