use crate::analysis::cycles::reports;
use crate::cli::CyclesArgs;
use crate::error::{Error, Result};
use crate::render::graph;
use crate::{formats, output, render};

pub fn run(a: CyclesArgs) -> Result<()> {
    let stats = formats::load_tracker(&a.file)?;
    let watched = stats.record.as_ref().is_some_and(|r| r.cycles_watched);
    if !watched {
        return Err(Error::input(
            &a.file,
            "recorded without --cycles: nothing watched the garbage collector. Record with \
             `memtrack record --cycles -o FILE -- python train.py`",
        ));
    }
    let cycles = &stats.record.as_ref().expect("watched").cycles;
    let title = super::display_name(&a.file);
    let all = reports(cycles);
    let chosen: Vec<_> = match a.cycle {
        Some(n) => {
            let Some(one) = all.iter().find(|(r, _)| r.number == n) else {
                return Err(Error::Usage(format!(
                    "--cycle {n}: {} has {} cycle{} (numbered from 1, most bytes first)",
                    title,
                    all.len(),
                    if all.len() == 1 { "" } else { "s" }
                )));
            };
            vec![one]
        }
        None => all.iter().take(a.top).collect(),
    };
    let items: Vec<graph::Item> = chosen.iter().map(|(r, c)| (r, *c)).collect();
    let ext = a
        .output
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase());
    let draw = |ext: &str| -> Option<Result<Vec<u8>>> {
        Some(Ok(match ext {
            "svg" => graph::svg(&items, &title, a.units).into_bytes(),
            "png" => {
                return Some(
                    render::picture::png(&graph::svg(&items, &title, a.units), 1.0)
                        .map_err(Into::into),
                )
            }
            "dot" | "gv" => graph::dot(&items, &title, a.units).into_bytes(),
            "html" | "htm" => graph::html(&items, &title, a.units).into_bytes(),
            _ => return None,
        }))
    };
    if let Some(drawing) = ext.as_deref().and_then(draw) {
        if items.is_empty() {
            return Err(Error::input(
                &a.file,
                "no reference cycle held a tensor while recorded: nothing to draw",
            ));
        }
        output::emit(&a.output, &drawing?)?;
        eprintln!(
            "memtrack: wrote {} ({} cycle{})",
            crate::quote::path(&a.output),
            items.len(),
            if items.len() == 1 { "" } else { "s" }
        );
        return Ok(());
    }
    let text = if chosen.is_empty() && a.format == render::Format::Text {
        format!("{title}: no reference cycle held a tensor while recorded (the garbage collector was watched)\n")
    } else {
        let refs: Vec<_> = chosen.iter().map(|(r, _)| r).collect();
        render::cycles::listing(&refs, &title, a.format, a.units)
    };
    output::emit(&a.output, text.as_bytes())
}
