use std::path::PathBuf;

use crate::analysis::decimate::min_max_envelope;
use crate::cli::{PlotArgs, SeriesArg};
use crate::error::{Error, Result};
use crate::model::{DeviceSeries, Series, TrackerStats};
use crate::render::plot::{self, Chart, Line, Panel, VLine};
use crate::{formats, output};

pub fn run(a: PlotArgs) -> Result<()> {
    let stats = formats::load_tracker(&a.file)?;
    let driver: &[DeviceSeries] = stats
        .record
        .as_ref()
        .map_or(&[], |r| r.device_memory.as_slice());
    let series: Vec<SeriesArg> = if a.series.is_empty() {
        let mut s = vec![SeriesArg::Allocated, SeriesArg::Active, SeriesArg::Reserved];
        if !driver.is_empty() {
            s.push(SeriesArg::Device);
        }
        s
    } else {
        a.series.clone()
    };
    if series.contains(&SeriesArg::Device) && driver.is_empty() {
        return Err(Error::input(
            &a.file,
            "no driver-level (device) series: `memtrack record` samples it only where the NVIDIA              driver's NVML is present (and --device-interval is not 0)",
        ));
    }
    let last_op = stats.op_count().saturating_sub(1) as f64;
    let lines_of = |s: SeriesArg| -> Vec<Line> {
        match s.tracker_series() {
            Some(t) => vec![line(&stats, t)],
            None => driver
                .iter()
                .enumerate()
                .map(|(k, d)| device_line(d, k, driver.len() > 1, last_op))
                .collect(),
        }
    };
    let panels = if a.split {
        series
            .iter()
            .map(|&s| Panel { lines: lines_of(s) })
            .collect()
    } else {
        vec![Panel {
            lines: series.iter().flat_map(|&s| lines_of(s)).collect(),
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
    let drawing = crate::progress::Stage::new("drawing");
    let svg = plot::svg(&chart).map_err(|e| Error::Usage(format!("cannot draw the plot: {e}")))?;
    drop(drawing);
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
        width: None,
    }
}

/// The process's GPU memory as the driver counted it, at the op positions of its samples.
fn device_line(d: &DeviceSeries, k: usize, several: bool, last_op: f64) -> Line {
    let values: Vec<f64> = d.samples.iter().map(|s| s.bytes as f64).collect();
    let points = min_max_envelope(&values, 0, values.len(), plot::PLOT_COLUMNS);
    const COLORS: [plotters::style::RGBColor; 4] = [
        plot::PURPLE_,
        plotters::style::RGBColor(140, 86, 75),
        plotters::style::RGBColor(227, 119, 194),
        plotters::style::RGBColor(127, 127, 127),
    ];
    Line {
        label: if several {
            format!("device_memory (driver, GPU {})", d.nvml_index)
        } else {
            "device_memory (driver)".into()
        },
        color: COLORS[k % COLORS.len()],
        // a sample holds until the next one: steps, not slopes
        points: points
            .into_iter()
            .map(|(i, v)| ((d.samples[i].op_index as f64).min(last_op), v))
            .fold(Vec::new(), |mut acc: Vec<(f64, f64)>, (x, y)| {
                if let Some(&(_, prev)) = acc.last() {
                    if prev != y {
                        acc.push((x, prev));
                    }
                }
                acc.push((x, y));
                acc
            }),
        peak: None,
        width: Some(3),
    }
}

/// `run.pkl` → `run.svg` in the current directory.
fn default_output(input: &std::path::Path) -> PathBuf {
    let stem = input
        .file_stem()
        .map_or_else(|| "memtrack".into(), |s| s.to_string_lossy().into_owned());
    PathBuf::from(format!("{stem}.svg"))
}
