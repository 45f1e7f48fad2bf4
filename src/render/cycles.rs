//! `cycles`: the reference cycles of a file listed by bytes held, as text, Markdown, CSV or
//! JSON. Drawings are in [`super::graph`].

use serde::Serialize;

use crate::analysis::cycles::{CycleReport, Step};
use crate::model::{format_bytes, Units};

use super::document::Document;
use super::table::Table;
use super::{json, thousands, Format};

/// `obj —ref→ obj —ref→ obj`.
pub fn path_text(steps: &[Step]) -> String {
    let mut s = String::new();
    for st in steps {
        s.push_str(&st.object);
        if let Some(r) = &st.reference {
            s.push_str(&format!(" —{r}→ "));
        }
    }
    s
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        s.chars().take(n - 1).collect::<String>() + "…"
    }
}

fn loop_text(r: &CycleReport) -> String {
    if r.cycle.is_empty() {
        "(the loop was beyond the objects kept)".into()
    } else {
        path_text(&r.cycle)
    }
}

/// The cycles by bytes held, then each in detail, in `format` (`title`: the file's name).
pub fn listing(reports: &[&CycleReport], title: &str, format: Format, units: Units) -> String {
    match format {
        Format::Json => {
            #[derive(Serialize)]
            struct Doc<'a> {
                file: &'a str,
                cycles: &'a [&'a CycleReport],
            }
            json(&Doc {
                file: title,
                cycles: reports,
            })
        }
        Format::Csv => {
            let mut t = Table::new(&[
                "number",
                "op_index",
                "generation",
                "bytes",
                "tensors",
                "objects",
                "loop",
            ]);
            for r in reports {
                t.row(vec![
                    r.number.to_string(),
                    r.op_index.to_string(),
                    r.generation.to_string(),
                    r.bytes.to_string(),
                    r.tensors.to_string(),
                    r.objects.to_string(),
                    loop_text(r),
                ]);
            }
            t.csv()
        }
        Format::Text | Format::Markdown => {
            let mut doc = Document::new(format);
            let md = doc.is_markdown();
            let b = |x: i64| format_bytes(x as f64, units);
            let total: i64 = reports.iter().map(|r| r.bytes).sum();
            if md {
                doc.title(title);
            }
            doc.para(&format!(
                "{}{} reference cycle{} held tensors ({} in all); each stayed allocated until the garbage collector freed it at the op shown",
                if md { String::new() } else { format!("{title}: ") },
                reports.len(),
                if reports.len() == 1 { "" } else { "s" },
                b(total)
            ));
            doc.gap();
            let mut t = Table::new(&[
                ">#", ">at op", ">gen", ">held", ">tensors", ">objects", "loop",
            ]);
            for r in reports {
                t.row(vec![
                    r.number.to_string(),
                    thousands(r.op_index.max(0) as usize),
                    r.generation.to_string(),
                    b(r.bytes),
                    r.tensors.to_string(),
                    r.objects.to_string(),
                    clip(&loop_text(r), 90),
                ]);
            }
            doc.table(&t);
            for r in reports {
                doc.gap();
                detail(&mut doc, r, units);
            }
            doc.close_up();
            doc.finish()
        }
    }
}

/// One cycle: its heading, its loop, and the path to each tensor it held with the stack that
/// allocated it.
fn detail(doc: &mut Document, r: &CycleReport, units: Units) {
    let b = |x: i64| format_bytes(x as f64, units);
    doc.heading(&format!(
        "Cycle {}: {} in {} tensor{}, {} objects, freed at op {} (a generation-{} collection)",
        r.number,
        b(r.bytes),
        r.tensors,
        if r.tensors == 1 { "" } else { "s" },
        r.objects,
        thousands(r.op_index.max(0) as usize),
        r.generation
    ));
    // lines that are not list items: indented under the heading in text
    let pre = if doc.is_markdown() { "" } else { "  " };
    let loop_code = doc.code(&loop_text(r));
    doc.item(&format!("loop: {loop_code}"));
    if r.omitted_objects > 0 {
        doc.line(&format!(
            "{pre}({} more objects of this collection's garbage were left out)",
            r.omitted_objects
        ));
    }
    for p in &r.tensor_paths {
        let path_code = doc.code(&path_text(&p.path));
        doc.item(&format!(
            "tensor {} ({}): {path_code}",
            p.tensor,
            b(p.bytes)
        ));
        if !p.stack.is_empty() {
            doc.line(&format!("{pre}    allocated at:"));
            for f in p.stack.iter().take(12) {
                doc.line(&format!("{pre}      {f}"));
            }
            if p.stack.len() > 12 {
                doc.line(&format!("{pre}      … {} more frames", p.stack.len() - 12));
            }
        }
    }
}
