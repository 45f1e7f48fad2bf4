//! A CUDA caching-allocator snapshot (`torch.cuda.memory._dump_snapshot()`), independent of
//! the pickle it came from and of the schema era that wrote it.
//!
//! Sizes are compact on purpose: a 1M-event snapshot holds ~1.5M trace entries, so an event is
//! 32 bytes of plain data, and stack traces are interned (`StackId`) once per distinct stack,
//! however often the file repeats them.

use serde::Serialize;

/// Index of an interned stack (a list of frames, innermost first, as PyTorch writes them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct StackId(pub u32);

impl StackId {
    /// The entry had no `frames` key at all (older schemas, `snapshot` entries). Distinct from
    /// an empty list, which the file says explicitly.
    pub const MISSING: StackId = StackId(u32::MAX);

    /// Whether the entry had no `frames` key (see [`StackId::MISSING`]).
    pub fn is_missing(self) -> bool {
        self == StackId::MISSING
    }
}

/// Index of an interned frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FrameId(pub u32);

/// Index of an interned string (file names and function names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StrId(pub u32);

/// One Python or C++ frame of a stack, its strings interned in [`Stacks`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Frame {
    /// The source file's path, interned.
    pub filename: StrId,
    /// The function's name, interned.
    pub name: StrId,
    /// Line number in `filename`, as the file gives it.
    pub line: i64,
}

/// Every distinct string, frame and stack of a snapshot, stored once.
#[derive(Clone, Debug, Default)]
pub struct Stacks {
    text: String,
    str_ends: Vec<u32>,
    frames: Vec<Frame>,
    stack_items: Vec<FrameId>,
    stack_ends: Vec<u32>,
}

impl Stacks {
    /// The text of an interned string.
    pub fn str(&self, id: StrId) -> &str {
        let i = id.0 as usize;
        let start = if i == 0 {
            0
        } else {
            self.str_ends[i - 1] as usize
        };
        &self.text[start..self.str_ends[i] as usize]
    }

    /// An interned frame.
    pub fn frame(&self, id: FrameId) -> Frame {
        self.frames[id.0 as usize]
    }

    /// The frames of a stack, innermost first; empty for `StackId::MISSING`.
    pub fn stack(&self, id: StackId) -> &[FrameId] {
        if id.is_missing() {
            return &[];
        }
        let i = id.0 as usize;
        let start = if i == 0 {
            0
        } else {
            self.stack_ends[i - 1] as usize
        };
        &self.stack_items[start..self.stack_ends[i] as usize]
    }

    /// How many distinct stacks are interned.
    pub fn stack_count(&self) -> usize {
        self.stack_ends.len()
    }

    /// How many distinct frames are interned.
    pub fn frame_count(&self) -> usize {
        self.frames.len()
    }

    /// How many strings are interned.
    pub fn string_count(&self) -> usize {
        self.str_ends.len()
    }

    /// Takes out of every stack what `memtrack record` added to it: the agent's Python frames;
    /// just inside each, the `torch/_ops.py` frames of the op call it made (under `record
    /// --snapshot` every allocation is made inside the agent's `__torch_dispatch__`); and the
    /// `inner` frame of `Module._call_impl` that the agent's global module hooks bring (see
    /// [`super::is_hooks_inner_frame`]). C++ frames and every other Python frame stay, a mode
    /// of the program's own below the agent's included. Stacks keep their ids; nothing is done
    /// where no frame is the agent's.
    pub fn drop_agent_frames(&mut self) {
        #[derive(Clone, Copy, PartialEq)]
        enum Kind {
            Agent,
            OpCall,
            HooksInner,
            Python,
            Native,
        }
        let kinds: Vec<Kind> = (self.frames.iter())
            .map(|f| {
                let file = self.str(f.filename);
                if super::is_agent_file(file) {
                    Kind::Agent
                } else if super::is_hooks_inner_frame(file, self.str(f.name)) {
                    Kind::HooksInner
                } else if super::path_ends_with(file, "torch/_ops.py") {
                    Kind::OpCall
                } else if file.ends_with(".py") {
                    Kind::Python
                } else {
                    Kind::Native
                }
            })
            .collect();
        if !kinds.contains(&Kind::Agent) {
            return;
        }
        let (mut items, mut ends) = (Vec::with_capacity(self.stack_items.len()), Vec::new());
        let mut start = 0;
        for &end in &self.stack_ends {
            let stack = &self.stack_items[start..end as usize];
            start = end as usize;
            let kind = |f: FrameId| kinds[f.0 as usize];
            let first = items.len();
            // outermost first, so that an agent frame is met before the op calls inside it
            let mut inside_agent = false;
            for &f in stack.iter().rev() {
                match kind(f) {
                    Kind::Agent => inside_agent = true,
                    Kind::OpCall if inside_agent => {}
                    Kind::HooksInner => {}
                    Kind::Native => items.push(f),
                    _ => {
                        inside_agent = false;
                        items.push(f);
                    }
                }
            }
            items[first..].reverse();
            ends.push(u32::try_from(items.len()).unwrap_or(u32::MAX));
        }
        self.stack_items = items;
        self.stack_ends = ends;
    }

    // ---- construction (the formats layer dedupes by content before calling these) ----

    /// Intern `s` as a new string (the caller dedups).
    pub fn push_str(&mut self, s: &str) -> StrId {
        self.text.push_str(s);
        self.str_ends
            .push(u32::try_from(self.text.len()).unwrap_or(u32::MAX));
        StrId((self.str_ends.len() - 1) as u32)
    }

    /// Intern `f` as a new frame (the caller dedups).
    pub fn push_frame(&mut self, f: Frame) -> FrameId {
        self.frames.push(f);
        FrameId((self.frames.len() - 1) as u32)
    }

    /// Intern the list of `frames`, innermost first, as a new stack (the caller dedups).
    pub fn push_stack(&mut self, frames: &[FrameId]) -> StackId {
        self.stack_items.extend_from_slice(frames);
        self.stack_ends
            .push(u32::try_from(self.stack_items.len()).unwrap_or(u32::MAX));
        StackId((self.stack_ends.len() - 1) as u32)
    }
}

/// A block's `state` in a snapshot's segment list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockState {
    /// Used by a tensor.
    ActiveAllocated,
    /// Freed by the program, waiting for another stream's work to finish
    /// (`active_pending_free`; the docstring's `active_awaiting_free`).
    ActivePendingFree,
    /// Cached, free for reuse.
    Inactive,
    /// A state this version of memtrack does not know: counted as neither allocated nor active.
    Unknown,
}

impl BlockState {
    /// The file's spelling (`active_allocated`, …).
    pub fn name(self) -> &'static str {
        match self {
            BlockState::ActiveAllocated => "active_allocated",
            BlockState::ActivePendingFree => "active_pending_free",
            BlockState::Inactive => "inactive",
            BlockState::Unknown => "unknown",
        }
    }

    /// Used by a tensor now (not only awaiting its free).
    pub fn is_allocated(self) -> bool {
        self == BlockState::ActiveAllocated
    }

    /// Not free: used by a tensor, or freed by the program and awaiting the allocator
    /// (`active_pending_free`).
    pub fn is_active(self) -> bool {
        matches!(
            self,
            BlockState::ActiveAllocated | BlockState::ActivePendingFree
        )
    }
}

/// One entry of a legacy block's `history` (about torch 2.0): an allocation that lives in the
/// block, with its real (requested) size.
#[derive(Clone, Copy, Debug)]
pub struct HistoryEntry {
    /// The allocation's address.
    pub addr: u64,
    /// Bytes the program requested.
    pub real_size: u64,
    /// Where it was allocated.
    pub stack: StackId,
}

/// One block of a segment: a range of its memory, free or in use.
#[derive(Clone, Copy, Debug)]
pub struct Block {
    /// From the file, or (legacy files) the segment address plus the sizes of the blocks before.
    pub address: u64,
    /// In bytes (rounded, as the allocator hands blocks out).
    pub size: u64,
    /// `requested_size` when the file has it.
    pub requested_size: Option<u64>,
    /// Allocated, awaiting its free, free, or a state memtrack does not know.
    pub state: BlockState,
    /// `frames` of the block; `MISSING` in legacy files (see `history`).
    pub stack: StackId,
    /// Legacy `history`: a range of `Snapshot::history`.
    pub history_start: u32,
    /// How many `Snapshot::history` entries from `history_start` are its (0 in newer files).
    pub history_len: u32,
    /// Whether the block had a `frames` key (decides how `_memory_viz` reads its size).
    pub has_frames_key: bool,
}

impl Block {
    /// The bytes the program asked for, as `_memory_viz._block_extra` reads them: `requested_size`
    /// when the block has `frames`; for legacy blocks the first history entry's `real_size`, else
    /// `requested_size`, else `size`.
    pub fn requested(&self, history: &[HistoryEntry]) -> u64 {
        if !self.has_frames_key && self.history_len > 0 {
            return history[self.history_start as usize].real_size;
        }
        self.requested_size.unwrap_or(self.size)
    }

    /// The entries of `history` (the snapshot's `history` list) that are this block's.
    pub fn history<'h>(&self, history: &'h [HistoryEntry]) -> &'h [HistoryEntry] {
        let s = self.history_start as usize;
        &history[s..s + self.history_len as usize]
    }

    /// The stack the block is attributed to: its frames, or its newest history entry's.
    pub fn alloc_stack(&self, history: &[HistoryEntry]) -> StackId {
        if self.history_len > 0 && !self.has_frames_key {
            return history[self.history_start as usize].stack;
        }
        self.stack
    }
}

/// Which of the allocator's pools a segment belongs to: small (blocks of at most 1 MiB, 2 MiB
/// segments) or large.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SizeClass {
    /// The small pool: blocks of at most 1 MiB, carved from 2 MiB segments.
    Small,
    /// The large pool: blocks over 1 MiB.
    Large,
}

impl SizeClass {
    /// The file's spelling (`small`, `large`).
    pub fn name(self) -> &'static str {
        match self {
            SizeClass::Small => "small",
            SizeClass::Large => "large",
        }
    }
}

/// Memory from one cudaMalloc (or one expandable segment), split into blocks.
#[derive(Clone, Debug)]
pub struct Segment {
    /// The CUDA device index.
    pub device: u32,
    /// The segment's base address.
    pub address: u64,
    /// The segment's size in bytes (`total_size`).
    pub total_size: u64,
    /// The CUDA stream it was allocated for (`0` is the default stream).
    pub stream: i64,
    /// `segment_type` from the file, or derived from the size (small segments are 2 MiB).
    pub size_class: SizeClass,
    /// `size_class` was derived from the size: the file has no `segment_type`.
    pub size_class_derived: bool,
    /// `segment_pool_id`; absent in older files (the default pool, (0, 0)).
    pub pool_id: Option<(i64, i64)>,
    /// `is_expandable` (part of an expandable segment), when the file has it.
    pub is_expandable: Option<bool>,
    /// The allocator's own counters, in bytes, when the file has them.
    pub allocated_size: Option<u64>,
    /// Bytes of its active blocks (allocated or awaiting their free), when the file has it.
    pub active_size: Option<u64>,
    /// Bytes requested by the live allocations in it, when the file has it.
    pub requested_size: Option<u64>,
    /// Where the segment was allocated (`MISSING` when the file does not say).
    pub stack: StackId,
    /// Index into `Snapshot::blocks` of its first block.
    pub block_start: u32,
    /// How many blocks it has there.
    pub block_len: u32,
}

impl Segment {
    /// The segment's blocks, in address order, out of the snapshot's `blocks`.
    pub fn blocks<'b>(&self, blocks: &'b [Block]) -> &'b [Block] {
        let s = self.block_start as usize;
        &blocks[s..s + self.block_len as usize]
    }

    /// `segment_pool_id` as PyTorch prints it: `(0, 0)`.
    pub fn pool_name(&self) -> String {
        let (a, b) = self.pool_id.unwrap_or((0, 0));
        format!("({a}, {b})")
    }
}

/// What a trace event says happened (`action` in the file).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// The program allocated `size` bytes at `addr`.
    Alloc,
    /// The program freed the block at `addr` (allocated bytes drop here).
    FreeRequested,
    /// The block returned to the pool once the streams that used it finished.
    FreeCompleted,
    /// The allocator cudaMalloc'd a new segment of `size` bytes.
    SegmentAlloc,
    /// The allocator gave a segment back with cudaFree (e.g. `empty_cache()`).
    SegmentFree,
    /// Pages of an expandable segment were mapped.
    SegmentMap,
    /// Pages of an expandable segment were unmapped.
    SegmentUnmap,
    /// An allocation of `size` bytes failed: out of memory.
    Oom,
    /// A snapshot was taken here (ties snapshots to trace events).
    Snapshot,
    /// Metadata (the event's `user_metadata`) attached to the allocation at `addr`.
    Annotate,
    /// An action this version does not know; its name is in the event's aux entry.
    Other,
}

impl Action {
    /// Every action, in declaration order.
    pub const ALL: [Action; 11] = [
        Action::Alloc,
        Action::FreeRequested,
        Action::FreeCompleted,
        Action::SegmentAlloc,
        Action::SegmentFree,
        Action::SegmentMap,
        Action::SegmentUnmap,
        Action::Oom,
        Action::Snapshot,
        Action::Annotate,
        Action::Other,
    ];

    /// The file's spelling (`alloc`, `free_requested`, …).
    pub fn name(self) -> &'static str {
        match self {
            Action::Alloc => "alloc",
            Action::FreeRequested => "free_requested",
            Action::FreeCompleted => "free_completed",
            Action::SegmentAlloc => "segment_alloc",
            Action::SegmentFree => "segment_free",
            Action::SegmentMap => "segment_map",
            Action::SegmentUnmap => "segment_unmap",
            Action::Oom => "oom",
            Action::Snapshot => "snapshot",
            Action::Annotate => "annotate",
            Action::Other => "other",
        }
    }

    /// The action a file's `action` string names (`Unknown` for any other).
    pub fn from_name(s: &str) -> Action {
        Action::ALL
            .into_iter()
            .find(|a| a.name() == s && *a != Action::Other)
            .unwrap_or(Action::Other)
    }
}

/// `time_us` absent.
pub const NO_TIME: i64 = i64::MIN;
/// One `device_traces` entry. 32 bytes: a capture holds millions (what the big ones cost in
/// memory is mostly these), so its stream is an index into the trace's streams and what only
/// some events carry lies beside, in [`DeviceTrace::aux`].
#[derive(Clone, Copy, Debug)]
pub struct TraceEvent {
    /// `addr` (0 when absent, as for `oom`).
    pub addr: u64,
    /// `size`: for alloc/free the bytes requested, for segment actions the segment's size.
    pub size: u64,
    /// `time_us`, or `NO_TIME`.
    pub time_us: i64,
    /// The event's `frames`, interned; `MISSING` when it has none.
    pub stack: StackId,
    /// Index into `DeviceTrace::streams` ([`DeviceTrace::stream`] reads it).
    pub stream_index: u16,
    /// What happened.
    pub action: Action,
}

const _: () = assert!(std::mem::size_of::<TraceEvent>() == 32);

impl Default for TraceEvent {
    /// An entry with only an unknown action: no address, size, time or stack.
    fn default() -> TraceEvent {
        TraceEvent {
            addr: 0,
            size: 0,
            time_us: NO_TIME,
            stack: StackId::MISSING,
            stream_index: 0,
            action: Action::Other,
        }
    }
}

impl TraceEvent {
    /// `time_us`, when the file recorded times.
    pub fn time(&self) -> Option<i64> {
        (self.time_us != NO_TIME).then_some(self.time_us)
    }
}

/// What only some events carry.
#[derive(Clone, Debug, Default, Serialize)]
pub struct EventAux {
    /// `oom`: what CUDA still reported free.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_free: Option<u64>,
    /// `user_metadata` when not empty.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_metadata: Option<String>,
    /// `compile_context` when not empty or "N/A".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compile_context: Option<String>,
    /// The action's name when it is `Other`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action_name: Option<String>,
}

impl EventAux {
    /// Whether it carries anything (an event's aux is kept only then).
    pub fn says_something(&self) -> bool {
        self.device_free.is_some()
            || self.user_metadata.is_some()
            || self.compile_context.is_some()
            || self.action_name.is_some()
    }
}

/// Distinct streams a trace may have: a CUDA program uses a handful (PyTorch's pool is 32 a
/// priority a device).
pub const MAX_STREAMS: usize = u16::MAX as usize + 1;

/// A device's trace uses more than [`MAX_STREAMS`] distinct streams (its events keep a
/// stream as a 16-bit index).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("more than {MAX_STREAMS} distinct streams in one device's trace")]
pub struct TooManyStreams;

/// One device's trace: its events in order, what few of them carry beyond the common fields, and
/// the streams they use.
#[derive(Clone, Debug, Default)]
pub struct DeviceTrace {
    /// In the order the allocator recorded them.
    pub events: Vec<TraceEvent>,
    /// (event index, what it carries) for the events that carry anything, in event order.
    pub aux: Vec<(u32, EventAux)>,
    /// The distinct `stream` values, in order of first use.
    pub streams: Vec<i64>,
}

impl DeviceTrace {
    /// Add `e` on `stream`, with `aux` when it says anything. Err past [`MAX_STREAMS`]
    /// distinct streams.
    pub fn push(
        &mut self,
        e: TraceEvent,
        stream: i64,
        aux: EventAux,
    ) -> Result<(), TooManyStreams> {
        let aux = aux.says_something().then_some(aux);
        self.push_with(e, stream, aux)
    }

    /// `push` of another trace's event, its `aux` copied only when it says anything (an
    /// `EventAux` made, moved and dropped for every event cost a sink that keeps events
    /// as much as the rest of its work).
    #[inline(always)]
    pub fn push_copy(
        &mut self,
        e: TraceEvent,
        stream: i64,
        aux: Option<&EventAux>,
    ) -> Result<(), TooManyStreams> {
        self.push_with(e, stream, aux.filter(|a| a.says_something()).cloned())
    }

    /// `push`'s step, with the aux already known to say something.
    #[inline(always)]
    fn push_with(
        &mut self,
        mut e: TraceEvent,
        stream: i64,
        aux: Option<EventAux>,
    ) -> Result<(), TooManyStreams> {
        e.stream_index = self.stream_index(stream)?;
        if let Some(aux) = aux {
            self.aux.push((self.events.len() as u32, aux));
        }
        self.events.push(e);
        Ok(())
    }

    /// The index of `stream` in `streams`, added if new. Err past [`MAX_STREAMS`].
    #[inline]
    pub fn stream_index(&mut self, stream: i64) -> Result<u16, TooManyStreams> {
        // the last one used first: events come in runs on one stream
        if let Some(&last) = self.events.last() {
            if self.streams[last.stream_index as usize] == stream {
                return Ok(last.stream_index);
            }
        }
        if let Some(i) = self.streams.iter().position(|&s| s == stream) {
            return Ok(i as u16);
        }
        if self.streams.len() == MAX_STREAMS {
            return Err(TooManyStreams);
        }
        self.streams.push(stream);
        Ok((self.streams.len() - 1) as u16)
    }

    /// The `stream` of an event of this trace.
    #[inline]
    pub fn stream(&self, e: &TraceEvent) -> i64 {
        self.streams[e.stream_index as usize]
    }

    /// What event `index` carries beyond the common fields.
    pub fn aux(&self, index: usize) -> Option<&EventAux> {
        let i = self
            .aux
            .binary_search_by_key(&(index as u32), |&(at, _)| at)
            .ok()?;
        Some(&self.aux[i].1)
    }
}

/// `external_annotations` entry: a START/END mark (e.g. the profiler's record_function ranges).
#[derive(Clone, Debug, Serialize)]
pub struct Annotation {
    /// The device, when the annotation names one.
    pub device: Option<u32>,
    /// `START` or `END`.
    pub stage: String,
    /// The range's name.
    pub name: String,
    /// Microseconds, the trace's clock.
    pub time_us: Option<i64>,
}

/// How the file was laid out: which schema-era features it has.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Layout {
    /// `torch.cuda.memory_snapshot()` output: a bare list of segments, no traces.
    pub bare_segment_list: bool,
    /// The file has `device_traces`.
    pub has_device_traces: bool,
    /// Blocks carry `history` and no `address` (about torch 2.0).
    pub legacy_block_history: bool,
    /// Trace events carry `time_us`.
    pub has_time_us: bool,
    /// The file records `allocator_settings`.
    pub has_allocator_settings: bool,
    /// The file has `external_annotations`.
    pub has_external_annotations: bool,
}

/// What of a snapshot was converted: commands ask only for what they use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Parts {
    /// Everything.
    #[default]
    All,
    /// Trace events without their stacks (`stack` is `MISSING`).
    EventsWithoutStacks,
    /// Segments and blocks; traces only counted (`trace_lengths`), their events left out.
    SegmentsOnly,
}

/// A whole snapshot.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Which parts were converted.
    pub parts: Parts,
    /// Number of entries of each `device_traces` list, whatever was converted.
    pub trace_lengths: Vec<usize>,
    /// Every device's segments, in file order.
    pub segments: Vec<Segment>,
    /// The blocks of every segment (each segment indexes its own run).
    pub blocks: Vec<Block>,
    /// Legacy blocks' `history` entries (each block indexes its own run).
    pub history: Vec<HistoryEntry>,
    /// `device_traces`, one per device index (may be longer than the devices with segments).
    pub traces: Vec<DeviceTrace>,
    /// The interned frames and stacks that `StackId`s index.
    pub stacks: Stacks,
    /// `allocator_settings`, in file order, values as JSON.
    pub allocator_settings: Option<Vec<(String, serde_json::Value)>>,
    /// `external_annotations`, in file order.
    pub annotations: Vec<Annotation>,
    /// Which schema-era features the file has.
    pub layout: Layout,
}

impl Snapshot {
    /// Devices that hold segments or have trace events, ascending.
    pub fn devices(&self) -> Vec<u32> {
        let mut d: Vec<u32> = self.segments.iter().map(|s| s.device).collect();
        for (i, &n) in self.trace_lengths.iter().enumerate() {
            if n > 0 {
                d.push(i as u32);
            }
        }
        d.sort_unstable();
        d.dedup();
        d
    }

    /// Whether the blocks in use at the end on `devices` carry stacks: `Some(false)` when none
    /// does (a capture recorded without `context`, or before any history was recorded),
    /// `Some(true)` when one does, None when no block is in use.
    pub fn allocations_have_stacks(&self, devices: &[u32]) -> Option<bool> {
        let mut any = false;
        for s in self.segments.iter().filter(|s| devices.contains(&s.device)) {
            for b in s
                .blocks(&self.blocks)
                .iter()
                .filter(|b| b.state.is_allocated())
            {
                any = true;
                let stack = b.alloc_stack(&self.history);
                if !stack.is_missing() && !self.stacks.stack(stack).is_empty() {
                    return Some(true);
                }
            }
        }
        any.then_some(false)
    }

    /// The trace of `device`, if the file has one.
    pub fn trace(&self, device: u32) -> Option<&DeviceTrace> {
        self.traces.get(device as usize)
    }

    /// The segments of `device`, in file order.
    pub fn segments_on(&self, device: u32) -> impl Iterator<Item = &Segment> + '_ {
        self.segments.iter().filter(move |s| s.device == device)
    }

    /// Frames formatted as `_memory_viz` does (`file:line:name`, file name only).
    pub fn frame_label(&self, f: FrameId, full_filename: bool) -> String {
        let fr = self.stacks.frame(f);
        let file = self.stacks.str(fr.filename);
        let file = if full_filename {
            file
        } else {
            short_filename(file)
        };
        format!("{}:{}:{}", file, fr.line, self.stacks.str(fr.name))
    }
}

/// The last path component, for `/` and (Windows captures) `\` separators.
pub fn short_filename(path: &str) -> &str {
    path.rsplit(['/', '\\']).next().unwrap_or(path)
}

#[cfg(test)]
mod tests {
    use super::{Frame, Stacks};

    /// A stack of `(file, function)` frames, innermost first, interned in `s`.
    fn push(s: &mut Stacks, frames: &[(&str, &str)]) -> super::StackId {
        let ids: Vec<_> = (frames.iter())
            .map(|&(file, name)| {
                let filename = s.push_str(file);
                let name = s.push_str(name);
                s.push_frame(Frame {
                    filename,
                    name,
                    line: 1,
                })
            })
            .collect();
        s.push_stack(&ids)
    }

    fn names(s: &Stacks, id: super::StackId) -> Vec<String> {
        (s.stack(id).iter())
            .map(|&f| s.str(s.frame(f).name).to_string())
            .collect()
    }

    const AGENT: &str = "/tmp/memtrack-1/agent/_memtrack_agent/ops.py";
    const OPS: &str = "/venv/lib/python3.11/site-packages/torch/_ops.py";
    const MODULE: &str = "/venv/lib/python3.11/site-packages/torch/nn/modules/module.py";

    #[test]
    fn the_agents_frames_and_its_op_calls_go_and_the_rest_stays() {
        let mut s = Stacks::default();
        // `record --snapshot`'s shape: the allocator, the op call the agent made, the agent,
        // the module, torch's `inner` (the agent's hooks), the program
        let recorded = push(
            &mut s,
            &[
                ("c10/cuda/CUDACachingAllocator.cpp", "malloc"),
                (OPS, "__call__"),
                ("??", "torch::handle_torch_function"),
                (AGENT, "_dispatch"),
                (AGENT, "__torch_dispatch__"),
                ("linear.py", "forward"),
                (MODULE, "inner"),
                (MODULE, "_call_impl"),
                ("train.py", "main"),
            ],
        );
        // a mode of the program's own below the agent's: its op call and its code stay
        let user_mode = push(
            &mut s,
            &[
                ("c10/cuda/CUDACachingAllocator.cpp", "malloc"),
                (OPS, "__call__"),
                ("my_mode.py", "__torch_dispatch__"),
                (OPS, "__call__"),
                (AGENT, "__torch_dispatch__"),
                ("train.py", "main"),
            ],
        );
        s.drop_agent_frames();
        assert_eq!(
            names(&s, recorded),
            [
                "malloc",
                "torch::handle_torch_function",
                "forward",
                "_call_impl",
                "main"
            ]
        );
        assert_eq!(
            names(&s, user_mode),
            ["malloc", "__call__", "__torch_dispatch__", "main"]
        );
    }

    #[test]
    fn without_the_agent_nothing_changes() {
        let mut s = Stacks::default();
        let frames = [
            ("c10/cuda/CUDACachingAllocator.cpp", "malloc"),
            (OPS, "__call__"),
            (MODULE, "inner"),
            ("train.py", "main"),
        ];
        let id = push(&mut s, &frames);
        s.drop_agent_frames();
        assert_eq!(names(&s, id), ["malloc", "__call__", "inner", "main"]);
    }
}
