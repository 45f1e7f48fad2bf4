//! The command line: one variant per subcommand, typed arguments. No logic.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::model::{Series, Units};
use crate::render::Format;

#[derive(Parser, Debug)]
#[command(
    name = "memtrack",
    version,
    about = "Profile PyTorch GPU memory: record a training run (`memtrack record -- python train.py`), then read its stats, MemoryTracker stats or allocator snapshots, fast, without Python",
    long_about = None,
    propagate_version = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The command line of this process, with the hints clap cannot give: `record` without `--`
/// before the program, and `help --help`.
pub fn parse() -> Cli {
    parse_from(std::env::args_os())
}

pub fn parse_from<I: IntoIterator<Item = std::ffi::OsString>>(args: I) -> Cli {
    let mut args: Vec<std::ffi::OsString> = args.into_iter().collect();
    // `memtrack help --help`: the help of `help` itself
    if args.len() == 3 && args[1] == "help" && (args[2] == "--help" || args[2] == "-h") {
        args[2] = "help".into();
    }
    match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => {
            let record_without_separator = args.get(1).is_some_and(|a| a == "record")
                && !args.iter().any(|a| a == "--")
                && matches!(
                    e.kind(),
                    clap::error::ErrorKind::UnknownArgument
                        | clap::error::ErrorKind::MissingRequiredArgument
                );
            if record_without_separator {
                let _ = e.print();
                eprintln!(
                    "\nhint: put `--` before the program to run, so its arguments stay its own:\n  memtrack record -o run.pkl -- python train.py"
                );
                std::process::exit(2);
            }
            let mut e = e;
            closer_flag_suggestion(&mut e, &args);
            e.exit()
        }
    }
}

/// clap suggests a flag by Jaro similarity, which finds `--output` for `--tpo` (two letters
/// swapped in `--top`); where a flag is fewer edits away (a letter added, dropped, changed or
/// two swapped), suggest that one and its usage instead.
fn closer_flag_suggestion(e: &mut clap::Error, args: &[std::ffi::OsString]) {
    use clap::error::{ContextKind, ContextValue};
    use clap::CommandFactory;
    if e.kind() != clap::error::ErrorKind::UnknownArgument {
        return;
    }
    let Some(ContextValue::String(typed)) = e.get(ContextKind::InvalidArg) else {
        return;
    };
    let Some(typed) = typed.strip_prefix("--").map(str::to_string) else {
        return;
    };
    let mut cmd = Cli::command();
    if let Some(bin) = args
        .first()
        .and_then(|a| std::path::Path::new(a).file_name())
    {
        cmd = cmd.bin_name(bin.to_string_lossy().into_owned());
    }
    cmd.build();
    let sub_name = args.get(1).and_then(|a| a.to_str()).unwrap_or_default();
    let Some(sub) = cmd.find_subcommand_mut(sub_name) else {
        return;
    };
    let clap_distance = match e.get(ContextKind::SuggestedArg) {
        Some(ContextValue::String(s)) => edit_distance(&typed, s.trim_start_matches('-')),
        _ => usize::MAX,
    };
    let closest = sub
        .get_arguments()
        .filter(|a| !a.is_hide_set())
        .filter_map(|a| a.get_long())
        .map(|long| (edit_distance(&typed, long), long.to_string()))
        .filter(|(d, long)| *d <= 2 && *d < typed.len().min(long.len()))
        .min_by_key(|(d, _)| *d);
    if let Some((d, long)) = closest {
        if d < clap_distance {
            e.insert(
                ContextKind::SuggestedArg,
                ContextValue::String(format!("--{long}")),
            );
            e.insert(
                ContextKind::Usage,
                ContextValue::StyledStr(sub.render_usage()),
            );
        }
    }
}

/// Edits from `a` to `b`: a character inserted, deleted or replaced, or two adjacent ones
/// swapped (optimal string alignment distance).
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            d[i][j] = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d[i][j] = d[i][j].min(d[i - 2][j - 2] + 1);
            }
        }
    }
    d[a.len()][b.len()]
}

/// A count of rows (`--top N`): 1 or more. Negative numbers reach this parser (rather than
/// clap's "unexpected argument '-3'" and its advice to write `-- -3`, which then fails).
fn count(s: &str) -> Result<usize, String> {
    match s.parse::<i64>() {
        Ok(n) if n >= 1 => Ok(n as usize),
        Ok(_) => Err("how many rows to list: a count of 1 or more".into()),
        Err(_) => Err("how many rows to list: a whole number, 1 or more".into()),
    }
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Step one: run a PyTorch program (`-- python train.py`) and record its memory after every
    /// op, per module and category, in a stats file (one per rank)
    Record(RecordArgs),
    /// Record a running Python process that imported torch (`attach PID --duration 30s`), then
    /// take the recording off again: the same stats file as `record`
    Attach(AttachArgs),
    /// Peaks, forward/backward split and top ops of a `record` file, a MemoryTracker stats file,
    /// allocator snapshots or torch.profiler traces (several: one table of ranks)
    Summary(SummaryArgs),
    /// Per-module memory of a `record` file by category and state, as PyTorch's MemTracker
    /// tabulates it
    Modules(ModulesArgs),
    /// Draw memory over time (SVG, PNG or HTML) from a stats file (per op), an allocator
    /// snapshot (over its trace; --stacked: its Active Memory Timeline) or a profiler trace
    Plot(PlotArgs),
    /// Allocator snapshot, record or stats file, or profiler trace in the browser: a local web
    /// UI (every allocation at any zoom, allocator state at a moment), served from 127.0.0.1
    /// until Ctrl-C
    View(ViewArgs),
    /// Allocator snapshot or profiler trace: bytes by allocation site (or user line,
    /// category, annotation, …) live at a moment (the peak, an event, a time, an OOM) and at the end
    Top(TopArgs),
    /// Allocator snapshot: the per-segment map of `_memory_viz stats`, or an SVG of segments
    Segments(SegmentsArgs),
    /// Allocator snapshot: the event listing of `_memory_viz trace`, with correct totals
    Trace(TraceArgs),
    /// Compare two snapshots, two stats files or two profiler traces; `--fail-over` makes it a
    /// CI gate
    Diff(DiffArgs),
    /// Allocator snapshot: replay its trace under other allocator settings (would
    /// expandable_segments, max_split_size_mb, ... have avoided the OOM?)
    Simulate(SimulateArgs),
    /// Run a PyTorch program as if on a CUDA GPU, without one: its memory per op as the CUDA
    /// caching allocator would have it, and whether it fits a device (`--gpu H100-80GB`)
    Estimate(EstimateArgs),
    /// Write a stats file, an allocator snapshot or a profiler trace whole as JSON, for scripts
    Export(ExportArgs),
    /// The CUDA caching allocator's counters kept in a `record` file (recorded on CUDA), as
    /// torch.cuda.memory_summary() prints them
    Allocator(AllocatorArgs),
    /// Reference cycles that held tensors, from a `record --cycles` file: listed by bytes, or
    /// drawn
    Cycles(CyclesArgs),
    /// NVIDIA GPUs now: memory and the processes using it, through NVML (no CUDA context)
    Gpus(GpusArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish or powershell)
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
#[command(
    after_long_help = "Examples:\n  memtrack summary demo/mlp.pkl --top 10              scripts/demo.sh writes demo/mlp.pkl\n  memtrack summary run.rank0.pkl run.rank1.pkl        ranks side by side\n  memtrack summary snap.pickle --format json          an allocator snapshot\n  memtrack summary rank*.pickle                       one row per rank\n  memtrack summary trace.pt.trace.json.gz             a torch.profiler trace"
)]
pub struct SummaryArgs {
    /// A MemoryTracker stats file (save_stats), a `memtrack record` file or an allocator
    /// snapshot; several stats files (one per rank: `run.rank*.pkl`) add a cross-rank
    /// comparison; several snapshots, or their `summary --format json` outputs, give one table
    /// of ranks (peaks, fragmentation at the peak, OOMs, the outlier), read in parallel;
    /// also torch.profiler traces (profile_memory=True; .json or .json.gz) or a folder of them
    /// (docs/profiler.md)
    #[arg(required = true, num_args = 1.., value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// How many of the ops that generate the most memory to list
    #[arg(long, default_value_t = 20, value_name = "N", value_parser = count, allow_negative_numbers = true)]
    pub top: usize,
    /// Allocator snapshots: only this CUDA device
    #[arg(long, value_name = "N")]
    pub device: Option<u32>,
    /// Stats files: show every iteration's phases (by default a run of more than three
    /// iterations with the same phases shows its first, its peak and its last)
    #[arg(long)]
    pub all_iterations: bool,
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
#[command(
    after_long_help = "Examples:\n  memtrack plot demo/mlp.pkl -o mlp.svg\n  memtrack plot demo/mlp.pkl --series allocated,reserved --split -o mlp.png\n  memtrack plot snap.pickle -o timeline.svg\n  memtrack plot snap.pickle --stacked --group-by category -o timeline.html"
)]
pub struct PlotArgs {
    /// A MemoryTracker stats file (save_stats), a `memtrack record` file, or an allocator
    /// snapshot (`torch.cuda.memory._dump_snapshot`)
    pub file: PathBuf,
    /// Where to write: .svg, .png, or .html (`--stacked` only: hover and zoom); `-` is SVG on
    /// stdout; default: the input's name with .svg, here
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Allocator snapshots: the stacked Active Memory Timeline of pytorch.org/memory_viz
    /// (allocations as bands, the top edge allocated memory) instead of total lines
    #[arg(long)]
    pub stacked: bool,
    /// With --stacked: one band per allocation site or per allocation, the N that cover the
    /// most of the picture (bytes × time live)
    #[arg(long, value_enum, default_value_t = BandByArg::Site, requires = "stacked")]
    pub by: BandByArg,
    /// With --stacked: how many bands; everything else is one grey band
    #[arg(long, default_value_t = 20, value_name = "N", requires = "stacked")]
    pub bands: usize,
    /// With --stacked: mark this moment (peak, end, oom, an event index, 5.2s, NAME:end@2; see
    /// `top --at`) with a line and the allocated bytes there
    #[arg(long, value_name = "MOMENT", requires = "stacked")]
    pub at: Option<crate::analysis::moment::Moment>,
    /// With --stacked: bands are groups (site, user, category, annotation, metadata, compile;
    /// see `top --group-by`), the N that cover the most of the picture
    #[arg(long, value_enum, requires = "stacked", conflicts_with = "rules")]
    pub group_by: Option<GroupByArg>,
    /// With --stacked: bands are the groups of your own `name = regex` rules (see `top --rules`)
    #[arg(long, value_name = "FILE", requires = "stacked")]
    pub rules: Option<PathBuf>,
    /// With --stacked: x is the trace event (as pytorch.org/memory_viz; idle time takes no
    /// room) or the time since the first event
    #[arg(long, value_enum, default_value_t = XAxisArg::Event, requires = "stacked")]
    pub x: XAxisArg,
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
pub enum XAxisArg {
    Event,
    Time,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BandByArg {
    /// The N largest allocations (bytes × time live: the ones the picture shows)
    Allocation,
    /// The N allocation sites whose allocations cover the most of the picture
    Site,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ExportFormat {
    Json,
}

#[derive(Args, Debug)]
#[command(
    after_long_help = "Examples:\n  memtrack export demo/mlp.pkl > mlp.json\n  memtrack export snap.pickle -o snap.json"
)]
pub struct ExportArgs {
    /// A MemoryTracker stats file, a `memtrack record` file or an allocator snapshot
    pub file: PathBuf,
    /// Output format (JSON only: the stable contract for scripts)
    #[arg(long, value_enum, default_value_t = ExportFormat::Json)]
    pub format: ExportFormat,
    /// Where to write; `-` is stdout
    #[arg(short, long, default_value = "-")]
    pub output: PathBuf,
}

#[derive(Args, Debug)]
#[command(
    after_long_help = "Examples:\n  memtrack segments snap.pickle\n  memtrack segments snap.pickle --at peak -o segments.svg"
)]
pub struct SegmentsArgs {
    /// An allocator snapshot (`torch.cuda.memory._dump_snapshot()` or `memory_snapshot()`)
    pub file: PathBuf,
    /// Only this CUDA device
    #[arg(long, value_name = "N")]
    pub device: Option<u32>,
    /// Where to write; `-` is stdout. A name ending in `.svg` or `.png` draws the segments and
    /// their blocks instead
    #[arg(short, long, default_value = "-")]
    pub output: PathBuf,
    /// Output format of the map; JSON is the stable contract for scripts and CI
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Units for byte amounts in text and Markdown (JSON and CSV always give bytes)
    #[arg(long, default_value = "auto", value_name = "auto|B|KiB|MiB|GiB")]
    pub units: Units,
    /// The segments as they stood at a moment of the trace (default: the end): peak, oom
    /// (oom@N), an event index as `memtrack trace` prints it, a time since the trace's first
    /// event (5.2s), or an annotation boundary (NAME:start, NAME:end@2); rebuilt from the end
    /// by undoing the events after it
    #[arg(long, value_name = "MOMENT")]
    pub at: Option<crate::analysis::moment::Moment>,
}

#[derive(Args, Debug)]
#[command(
    after_long_help = "Examples:\n  memtrack view snap.pickle                  prints the URL, opens the browser\n  memtrack view snap.pickle --no-browser --port 8123\n  memtrack view demo/mlp.pkl                 a record or stats file: its per-op series"
)]
pub struct ViewArgs {
    /// An allocator snapshot (`torch.cuda.memory._dump_snapshot()`), a MemoryTracker stats
    /// file, a `memtrack record` file or a torch.profiler trace (`.json`, `.json.gz`)
    pub file: PathBuf,
    /// The CUDA device whose trace to show (default: the first with trace events; for a
    /// profiler trace the first CUDA device with memory events, else the CPU)
    #[arg(long, value_name = "N")]
    pub device: Option<u32>,
    /// TCP port to listen on; 0 picks a free one
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Address to listen on. Anything but 127.0.0.1 lets other machines ask for the stack
    /// traces (they still need the URL's token)
    #[arg(long, default_value = "127.0.0.1")]
    pub host: std::net::IpAddr,
    /// Print the URL only; do not open a browser
    #[arg(long)]
    pub no_browser: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum GroupByArg {
    /// The innermost Python frame _memory_viz keeps (file:line:function)
    Site,
    /// The innermost frame of the program's own code (not torch, site-/dist-packages, the
    /// standard library or memtrack's agent), as `file.py:LINE function`
    User,
    /// Parameter, gradient, optimizer state, activation, temporary, input, other: from the
    /// frames and lifetimes (docs/snapshots.md has the rules)
    Category,
    /// The record_function ranges open at allocation (`external_annotations`)
    Annotation,
    /// The allocation's `user_metadata` (`torch.cuda.memory._set_memory_metadata`, `annotate`
    /// events)
    Metadata,
    /// The allocation's `compile_context`
    Compile,
}

#[derive(Args, Debug)]
#[command(
    after_long_help = "Examples:\n  memtrack top snap.pickle                          by allocation site, at the peak\n  memtrack top snap.pickle --group-by user --at oom\n  memtrack top snap.pickle --at 5.2s --group-by category\n  memtrack top snap.pickle --folded > stacks.folded   for flamegraph.pl or speedscope"
)]
pub struct TopArgs {
    /// An allocator snapshot, or a torch.profiler trace (bytes by op, Python function and
    /// annotation)
    pub file: PathBuf,
    /// Only this CUDA device
    #[arg(long, value_name = "N")]
    pub device: Option<u32>,
    /// How many groups to list
    #[arg(long, default_value_t = 20, value_name = "N", value_parser = count, allow_negative_numbers = true)]
    pub top: usize,
    /// When live memory is counted: peak, end, oom (oom@N: the N-th), an event index as
    /// `memtrack trace` prints it, a time since the trace's first event (5.2s, 300ms), or an
    /// annotation boundary (NAME:start, NAME:end, NAME:end@2). Default: peak for the table,
    /// end for --folded. `--by` is an alias
    #[arg(long, alias = "by", value_name = "MOMENT")]
    pub at: Option<crate::analysis::moment::Moment>,
    /// What a row is
    #[arg(long, value_enum, default_value_t = GroupByArg::Site, conflicts_with = "rules")]
    pub group_by: GroupByArg,
    /// Group by your own rules: a file of `name = regex` lines, matched in order against each
    /// frame (`path/file.py:LINE:function`); the first rule matching any frame names the group
    #[arg(long, value_name = "FILE")]
    pub rules: Option<PathBuf>,
    /// Write folded stacks (`frame;frame;... bytes`, root first) for flamegraph.pl, inferno or
    /// speedscope instead of the table
    #[arg(long)]
    pub folded: bool,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Args, Debug)]
#[command(after_long_help = "Example:\n  memtrack trace snap.pickle | less")]
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
#[command(
    after_long_help = "Examples:\n  memtrack diff before.pkl after.pkl\n  memtrack diff before.pickle after.pickle --fail-over 5%     exit 1 past 5% more peak"
)]
pub struct DiffArgs {
    /// The baseline: an allocator snapshot or a stats file
    pub before: PathBuf,
    /// The candidate, of the same kind
    pub after: PathBuf,
    /// Snapshots: only this CUDA device
    #[arg(long, value_name = "N")]
    pub device: Option<u32>,
    /// How many sites (snapshots) or ops (stats) to list
    #[arg(long, default_value_t = 20, value_name = "N", value_parser = count, allow_negative_numbers = true)]
    pub top: usize,
    /// Exit with code 1 when the peak of allocated bytes grew by more than this: bytes
    /// (`104857600`, `100MiB`, `1.5GiB`) or a share of the baseline's peak (`5%`)
    #[arg(long, value_name = "BYTES|PCT")]
    pub fail_over: Option<crate::analysis::diff::Threshold>,
    /// Snapshots: what a row is (site, user, category, metadata, compile; see `top`)
    #[arg(long, value_enum, default_value_t = GroupByArg::Site, conflicts_with = "rules")]
    pub group_by: GroupByArg,
    /// Snapshots: group by your own `name = regex` rules over frames (see `top --rules`)
    #[arg(long, value_name = "FILE")]
    pub rules: Option<PathBuf>,
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

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ObserverArg {
    /// `compiled` where there is no CUDA device, with torch 2.9 or newer; else `python`
    /// (the compiled observer has not been checked on a GPU yet)
    Auto,
    /// A TorchDispatchMode in Python, as MemoryTracker and MemTracker use
    Python,
    /// A RecordFunction callback in C++, built once per torch with the machine's C++
    /// compiler (about 20 s of compiler time); falls back to `python`, with a warning, where it cannot be
    Compiled,
}

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  memtrack record -o run.pkl -- python train.py --epochs 1\n  memtrack record -o run.pkl -- python -m torch.distributed.run --nproc-per-node 2 train.py\n    (writes run.rank0.pkl, run.rank1.pkl)"
)]
pub struct RecordArgs {
    /// The stats file to write [default: memtrack.pkl; with --recover, the name the journal
    /// was made for]; with several processes one each: NAME.rank0.pkl, … per rank,
    /// NAME.worker-PID.pkl per multiprocessing worker, NAME.pid<PID>.pkl for other Python
    /// processes (docs/record.md)
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Which memory the per-op samples count
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    pub backend: BackendArg,
    /// What sees each operator (docs/record.md, "Observers"): `compiled` costs a small part
    /// of `python`'s time on programs of many small ops
    #[arg(long, value_enum, default_value_t = ObserverArg::Auto)]
    pub observer: ObserverArg,
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
    /// Write the stats files from the journal a `record` left behind (`NAME.journal-XXXXXXXX`:
    /// memtrack was killed, or the files could not be written), instead of running a
    /// program; they are named after it (NAME), or as -o says
    #[arg(long, value_name = "DIR", conflicts_with = "command")]
    pub recover: Option<PathBuf>,
    /// The program and its arguments, after `--`
    #[arg(last = true, required_unless_present = "recover", value_name = "CMD")]
    pub command: Vec<std::ffi::OsString>,
}

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  memtrack attach 12345 --duration 30s -o run.pkl\n  memtrack attach 12345 -o run.pkl          (until Ctrl-C)\n  memtrack attach LAUNCHER_PID -o run.pkl   (torchrun: run.rank0.pkl, run.rank1.pkl, ...)\n  memtrack attach 12345 --dump -o now         (CUDA: now.pid12345.dump.pickle, no recording)\n\nThe process must be this user's, run Python with torch imported, and may be traced\n(docs/record.md, \"attach\")."
)]
pub struct AttachArgs {
    /// The process to record; a torchrun launcher's: each of its ranks, a file per rank
    #[arg(value_name = "PID")]
    pub pid: u32,
    /// The stats file to write
    #[arg(short, long, default_value = "memtrack.pkl")]
    pub output: PathBuf,
    /// How long to record (`30s`, `500ms`, `2m`, or seconds); by default until Ctrl-C or the
    /// process's end
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<std::time::Duration>,
    /// Which memory the per-op samples count
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    pub backend: BackendArg,
    /// What sees each operator (docs/record.md, "Observers"); `python` unless asked, as the
    /// compiled observer is a library that stays loaded in the process after the detach
    #[arg(long, value_enum, default_value_t = ObserverArg::Python)]
    pub observer: ObserverArg,
    /// How long the process's main thread has to start the recording (it starts at its next
    /// Python bytecode)
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    pub start_timeout: std::time::Duration,
    /// CUDA: also record the allocator's history for the window and write an allocator
    /// snapshot at its end (NAME.pid<PID>.detach.pickle)
    #[arg(long, conflicts_with = "dump")]
    pub snapshot: bool,
    /// Allocator history entries kept for --snapshot (`max_entries`)
    #[arg(long, default_value_t = 100_000, value_name = "N")]
    pub max_snapshot_entries: usize,
    /// CUDA: record nothing; write an allocator snapshot and `memory_stats()` now
    /// (NAME.pid<PID>.dump.pickle and .dump.memory_stats.json)
    #[arg(long, conflicts_with_all = ["duration", "observer", "backend"])]
    pub dump: bool,
}

/// `30s`, `500ms`, `2m`, `1h` or a number of seconds.
fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let t = s.trim();
    let (num, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = t.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (t, 1.0)
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v * scale < MAX_DURATION_S => {
            Ok(std::time::Duration::from_secs_f64(v * scale))
        }
        // 1e99, inf: a number, only too large to wait for
        Ok(v) if v > 0.0 => Err(format!(
            "{s:?}: longer than memtrack can wait (under 10^9 s, about 31 years)"
        )),
        _ => Err(format!(
            "{s:?}: expected a time above zero such as 30s, 500ms, 2m or 1h"
        )),
    }
}

/// The longest `--duration` or `--start-timeout`, in seconds: a `Duration` holds far more,
/// but a deadline that far off overflows the clock's `Instant`.
const MAX_DURATION_S: f64 = 1e9;

#[derive(Args, Debug)]
#[command(
    after_long_help = "Examples:\n  memtrack modules demo/mlp.pkl\n  memtrack modules demo/mlp.pkl --depth 3 --iteration all --units KiB\n  memtrack modules run.pkl --state pre-forward-ac,post-forward-ac,peak-backward"
)]
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
    #[arg(long, default_value = "auto", value_name = "auto|B|KiB|MiB|GiB")]
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
#[command(
    after_long_help = "Examples:\n  memtrack allocator run.pkl\n  memtrack allocator run.pkl --at oom --abbreviated"
)]
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
    after_help = "Examples:\n  memtrack record --cycles -o run.pkl -- python train.py\n  memtrack cycles run.pkl\n  memtrack cycles run.pkl -o cycles.html   (or .svg, .png, .dot)"
)]
pub struct CyclesArgs {
    /// A `memtrack record --cycles` file
    pub file: PathBuf,
    /// Where to write; `-` is stdout. A name ending in .svg, .png, .dot or .html draws the cycles
    #[arg(short, long, default_value = "-")]
    pub output: PathBuf,
    /// Only the cycle with this number (as listed, 1 holds the most bytes)
    #[arg(long, value_name = "N")]
    pub cycle: Option<usize>,
    /// How many cycles to list or draw, most bytes first
    #[arg(long, default_value_t = 20, value_name = "N", value_parser = count, allow_negative_numbers = true)]
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
    after_help = "Install:\n  bash: memtrack completions bash > ~/.local/share/bash-completion/completions/memtrack\n  zsh:  memtrack completions zsh > ~/.zfunc/_memtrack   (with fpath+=~/.zfunc before compinit)\n  fish: memtrack completions fish > ~/.config/fish/completions/memtrack.fish\n  elvish, powershell: memtrack completions elvish|powershell, sourced from the shell's profile"
)]
pub struct CompletionsArgs {
    /// The shell to complete in
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

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  memtrack simulate snap.pickle --set expandable_segments:True --set max_split_size_mb:128\n  memtrack simulate oom.pickle --memory 80GiB --set expandable_segments:True,garbage_collection_threshold:0.8\n\nThe first column replays the file's own settings and says how many recorded segment events it\nreproduced; see docs/simulate.md for what the model covers."
)]
pub struct SimulateArgs {
    /// An allocator snapshot recorded with `_record_memory_history()`
    pub file: PathBuf,
    /// One more scenario: the file's settings with these changed, PYTORCH_CUDA_ALLOC_CONF
    /// syntax (expandable_segments, max_split_size_mb, max_non_split_rounding_mb,
    /// roundup_power2_divisions, garbage_collection_threshold); repeat for more scenarios
    #[arg(long = "set", value_name = "KEY:VALUE,...")]
    pub set: Vec<String>,
    /// The memory the allocator may use (e.g. 80GiB, 2.5GB); by default what the recorded
    /// failures imply, else unlimited
    #[arg(long, value_name = "SIZE", value_parser = crate::model::units::parse_size)]
    pub memory: Option<u64>,
    /// Only this CUDA device
    #[arg(long, value_name = "N")]
    pub device: Option<u32>,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  memtrack estimate -- python train.py --batch-size 32\n  memtrack estimate --gpu A100-40GB -o run.pkl -- python train.py\n  memtrack estimate --gpu 24GiB --format json -- python train.py\n  memtrack estimate -- torchrun --nproc-per-node 8 --nnodes 4 train.py --fsdp\n  memtrack estimate --world-size 64 --ranks 0,63 -- python train.py\n\nThe file written is read by summary, modules, top, plot and view (docs/estimate.md)."
)]
pub struct EstimateArgs {
    /// The stats file to write (as `record` writes)
    #[arg(short, long, default_value = "estimate.pkl")]
    pub output: PathBuf,
    /// The device: a name (H100-80GB, H100-PCIE, H200, A100-80GB, A100-40GB, L40S, L4, A10G,
    /// RTX4090, V100-32GB, V100-16GB, T4), whose memory less its CUDA context the allocator
    /// may use, or a size (80GiB) that the allocator may use in full
    #[arg(long, default_value = "H100-80GB", value_name = "NAME|SIZE")]
    pub gpu: String,
    /// How to print the verdict (text or json)
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Stop the program when one read of a value the estimate does not have, deciding a
    /// branch at the same line, repeats more than this (a loop waiting on that value)
    #[arg(long, default_value_t = 10_000, value_name = "N")]
    pub max_repeats: u64,
    /// Run the program as one rank of a job of N ranks (torchrun's environment, a fake process
    /// group); a `torchrun` command gives its own world
    #[arg(long, value_name = "N")]
    pub world_size: Option<u32>,
    /// The ranks to estimate, each one run of the program: `0` (the default), `0,7`, `0-3`
    /// or `all`
    #[arg(long, default_value = "0", value_name = "LIST")]
    pub ranks: String,
    /// Devices on each node: with --world-size, the ranks a node (LOCAL_WORLD_SIZE; 8 if not
    /// given); without, what torch.cuda.device_count() answers (1 if not given), for a
    /// program that starts a process per device itself (mp.spawn)
    #[arg(long, value_name = "N")]
    pub gpus_per_node: Option<u32>,
    /// What NCCL's buffers may take of the device for each process group that communicates
    /// (not the allocator's memory, not measured: docs/estimate.md)
    #[arg(long, default_value = "1GiB", value_name = "SIZE")]
    pub nccl_allowance: String,
    /// The program and its arguments, after `--`
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<std::ffi::OsString>,
}

#[cfg(test)]
mod help_tests {
    use clap::CommandFactory;

    use super::Cli;

    /// `--help` tells the truth: every argument of every subcommand says what it is.
    #[test]
    fn every_argument_has_a_description() {
        let cli = Cli::command();
        let mut missing = Vec::new();
        for sub in cli.get_subcommands() {
            for arg in sub.get_arguments() {
                let id = arg.get_id().as_str();
                if id == "help" || id == "version" {
                    continue;
                }
                if arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing.push(format!("{} {}", sub.get_name(), id));
                }
            }
        }
        assert!(missing.is_empty(), "no description: {missing:?}");
    }
}
