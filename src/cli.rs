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
    /// Allocator snapshot: the per-segment map of `_memory_viz stats`, or an SVG of segments
    Segments(SegmentsArgs),
    /// Allocator snapshot: bytes by allocation site, live at the end and at the peak
    Top(TopArgs),
    /// Allocator snapshot: the event listing of `_memory_viz trace`, with correct totals
    Trace(TraceArgs),
    /// Compare two snapshots or two stats files; `--fail-over` makes it a CI gate
    Diff(DiffArgs),
    /// Run a PyTorch program and record its memory per op and per module (every rank)
    Record(RecordArgs),
    /// Per-module memory by category and state, as PyTorch's MemTracker tabulates it
    Modules(ModulesArgs),
    /// NVIDIA GPUs: memory and the processes using it, through NVML (no CUDA context)
    Gpus(GpusArgs),
    /// The CUDA caching allocator's counters, as torch.cuda.memory_summary() prints them
    Allocator(AllocatorArgs),
    /// Reference cycles that held tensors (`record --cycles`): listed by bytes, or drawn
    Cycles(CyclesArgs),
    /// Print a shell completion script (bash, zsh or fish)
    Completions(CompletionsArgs),
    /// Print the man page (roff), generated from the command-line definition
    Man(ManArgs),
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
    /// A MemoryTracker stats file (save_stats), a `memtrack record` file or an allocator
    /// snapshot; several stats files (one per rank: `run.rank*.pkl`) add a cross-rank comparison
    #[arg(required = true, num_args = 1.., value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// How many of the ops that generate the most memory to list
    #[arg(long, default_value_t = 20)]
    pub top: usize,
    /// Allocator snapshots: only this CUDA device
    #[arg(long, value_name = "N")]
    pub device: Option<u32>,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SeriesArg {
    Allocated,
    Active,
    Reserved,
    /// The process's GPU memory as the driver sees it (files `record` wrote where NVML was
    /// present): the allocator's reserved plus the CUDA context, NCCL buffers, cuBLAS
    /// workspaces and other memory the caching allocator cannot see
    Device,
}

impl SeriesArg {
    /// The MemoryTracker series; None for the driver-level one.
    pub fn tracker_series(self) -> Option<Series> {
        match self {
            SeriesArg::Allocated => Some(Series::Allocated),
            SeriesArg::Active => Some(Series::Active),
            SeriesArg::Reserved => Some(Series::Reserved),
            SeriesArg::Device => None,
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
    /// Series to draw, comma-separated [default: allocated,active,reserved, and device when
    /// the file has the driver-level series]
    #[arg(long, value_enum, value_delimiter = ',')]
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
    /// Allocator snapshots: only this CUDA device (default: one panel per device)
    #[arg(long, value_name = "N")]
    pub device: Option<u32>,
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

#[derive(Args, Debug)]
pub struct SegmentsArgs {
    /// An allocator snapshot (`torch.cuda.memory._dump_snapshot()` or `memory_snapshot()`)
    pub file: PathBuf,
    /// Only this CUDA device
    #[arg(long, value_name = "N")]
    pub device: Option<u32>,
    /// Where to write; `-` is stdout. A name ending in `.svg` draws the segments and their
    /// blocks instead
    #[arg(short, long, default_value = "-")]
    pub output: PathBuf,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    #[arg(long, default_value = "auto", value_name = "auto|B|KiB|MiB|GiB")]
    pub units: Units,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum MomentArg {
    /// Live when the snapshot was taken
    End,
    /// Live when allocated bytes peaked in the trace
    Peak,
}

#[derive(Args, Debug)]
pub struct TopArgs {
    /// An allocator snapshot
    pub file: PathBuf,
    /// Only this CUDA device
    #[arg(long, value_name = "N")]
    pub device: Option<u32>,
    /// How many sites to list
    #[arg(long, default_value_t = 20)]
    pub top: usize,
    /// Rank sites by bytes live at the end or at the peak (default: peak when the file has a
    /// trace)
    #[arg(long, value_enum)]
    pub by: Option<MomentArg>,
    /// Write folded stacks (`frame;frame;... bytes`, root first) for flamegraph.pl, inferno or
    /// speedscope instead of the table
    #[arg(long)]
    pub folded: bool,
    /// With --folded: the live allocations at the end or at the peak
    #[arg(long, value_enum, default_value_t = MomentArg::End)]
    pub at: MomentArg,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Args, Debug)]
pub struct TraceArgs {
    /// An allocator snapshot recorded with `_record_memory_history()`
    pub file: PathBuf,
    /// Only this CUDA device
    #[arg(long, value_name = "N")]
    pub device: Option<u32>,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Args, Debug)]
pub struct DiffArgs {
    /// The baseline: an allocator snapshot or a stats file
    pub before: PathBuf,
    /// The candidate, of the same kind
    pub after: PathBuf,
    /// Snapshots: only this CUDA device
    #[arg(long, value_name = "N")]
    pub device: Option<u32>,
    /// How many sites (snapshots) or ops (stats) to list
    #[arg(long, default_value_t = 20)]
    pub top: usize,
    /// Exit with code 1 when the peak of allocated bytes grew by more than this: bytes
    /// (`104857600`, `100MiB`, `1.5GiB`) or a share of the baseline's peak (`5%`)
    #[arg(long, value_name = "BYTES|PCT")]
    pub fail_over: Option<crate::analysis::diff::Threshold>,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackendArg {
    /// CUDA when `torch.cuda.is_available()`, else CPU
    Auto,
    /// The CUDA caching allocator's counters
    Cuda,
    /// Live tensor storages, counted as MemTracker does (works without a GPU)
    Cpu,
}

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  memtrack record -o run.pkl -- python train.py --epochs 1\n  memtrack record -o run.pkl -- python -m torch.distributed.run --nproc-per-node 2 train.py\n    (writes run.rank0.pkl, run.rank1.pkl)"
)]
pub struct RecordArgs {
    /// The stats file to write; with several processes, one per rank: NAME.rank0.pkl, …
    #[arg(short, long, default_value = "memtrack.pkl")]
    pub output: PathBuf,
    /// Which memory the per-op samples count
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    pub backend: BackendArg,
    /// Also record the CUDA allocator's history and write allocator snapshots at exit and at
    /// a CUDA out-of-memory error (NAME.rank0.exit.pickle, NAME.rank0.oom.pickle)
    #[arg(long)]
    pub snapshot: bool,
    /// Allocator history entries kept for --snapshot (`max_entries`)
    #[arg(long, default_value_t = 100_000, value_name = "N")]
    pub max_snapshot_entries: usize,
    /// Watch the garbage collector for reference cycles that hold tensors (CUDA tensors; CPU
    /// tensors on the cpu backend) and keep each one's objects and references (`memtrack
    /// cycles`). Costs time at every collection that finds garbage; on CUDA it also turns on
    /// the allocator's history, for allocation stacks
    #[arg(long)]
    pub cycles: bool,
    /// Milliseconds between samples of the program's GPU memory as the driver sees it (NVML);
    /// 0 turns sampling off. Without an NVIDIA driver nothing is sampled
    #[arg(long, default_value_t = 50, value_name = "MS")]
    pub device_interval: u64,
    /// Write the stats files from the journal a `record` left behind when it was killed
    /// (`NAME.journal-PID`), instead of running a program; they are named after it (NAME)
    #[arg(long, value_name = "DIR", conflicts_with = "command")]
    pub recover: Option<PathBuf>,
    /// The program and its arguments, after `--`
    #[arg(last = true, required_unless_present = "recover", value_name = "CMD")]
    pub command: Vec<std::ffi::OsString>,
}

#[derive(Args, Debug)]
pub struct ModulesArgs {
    /// A `memtrack record` file
    pub file: PathBuf,
    /// Show modules down to this depth (`Net` is 1, `Net.layer` 2), as MemTracker's `depth`;
    /// default 2 for text and Markdown, every depth for JSON and CSV
    #[arg(long)]
    pub depth: Option<usize>,
    /// Only these states, comma-separated (pre-forward, post-forward, peak-forward,
    /// pre-backward, post-backward, peak-backward, pre-forward-ac, post-forward-ac)
    #[arg(long, value_delimiter = ',', value_name = "STATE")]
    pub state: Vec<String>,
    /// Which iteration: a number (1 is the first), `last` or `all`
    #[arg(long, default_value = "last", value_name = "N|last|all")]
    pub iteration: String,
    /// Where to write; `-` is stdout
    #[arg(short, long, default_value = "-")]
    pub output: PathBuf,
    /// Output format; JSON is the stable contract for scripts and CI
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Units for byte amounts in text and Markdown (JSON and CSV always give bytes)
    #[arg(long, default_value = "B", value_name = "B|KiB|MiB|GiB")]
    pub units: Units,
}

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  memtrack gpus\n  memtrack gpus --watch 2\n  memtrack gpus --format json"
)]
pub struct GpusArgs {
    /// Print again every SECONDS until interrupted (JSON: one object per line)
    #[arg(long, value_name = "SECONDS")]
    pub watch: Option<f64>,
    /// With --watch: stop after N listings
    #[arg(long, value_name = "N", requires = "watch")]
    pub count: Option<u64>,
    /// Output format; JSON is the stable contract for scripts and CI
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Units for byte amounts in text and Markdown (JSON and CSV always give bytes)
    #[arg(long, default_value = "auto", value_name = "auto|B|KiB|MiB|GiB")]
    pub units: Units,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum StatsMoment {
    /// When the program stopped
    Exit,
    /// When the allocator reported running out of memory
    Oom,
}

#[derive(Args, Debug)]
pub struct AllocatorArgs {
    /// A `memtrack record` file recorded on CUDA
    pub file: PathBuf,
    /// Which counters: at the program's end or at its CUDA out-of-memory error
    #[arg(long, value_enum, default_value_t = StatsMoment::Exit)]
    pub at: StatsMoment,
    /// Only the `all` rows, as memory_summary(abbreviated=True)
    #[arg(long)]
    pub abbreviated: bool,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  memtrack record --cycles -o run.pkl -- python train.py\n  memtrack cycles run.pkl\n  memtrack cycles run.pkl -o cycles.html   (or .svg, .dot)"
)]
pub struct CyclesArgs {
    /// A `memtrack record --cycles` file
    pub file: PathBuf,
    /// Where to write; `-` is stdout. A name ending in .svg, .dot or .html draws the cycles
    #[arg(short, long, default_value = "-")]
    pub output: PathBuf,
    /// Only the cycle with this number (as listed, 1 holds the most bytes)
    #[arg(long, value_name = "N")]
    pub cycle: Option<usize>,
    /// How many cycles to list or draw, most bytes first
    #[arg(long, default_value_t = 20)]
    pub top: usize,
    /// Output format of the listing; JSON is the stable contract for scripts and CI
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Units for byte amounts in text and Markdown (JSON and CSV always give bytes)
    #[arg(long, default_value = "auto", value_name = "auto|B|KiB|MiB|GiB")]
    pub units: Units,
}

#[derive(Args, Debug)]
#[command(
    after_help = "Install:\n  bash: memtrack completions bash > ~/.local/share/bash-completion/completions/memtrack\n  zsh:  memtrack completions zsh > ~/.zfunc/_memtrack   (with fpath+=~/.zfunc before compinit)\n  fish: memtrack completions fish > ~/.config/fish/completions/memtrack.fish"
)]
pub struct CompletionsArgs {
    /// The shell
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Args, Debug)]
#[command(after_help = "Example:\n  memtrack man > memtrack.1 && man ./memtrack.1")]
pub struct ManArgs {
    /// Also write one page per subcommand (memtrack-record.1, …) into this folder
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}
