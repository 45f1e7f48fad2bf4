//! `cycles`: the reference cycles of a file listed by bytes held, as text, Markdown, CSV or
//! JSON. Drawings are in [`super::graph`].

use serde::Serialize;

use crate::analysis::cycles::{CycleReport, Step};
use crate::model::{format_bytes, Units};

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
            let md = format == Format::Markdown;
            let b = |x: i64| format_bytes(x as f64, units);
            let total: i64 = reports.iter().map(|r| r.bytes).sum();
            let mut out = String::new();
            if md {
                out.push_str(&format!("## {title}\n\n"));
            }
            out.push_str(&format!(
                "{}{} reference cycle{} held tensors ({} in all); each stayed allocated until the garbage collector freed it at the op shown\n\n",
                if md { String::new() } else { format!("{title}: ") },
                reports.len(),
                if reports.len() == 1 { "" } else { "s" },
                b(total)
            ));
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
            out.push_str(&if md { t.markdown() } else { t.text() });
            for r in reports {
                out.push('\n');
                out.push_str(&detail(r, md, units));
            }
            out
        }
    }
}

fn detail(r: &CycleReport, md: bool, units: Units) -> String {
    let b = |x: i64| format_bytes(x as f64, units);
    let mut out = String::new();
    let head = format!(
        "Cycle {}: {} in {} tensor{}, {} objects, freed at op {} (a generation-{} collection)",
        r.number,
        b(r.bytes),
        r.tensors,
        if r.tensors == 1 { "" } else { "s" },
        r.objects,
        thousands(r.op_index.max(0) as usize),
        r.generation
    );
    let (pre, code_open, code_close) = if md { ("", "`", "`") } else { ("  ", "", "") };
    if md {
        out.push_str(&format!("### {head}\n\n"));
    } else {
        out.push_str(&head);
        out.push('\n');
    }
    let bullet = if md { "- " } else { "" };
    out.push_str(&format!(
        "{pre}{bullet}loop: {code_open}{}{code_close}\n",
        loop_text(r)
    ));
    if r.omitted_objects > 0 {
        out.push_str(&format!(
            "{pre}({} more objects of this collection's garbage were left out)\n",
            r.omitted_objects
        ));
    }
    for p in &r.tensor_paths {
        out.push_str(&format!(
            "{pre}{bullet}tensor {} ({}): {code_open}{}{code_close}\n",
            p.tensor,
            b(p.bytes),
            path_text(&p.path)
        ));
        if !p.stack.is_empty() {
            out.push_str(&format!("{pre}    allocated at:\n"));
            for f in p.stack.iter().take(12) {
                out.push_str(&format!("{pre}      {f}\n"));
            }
            if p.stack.len() > 12 {
                out.push_str(&format!(
                    "{pre}      … {} more frames\n",
                    p.stack.len() - 12
                ));
            }
        }
    }
    out
}
