use std::path::PathBuf;

use crate::analysis::decimate::min_max_envelope;
use crate::cli::PlotArgs;
use crate::error::{Error, Result};
use crate::model::{Series, TrackerStats};
use crate::render::plot::{self, Chart, Line, Panel, VLine};
use crate::{formats, output};

pub fn run(a: PlotArgs) -> Result<()> {
    let stats = formats::load_tracker(&a.file)?;
    let series: Vec<Series> = a.series.iter().map(|&s| s.into()).collect();
    let panels = if a.split {
        series
            .iter()
            .map(|&s| Panel {
                lines: vec![line(&stats, s)],
            })
            .collect()
    } else {
        vec![Panel {
            lines: series.iter().map(|&s| line(&stats, s)).collect(),
        }]
    };
    let markers = stats
        .marker_events()
        .into_iter()
        .map(|m| VLine {
            x: m.op_index as f64,
            color: if m.name == "fw_bw_boundary" {
                plot::MARKER_RED
            } else {
                plot::MARKER_BLACK
            },
            label: m.name,
        })
        .collect();
    let chart = Chart {
        title: a
            .title
            .clone()
            .unwrap_or_else(|| super::display_name(&a.file)),
        x_label: "# Operator Calls".into(),
        x_range: (0.0, stats.op_count().saturating_sub(1) as f64),
        panels,
        markers,
        units: a.units,
        annotate_peak: true,
    };
    let svg = plot::svg(&chart).map_err(|e| Error::Usage(format!("cannot draw the plot: {e}")))?;
    let out = a.output.clone().unwrap_or_else(|| default_output(&a.file));
    output::emit(&out, svg.as_bytes())?;
    if out.as_os_str() != "-" {
        eprintln!("memtrack: wrote {}", out.display());
    }
    Ok(())
}

fn line(stats: &TrackerStats, s: Series) -> Line {
    let values = stats.series(s);
    let points = min_max_envelope(values, 0, values.len(), plot::PLOT_COLUMNS);
    let peak = values.iter().enumerate().filter(|(_, v)| !v.is_nan()).fold(
        None,
        |best: Option<(usize, f64)>, (i, &v)| {
            if best.is_none_or(|(_, b)| v > b) {
                Some((i, v))
            } else {
                best
            }
        },
    );
    Line {
        label: format!("{}_memory", s.name()),
        color: match s {
            Series::Allocated => plot::BLUE_,
            Series::Active => plot::ORANGE_,
            Series::Reserved => plot::GREEN_,
        },
        points: points.into_iter().map(|(i, v)| (i as f64, v)).collect(),
        peak: peak.map(|(i, v)| (i as f64, v)),
    }
}

/// `run.pkl` → `run.svg` in the current directory.
fn default_output(input: &std::path::Path) -> PathBuf {
    let stem = input
        .file_stem()
        .map_or_else(|| "memtrack".into(), |s| s.to_string_lossy().into_owned());
    PathBuf::from(format!("{stem}.svg"))
}
