//! The command line: one variant per subcommand, typed arguments. No logic.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::model::{Series, Units};
use crate::render::Format;

#[derive(Parser, Debug)]
#[command(
    name = "memtrack",
    version,
    about = "Profile PyTorch GPU memory: read MemoryTracker stats and allocator snapshots, fast, without Python",
    long_about = None,
    propagate_version = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Peaks, forward/backward split and the top ops that generate memory
    Summary(SummaryArgs),
    /// Draw allocated / active / reserved memory per operator as SVG
    Plot(PlotArgs),
    /// Write the whole file as JSON, for scripts
    Export(ExportArgs),
}

#[derive(Args, Debug)]
pub struct Common {
    /// Where to write; `-` is stdout
    #[arg(short, long, default_value = "-")]
    pub output: PathBuf,
    /// Output format; JSON is the stable contract for scripts and CI
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Units for byte amounts in text and Markdown (JSON and CSV always give bytes)
    #[arg(long, default_value = "auto", value_name = "auto|B|KiB|MiB|GiB")]
    pub units: Units,
}

#[derive(Args, Debug)]
pub struct SummaryArgs {
    /// A MemoryTracker stats file (save_stats) or a `memtrack record` file
    pub file: PathBuf,
    /// How many of the ops that generate the most memory to list
    #[arg(long, default_value_t = 20)]
    pub top: usize,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SeriesArg {
    Allocated,
    Active,
    Reserved,
}

impl From<SeriesArg> for Series {
    fn from(s: SeriesArg) -> Series {
        match s {
            SeriesArg::Allocated => Series::Allocated,
            SeriesArg::Active => Series::Active,
            SeriesArg::Reserved => Series::Reserved,
        }
    }
}

#[derive(Args, Debug)]
pub struct PlotArgs {
    /// A MemoryTracker stats file (save_stats) or a `memtrack record` file
    pub file: PathBuf,
    /// The SVG to write (`-` for stdout); default: the input's name with .svg, here
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Series to draw, comma-separated
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [SeriesArg::Allocated, SeriesArg::Active, SeriesArg::Reserved])]
    pub series: Vec<SeriesArg>,
    /// One panel per series (as show_traces draws separate figures) instead of one shared panel
    #[arg(long)]
    pub split: bool,
    /// The y axis unit
    #[arg(long, default_value = "auto", value_name = "auto|B|KiB|MiB|GiB")]
    pub units: Units,
    /// Chart title (default: the file name)
    #[arg(long)]
    pub title: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ExportFormat {
    Json,
}

#[derive(Args, Debug)]
pub struct ExportArgs {
    pub file: PathBuf,
    #[arg(long, value_enum, default_value_t = ExportFormat::Json)]
    pub format: ExportFormat,
    /// Where to write; `-` is stdout
    #[arg(short, long, default_value = "-")]
    pub output: PathBuf,
}
