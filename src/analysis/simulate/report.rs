//! What a replay reports: per scenario, per device, the check against the recording, and the
//! notes and suggestions worded by `render::simulate`.

use serde::Serialize;

use super::super::caching_allocator::Settings;

/// An allocation the replay could not serve under a scenario's settings.
#[derive(Clone, Debug, Serialize)]
pub struct SimulatedOom {
    /// Index of the trace event whose request fails.
    pub index: usize,
    /// The event's `time_us` in microseconds; None when the file has no times.
    pub time_us: Option<i64>,
    /// Bytes the program asked for.
    pub requested_bytes: u64,
    /// Reserved when it fails.
    pub reserved_bytes: u64,
    /// Where the program asked (the first Python frame), when the file has stacks.
    pub site: Option<String>,
    /// The recorded run failed here too.
    pub recorded: bool,
}

/// One replay's outcome under one setting.
#[derive(Clone, Debug, Serialize)]
pub struct Scenario {
    /// `PYTORCH_CUDA_ALLOC_CONF` spelling of the settings ("default" when none differ).
    pub settings: String,
    /// The settings themselves, every field spelled out.
    pub settings_detail: Settings,
    /// Highest bytes held in segments during the replay (the state before the trace included).
    pub peak_reserved_bytes: u64,
    /// Trace index where the peak was first reached.
    pub peak_reserved_index: Option<usize>,
    /// Bytes held in segments after the last event.
    pub end_reserved_bytes: u64,
    /// Requested bytes live at the peak of allocation: the same in every scenario that ran to
    /// the end without an OOM (a check on the replay).
    pub peak_allocated_bytes: u64,
    /// The largest cached free block at the reserved peak, in bytes.
    pub largest_free_block_at_peak_bytes: u64,
    /// Free bytes in mapped segments (what allocations could still use) at the reserved peak.
    pub free_bytes_at_peak: u64,
    /// `1 - largest free block / free bytes` at the peak of reserved.
    pub fragmentation_at_peak: Option<f64>,
    /// cudaMalloc calls plus expandable page mappings.
    pub segments_created: u64,
    /// Times the model freed cached segments and retried a cudaMalloc that failed.
    pub num_alloc_retries: u64,
    /// Allocations the replay could not serve, in trace order.
    pub ooms: Vec<SimulatedOom>,
}

/// A segment event, recorded or simulated, and where in the trace it belongs.
#[derive(Clone, Debug, Serialize)]
pub struct SegmentEventRef {
    /// `segment_alloc`, `segment_free`, `segment_map` or `segment_unmap`.
    pub action: &'static str,
    /// The segment's (or mapped range's) size in bytes.
    pub size: u64,
    /// Index of the program event (alloc, oom, or the event after an `empty_cache()`) it
    /// belongs to.
    pub index: usize,
}

/// How the replay under the file's own settings compares with what the file recorded.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Validation {
    /// Segment events in the file's trace.
    pub segment_events_recorded: usize,
    /// Recorded segment events reproduced in order (action, size and position) before the
    /// first difference.
    pub segment_events_matched: usize,
    /// Segment events the replay under the file's settings made.
    pub segment_events_simulated: usize,
    /// Where the recorded and replayed sequences first differ; None when they are equal.
    pub first_mismatch: Option<Mismatch>,
    /// Whether the final segment sizes (as a multiset) are the same in the file and the replay.
    pub final_segments_match: bool,
    /// Segments in the file's final state on this device.
    pub final_segments_recorded: usize,
    /// Segments the replay ended with.
    pub final_segments_simulated: usize,
    /// Recorded peak reserved (the trace's segment events, anchored at the final state).
    pub recorded_peak_reserved_bytes: Option<i64>,
    /// Bytes in the file's final segments on this device.
    pub recorded_end_reserved_bytes: u64,
}

/// The first segment event where recording and replay differ (`None` on a side that has no more).
#[derive(Clone, Debug, Serialize)]
pub struct Mismatch {
    /// The recorded event at the first difference.
    pub recorded: Option<SegmentEventRef>,
    /// The replayed event at the first difference.
    pub simulated: Option<SegmentEventRef>,
}

/// One device's replays: every scenario and the check of the first.
#[derive(Clone, Debug, Serialize)]
pub struct DeviceSimulation {
    /// Device index replayed.
    pub device: u32,
    /// Events in the device's trace (0 without one).
    pub trace_events: usize,
    /// The first trace event's `time_us`: times are shown relative to it, as `summary` does.
    pub first_time_us: Option<i64>,
    /// The memory limit the replay enforced, in bytes (`None`: unlimited).
    pub memory_limit_bytes: Option<u64>,
    /// Where `memory_limit_bytes` came from.
    pub memory_limit_source: LimitSource,
    /// What the reader of the replay should know (how the limit was inferred, what the model
    /// left out).
    pub notes: Vec<Note>,
    /// One per setting, the file's own first.
    pub scenarios: Vec<Scenario>,
    /// The replay under the file's own settings (the first scenario) checked against the file.
    pub validation: Validation,
}

/// Where the replay's memory limit came from. Worded (text and JSON alike) by
/// `render::simulate`, which names the argument that sets a limit; `Display` says it without.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitSource {
    /// The caller gave it.
    Given,
    /// A recorded OOM that left less device memory free than it asked for: reserved then plus
    /// device free is the device's size.
    RecordedOom,
    /// The recorded failures bound a per-process cap; the replay takes the smallest they allow.
    SmallestAllowed,
    /// No recorded allocation failed, so nothing says what the limit was: the replay has none.
    NoFailure,
}

impl std::fmt::Display for LimitSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LimitSource::Given => "given",
            LimitSource::RecordedOom => "the recorded OOM: reserved + device free",
            LimitSource::SmallestAllowed => "the smallest the recorded failures allow",
            LimitSource::NoFailure => "none (no allocation failed)",
        })
    }
}

/// Something the reader of a device's replay should know. Worded (text and JSON alike) by
/// `render::simulate`, which adds how to set a memory limit where that helps; `Display` says
/// what is so without it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Note {
    /// The recorded failures imply a per-process cap between `lower` and `upper` bytes; the
    /// replay uses `lower`.
    LimitRange {
        /// The most the recorded run reserved, in bytes.
        lower: u64,
        /// Below every recorded failure's need, in bytes.
        upper: i64,
        /// An OOM left device memory free: the cap was `set_per_process_memory_fraction`'s.
        capped: bool,
    },
    /// The recorded failures contradict each other: the run reserved `lower` bytes, yet a
    /// failure says the limit was below `upper` (< `lower`); the replay uses `lower`.
    LimitContradiction {
        /// The most the recorded run reserved, in bytes.
        lower: u64,
        /// Below this, by a recorded failure, in bytes.
        upper: i64,
    },
    /// The trace starts with segments (and live blocks) made before it: the state it starts
    /// from, rebuilt from the final state with every trace event undone.
    StartState {
        /// Segments before the first event.
        segments: usize,
        /// Their bytes.
        bytes: u64,
        /// Live blocks in them.
        live_blocks: usize,
        /// Of those, blocks whose size is assumed (freed in the trace, never allocated in it).
        assumed_block_sizes: usize,
    },
    /// Live blocks of the state before the trace that lie in no segment (left out).
    UnplacedBlocks(usize),
    /// A scenario sets `garbage_collection_threshold`, which does nothing without a limit.
    GcWithoutLimit,
    /// Segments of private pools (CUDA graphs, MemPool), replayed as the default pool.
    PrivatePools,
}

impl Note {
    /// What the replay assumed to start where the trace starts, when it did not start empty.
    pub fn start_state(init: &super::super::rewind::Placed) -> Option<Note> {
        (!init.segments.is_empty()).then(|| Note::StartState {
            segments: init.segments.len(),
            bytes: init.segments.iter().map(|s| s.size).sum(),
            live_blocks: init.segments.iter().map(|s| s.blocks.len()).sum(),
            assumed_block_sizes: init.assumed_block_sizes,
        })
    }
}

impl std::fmt::Display for Note {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Note::LimitRange {
                lower,
                upper,
                capped,
            } => write!(
                f,
                "the recorded failures imply a limit from {lower} to {upper} bytes{}; the \
                 replay uses the smallest",
                if *capped {
                    " (the OOM left device memory free: a per-process cap, \
                     set_per_process_memory_fraction, which snapshots do not record)"
                } else {
                    ""
                }
            ),
            Note::LimitContradiction { lower, upper } => write!(
                f,
                "no fixed limit explains the recording: the run reserved {lower} bytes, yet a \
                 failed allocation says the limit was at most {upper}; the replay uses {lower}"
            ),
            Note::StartState {
                segments,
                bytes,
                live_blocks,
                assumed_block_sizes,
            } => write!(
                f,
                "the trace starts with {segments} segment(s) of {bytes} bytes and {live_blocks} \
                 live block(s) made before it, rebuilt from the final state with the trace \
                 undone; assumed: free space in them merged as the allocator merges it{}",
                if *assumed_block_sizes > 0 {
                    format!(
                        ", and the size of {assumed_block_sizes} block(s) freed but never \
                         allocated in the trace (their request, rounded)"
                    )
                } else {
                    String::new()
                }
            ),
            Note::UnplacedBlocks(n) => {
                write!(
                    f,
                    "{n} live block(s) before the trace lie in no segment; left out"
                )
            }
            Note::GcWithoutLimit => f.write_str(
                "garbage_collection_threshold acts only under a memory cap \
                 (set_per_process_memory_fraction)",
            ),
            Note::PrivatePools => f.write_str(
                "segments of private pools (CUDA graphs, MemPool) are replayed as the default pool",
            ),
        }
    }
}

impl Simulation {
    /// Whether any scenario of any device had an OOM.
    pub fn has_ooms(&self) -> bool {
        self.devices
            .iter()
            .any(|d| d.scenarios.iter().any(|s| !s.ooms.is_empty()))
    }
}

/// The whole `simulate` report.
#[derive(Clone, Debug, Serialize)]
pub struct Simulation {
    /// JSON tag, always `"allocator_simulation"`.
    pub kind: &'static str,
    /// "file" when the snapshot records `allocator_settings`, else "defaults".
    pub own_settings_from: &'static str,
    /// One replay report per device asked for, in that order.
    pub devices: Vec<DeviceSimulation>,
}

/// What `summary` suggests trying, from a replay it ran (never a guess).
#[derive(Clone, Debug, Serialize)]
pub struct Suggestion {
    /// Device index the suggestion is for.
    pub device: u32,
    /// The `--set` value to pass to `memtrack simulate`.
    pub settings: String,
    /// Peak reserved in bytes replayed under the file's own settings.
    pub own_peak_reserved_bytes: u64,
    /// Peak reserved in bytes replayed under the suggested settings.
    pub peak_reserved_bytes: u64,
    /// OOMs replayed under the file's own settings.
    pub own_ooms: usize,
    /// OOMs replayed under the suggested settings.
    pub ooms: usize,
}
