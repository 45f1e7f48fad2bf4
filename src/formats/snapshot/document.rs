//! Allocator snapshots (`torch.cuda.memory._dump_snapshot()`, `memory_snapshot()`), every
//! schema era, to `model::Snapshot`.
//!
//! Layouts read (docs/snapshots.md):
//! - `{"segments": [...], "device_traces": [[...], ...], "allocator_settings": {...},
//!   "external_annotations": [...]}`; the last two (and `time_us`, `frames`) are absent in older
//!   files;
//! - legacy blocks (about torch 2.0) with `history: [{addr, real_size, frames}]` and no
//!   `address`;
//! - a bare list of segment dicts (`torch.cuda.memory_snapshot()`).
//!
//! Frames, frame lists and strings are shared through the pickle memo, and the reader keeps
//! them shared (same `Value` handle), so each distinct one is converted once here, looked up
//! by handle; equal ones that the file did not share are merged by content.

use rustc_hash::FxHashMap;

use crate::model::snapshot::{
    Action, Annotation, Block, BlockState, DeviceTrace, EventAux, Frame, FrameId, HistoryEntry,
    Parts, Segment, SizeClass, Snapshot, StackId, StrId, TraceEvent, NO_TIME,
};
use crate::pickle::{Document, Value, View};

use super::fields::{KeyCache, BLOCK_FIELDS, EVENT_FIELDS, FRAME_FIELDS, SEG_FIELDS};
use super::traces::StreamedTraces;

use crate::formats::error::Parse;

/// Lists of frame dicts remembered with their stack (a few MB at most).
const FRAME_VALUE_STACKS: usize = 1 << 14;

/// Small segments are 2 MiB (kSmallBuffer); large ones at least 10 MiB.
const SMALL_SEGMENT_MAX: u64 = 2 << 20;

pub fn from_document(doc: &Document) -> Parse<Snapshot> {
    from_document_parts(doc, Parts::All)
}

/// Convert only `parts` of the snapshot (what a command uses), checking the rest as lists.
pub fn from_document_parts(doc: &Document, parts: Parts) -> Parse<Snapshot> {
    convert(doc, parts, None).map(|(snap, _)| snap)
}

/// Convert a document whose `device_traces` `TraceReader` read while it was parsed
/// (`pickle::parse_with_divert`); with the snapshot's id of each stack the reading numbered
/// (none without stacks).
pub fn from_document_streamed(
    doc: &Document,
    parts: Parts,
    streamed: StreamedTraces,
) -> Parse<(Snapshot, Vec<StackId>)> {
    convert(doc, parts, Some(streamed))
}

/// The snapshot, and the snapshot's ids of the `streamed` reading's stacks.
fn convert(
    doc: &Document,
    parts: Parts,
    streamed: Option<StreamedTraces>,
) -> Parse<(Snapshot, Vec<StackId>)> {
    let mut stack_ids = Vec::new();
    let root = doc.root();
    let mut c = Conv::new(doc);
    c.snap.parts = parts;
    if let View::List(segments) = doc.view(root) {
        c.snap.layout.bare_segment_list = true;
        c.segments(segments)?;
        return Ok((c.finish(), stack_ids));
    }
    let d = doc
        .as_dict(root)
        .ok_or("snapshot: top-level value is not a dict")?;
    if let Some(v) = d.get("segments") {
        let segs = seq(doc, v, "segments")?;
        c.segments(segs)?;
    }
    if let Some(streamed) = streamed {
        c.snap.layout.has_device_traces = true;
        stack_ids = c.streamed_traces(streamed)?;
    } else if let Some(v) = d.get("device_traces") {
        c.snap.layout.has_device_traces = true;
        let traces = seq(doc, v, "device_traces")?;
        for (i, &t) in traces.iter().enumerate() {
            let entries = seq(doc, t, &format!("device_traces[{i}]"))?;
            c.snap.trace_lengths.push(entries.len());
            let trace = if parts == Parts::SegmentsOnly {
                DeviceTrace::default()
            } else {
                c.trace(i, entries)?
            };
            c.snap.traces.push(trace);
        }
    }
    if let Some(v) = d.get("allocator_settings") {
        c.snap.layout.has_allocator_settings = true;
        let s = doc.as_dict(v).ok_or_else(|| {
            format!(
                "allocator_settings: expected a dict, found {}",
                doc.type_name(v)
            )
        })?;
        let mut out = Vec::with_capacity(s.len());
        for (k, v) in s.iter() {
            let key = match doc.as_str(k) {
                Some(s) => s.to_string(),
                None => to_json(doc, k, 0, &mut c.expansion)?.to_string(),
            };
            out.push((key, to_json(doc, v, 0, &mut c.expansion)?));
        }
        c.snap.allocator_settings = Some(out);
    }
    if let Some(v) = d.get("external_annotations") {
        c.snap.layout.has_external_annotations = true;
        for (i, &a) in seq(doc, v, "external_annotations")?.iter().enumerate() {
            let ctx = || format!("external_annotations[{i}]");
            let ad = doc
                .as_dict(a)
                .ok_or_else(|| format!("{}: expected a dict", ctx()))?;
            let expansion = &mut c.expansion;
            let mut text = |key: &str| -> Parse<String> {
                Ok(match ad.get(key) {
                    None => String::new(),
                    Some(v) => match doc.as_str(v) {
                        Some(s) => s.to_string(),
                        None => to_json(doc, v, 0, expansion)?.to_string(),
                    },
                })
            };
            let device = match ad.get("device") {
                Some(v) => Some(device_index(doc, v, &format!("{}.device", ctx()))?),
                None => None,
            };
            c.snap.annotations.push(Annotation {
                device,
                stage: text("stage")?,
                name: text("name")?,
                time_us: ad.get("time_us").and_then(|v| doc.as_int(v)),
            });
        }
    }
    Ok((c.finish(), stack_ids))
}

fn seq<'d>(doc: &'d Document, v: Value, what: &str) -> Parse<&'d [Value]> {
    doc.as_seq(v)
        .ok_or_else(|| format!("{what}: expected a list, found {}", doc.type_name(v)).into())
}

fn device_index(doc: &Document, v: Value, what: &str) -> Parse<u32> {
    doc.as_int(v)
        .and_then(|i| u32::try_from(i).ok())
        .ok_or_else(|| {
            format!(
                "{what}: expected a device index, found {}",
                describe(doc, v)
            )
            .into()
        })
}

fn describe(doc: &Document, v: Value) -> String {
    match doc.view(v) {
        View::Int(i) => i.to_string(),
        View::Str(s) => format!("'{}'", s.chars().take(40).collect::<String>()),
        _ => doc.type_name(v).to_string(),
    }
}

#[inline]
fn non_negative(doc: &Document, v: Value, what: &dyn Fn() -> String) -> Parse<u64> {
    match doc.as_int(v) {
        Some(i) if i >= 0 => Ok(i as u64),
        _ => non_negative_slow(doc, v, what),
    }
}

#[cold]
fn non_negative_slow(doc: &Document, v: Value, what: &dyn Fn() -> String) -> Parse<u64> {
    match doc.view(v) {
        View::Int(i) if i >= 0 => Ok(i as u64),
        View::Bool(b) => Ok(b as u64),
        View::Int(i) => Err(format!("{}: expected a size or address, found {i}", what()).into()),
        // 2^63 up to 2^64 - 1 fit in 64 bits (unsigned), and are still past what any
        // allocator reports (every reader keeps sizes within i64)
        View::BigInt(le) => Err(match crate::pickle::big_int_to_u64(le) {
            Some(n) => format!(
                "{}: {n}, where a size or address was expected: past 2^63 - 1, which no allocator reports (a damaged or hand-made file?)",
                what()
            ),
            None => format!(
                "{}: an integer wider than 64 bits where a size or address was expected",
                what()
            ),
        }
        .into()),
        _ => Err(format!("{}: expected an int, found {}", what(), doc.type_name(v)).into()),
    }
}

/// Plain pickle values as JSON (settings and annotations hold only these).
fn to_json(
    doc: &Document,
    v: Value,
    depth: usize,
    expansion: &mut Expansion,
) -> Parse<serde_json::Value> {
    use serde_json::Value as J;
    if depth > 32 {
        return Ok(J::Null);
    }
    expansion.meet(1, &|| "a setting or annotation".to_string())?;
    Ok(match doc.view(v) {
        View::None => J::Null,
        View::Bool(b) => J::Bool(b),
        View::Int(i) => J::from(i),
        View::BigInt(b) => J::from(crate::pickle::big_int_to_f64(b)),
        View::Float(f) => serde_json::Number::from_f64(f).map_or(J::Null, J::Number),
        View::Str(s) => J::String(s.to_string()),
        View::Bytes(b) => J::String(String::from_utf8_lossy(b).into_owned()),
        View::Tuple(items) | View::List(items) | View::Set(items) => J::Array(
            (items.iter())
                .map(|&x| to_json(doc, x, depth + 1, expansion))
                .collect::<Parse<_>>()?,
        ),
        View::Dict(items) => {
            let mut m = serde_json::Map::new();
            for (k, v) in items.iter() {
                let k = match doc.as_str(k) {
                    Some(s) => s.to_string(),
                    None => to_json(doc, k, depth + 1, expansion)?.to_string(),
                };
                m.insert(k, to_json(doc, v, depth + 1, expansion)?);
            }
            J::Object(m)
        }
        View::Global { module, name } => J::String(format!("{module}.{name}")),
        View::Object(_) => J::String("<object>".into()),
        // a value `TraceReader` kept to itself where settings or annotations were expected
        View::Taken(_) => return Err("a trace event where plain values were expected".into()),
    })
}

struct Conv<'d> {
    doc: &'d Document,
    snap: Snapshot,
    str_by_handle: FxHashMap<Value, StrId>,
    str_by_text: FxHashMap<&'d str, StrId>,
    frame_by_handle: FxHashMap<Value, FrameId>,
    frame_by_content: FxHashMap<Frame, FrameId>,
    stack_by_handle: FxHashMap<Value, StackId>,
    stack_by_content: FxHashMap<Vec<FrameId>, StackId>,
    /// Stacks by the frame dicts they list: blocks and events list the same shared (memoized)
    /// frame dicts again and again (real captures: a thousand blocks, eight lists of
    /// them), and one lookup of the list saves one of each of its few dozen frames.
    stack_by_frame_values: FxHashMap<Box<[Value]>, StackId>,
    scratch: Vec<FrameId>,
    seg_keys: KeyCache,
    block_keys: KeyCache,
    event_keys: KeyCache,
    frame_keys: KeyCache,
    actions: Vec<(Value, Action)>,
    states: Vec<(Value, BlockState)>,
    expansion: Expansion,
}

/// How many segments, blocks and plain values (settings, annotations) a reading has met,
/// against how many the file can honestly hold. Each takes more than `MIN_BYTES_PER_VALUE`
/// bytes of pickle where it is not a shared reference (a memo get) to one met before, and
/// PyTorch shares none of them; a file that expands past `length / MIN_BYTES_PER_VALUE +
/// SLACK` through shared references (a "billion laughs" file: 256 bytes that would expand to
/// 10^8 values) is refused rather than expanded.
struct Expansion {
    met: usize,
    limit: usize,
    file_len: usize,
}

impl Expansion {
    const MIN_BYTES_PER_VALUE: usize = 4;
    const SLACK: usize = 1 << 16;

    fn new(file_len: usize) -> Expansion {
        Expansion {
            met: 0,
            limit: match file_len {
                0 => usize::MAX,
                n => n / Self::MIN_BYTES_PER_VALUE + Self::SLACK,
            },
            file_len,
        }
    }

    /// Count `n` more values met at `what`; an error once past the limit.
    fn meet(&mut self, n: usize, what: &dyn Fn() -> String) -> Parse<()> {
        self.met = self.met.saturating_add(n);
        if self.met <= self.limit {
            return Ok(());
        }
        Err(format!(
            "{}: the file expands through shared references to more than {} values, more \
             than a file of {} bytes holds (a crafted or damaged file); refused",
            what(),
            self.limit,
            self.file_len
        )
        .into())
    }
}

impl<'d> Conv<'d> {
    fn new(doc: &'d Document) -> Conv<'d> {
        Conv {
            doc,
            snap: Snapshot::default(),
            str_by_handle: FxHashMap::default(),
            str_by_text: FxHashMap::default(),
            frame_by_handle: FxHashMap::default(),
            frame_by_content: FxHashMap::default(),
            stack_by_handle: FxHashMap::default(),
            stack_by_content: FxHashMap::default(),
            stack_by_frame_values: FxHashMap::default(),
            scratch: Vec::new(),
            seg_keys: KeyCache::new(SEG_FIELDS),
            block_keys: KeyCache::new(BLOCK_FIELDS),
            event_keys: KeyCache::new(EVENT_FIELDS),
            frame_keys: KeyCache::new(FRAME_FIELDS),
            actions: Vec::new(),
            states: Vec::new(),
            expansion: Expansion::new(doc.source_len()),
        }
    }

    fn finish(mut self) -> Snapshot {
        self.snap.stacks.drop_agent_frames();
        // (a streamed reading said so already, of every event it read)
        let l = &mut self.snap.layout;
        l.has_time_us = l.has_time_us
            || (self.snap.traces.iter()).any(|t| t.events.iter().any(|e| e.time_us != NO_TIME));
        self.snap
    }

    /// The traces `TraceReader` read: its stacks (frame dicts of the document) interned here,
    /// in the order it met them, which is the order `trace` would meet them in; the
    /// snapshot's id of each (for events it gave a sink, which carry the reading's ids).
    fn streamed_traces(&mut self, st: StreamedTraces) -> Parse<Vec<StackId>> {
        let mut global = Vec::with_capacity(st.stacks.len());
        if self.snap.parts == Parts::All {
            for (i, frames) in st.stacks.iter().enumerate() {
                global.push(self.stack_of_frames(frames, &|| format!("device_traces: stack {i}"))?);
            }
        }
        self.snap.trace_lengths = st.lengths;
        self.snap.traces = st.traces;
        // (events given to a sink are not in the traces)
        self.snap.layout.has_time_us = st.any_time;
        if self.snap.parts == Parts::All {
            for t in &mut self.snap.traces {
                for e in &mut t.events {
                    if !e.stack.is_missing() {
                        e.stack = global[e.stack.0 as usize];
                    }
                }
            }
        }
        Ok(global)
    }

    // ---- strings, frames, stacks: interned by handle, then by content ----

    fn string(&mut self, v: Value, what: &dyn Fn() -> String) -> Parse<StrId> {
        if let Some(&id) = self.str_by_handle.get(&v) {
            return Ok(id);
        }
        let doc = self.doc;
        let s: &'d str = match doc.as_str(v) {
            Some(s) => s,
            None if v == Value::NONE => "",
            None => {
                return Err(
                    format!("{}: expected a string, found {}", what(), doc.type_name(v)).into(),
                )
            }
        };
        let id = self.string_text(s);
        self.str_by_handle.insert(v, id);
        Ok(id)
    }

    fn frame(&mut self, v: Value, what: &dyn Fn() -> String) -> Parse<FrameId> {
        if let Some(&id) = self.frame_by_handle.get(&v) {
            return Ok(id);
        }
        let doc = self.doc;
        let d = doc.as_dict(v).ok_or_else(|| {
            format!(
                "{}: a frame must be a dict, found {}",
                what(),
                doc.type_name(v)
            )
        })?;
        let (mut filename, mut name, mut line) = (None, None, 0i64);
        for (pos, (k, x)) in d.iter().enumerate() {
            match self.frame_keys.field(doc, pos, k) {
                0 => filename = Some(self.string(x, &|| format!("{}.filename", what()))?),
                1 => name = Some(self.string(x, &|| format!("{}.name", what()))?),
                2 => line = doc.as_int(x).unwrap_or(0),
                _ => {}
            }
        }
        let f = Frame {
            filename: match filename {
                Some(s) => s,
                None => self.string_text(""),
            },
            name: match name {
                Some(s) => s,
                None => self.string_text(""),
            },
            line,
        };
        let stacks = &mut self.snap.stacks;
        let id = *self
            .frame_by_content
            .entry(f)
            .or_insert_with(|| stacks.push_frame(f));
        self.frame_by_handle.insert(v, id);
        Ok(id)
    }

    /// The id of a string's text, pushed the first time it is seen.
    fn string_text(&mut self, s: &'d str) -> StrId {
        let stacks = &mut self.snap.stacks;
        *self
            .str_by_text
            .entry(s)
            .or_insert_with(|| stacks.push_str(s))
    }

    /// A `frames` list; `None` (Python None) reads as an empty stack.
    fn stack(&mut self, v: Value, what: &dyn Fn() -> String) -> Parse<StackId> {
        if let Some(&id) = self.stack_by_handle.get(&v) {
            return Ok(id);
        }
        let doc = self.doc;
        let items: &[Value] = match doc.view(v) {
            View::List(s) | View::Tuple(s) => s,
            View::None => &[],
            _ => {
                return Err(format!(
                    "{}: expected a list of frames, found {}",
                    what(),
                    doc.type_name(v)
                )
                .into())
            }
        };
        let id = self.stack_of_frames(items, what)?;
        self.stack_by_handle.insert(v, id);
        Ok(id)
    }

    /// The stack of these frames (frame dicts), interned by content.
    fn stack_of_frames(&mut self, items: &[Value], what: &dyn Fn() -> String) -> Parse<StackId> {
        if let Some(&id) = self.stack_by_frame_values.get(items) {
            return Ok(id);
        }
        let id = self.stack_of_new_frames(items, what)?;
        // (bounded: a file that writes fresh frame dicts for each block never hits)
        if self.stack_by_frame_values.len() < FRAME_VALUE_STACKS {
            self.stack_by_frame_values.insert(items.into(), id);
        }
        Ok(id)
    }

    /// The stack of frame dicts not listed so before, each frame interned.
    fn stack_of_new_frames(
        &mut self,
        items: &[Value],
        what: &dyn Fn() -> String,
    ) -> Parse<StackId> {
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        for (i, &f) in items.iter().enumerate() {
            match self.frame(f, &|| format!("{}[{i}]", what())) {
                Ok(id) => scratch.push(id),
                Err(e) => {
                    self.scratch = scratch;
                    return Err(e);
                }
            }
        }
        let id = match self.stack_by_content.get(&scratch) {
            Some(&id) => id,
            None => {
                let id = self.snap.stacks.push_stack(&scratch);
                self.stack_by_content.insert(scratch.clone(), id);
                id
            }
        };
        self.scratch = scratch;
        Ok(id)
    }

    // ---- segments and blocks ----

    fn segments(&mut self, segs: &'d [Value]) -> Parse<()> {
        self.snap.segments.reserve(segs.len());
        for (i, &s) in segs.iter().enumerate() {
            self.segment(i, s)?;
        }
        Ok(())
    }

    fn segment(&mut self, i: usize, v: Value) -> Parse<()> {
        let doc = self.doc;
        let ctx = |f: &str| format!("segments[{i}].{f}");
        let d = doc.as_dict(v).ok_or_else(|| {
            format!(
                "segments[{i}]: expected a segment dict, found {}",
                doc.type_name(v)
            )
        })?;
        let mut seg = Segment {
            device: 0,
            address: 0,
            total_size: 0,
            stream: 0,
            size_class: SizeClass::Large,
            size_class_derived: true,
            pool_id: None,
            is_expandable: None,
            allocated_size: None,
            active_size: None,
            requested_size: None,
            stack: StackId::MISSING,
            block_start: self.snap.blocks.len() as u32,
            block_len: 0,
        };
        let mut have_total = false;
        let mut blocks = None;
        let mut segment_type = None;
        for (pos, (k, x)) in d.iter().enumerate() {
            match self.seg_keys.field(doc, pos, k) {
                0 => seg.device = device_index(doc, x, &ctx("device"))?,
                1 if x != Value::NONE => {
                    seg.address = non_negative(doc, x, &|| ctx("address"))?;
                }
                2 => {
                    seg.total_size = non_negative(doc, x, &|| ctx("total_size"))?;
                    have_total = true;
                }
                3 => seg.stream = doc.as_int(x).unwrap_or(0),
                4 => segment_type = Some(x),
                5 => {
                    if let Some([a, b]) = doc.as_seq(x) {
                        seg.pool_id =
                            Some((doc.as_int(*a).unwrap_or(0), doc.as_int(*b).unwrap_or(0)));
                    }
                }
                6 => seg.is_expandable = doc.as_bool(x),
                7 => seg.allocated_size = Some(non_negative(doc, x, &|| ctx("allocated_size"))?),
                8 => seg.active_size = Some(non_negative(doc, x, &|| ctx("active_size"))?),
                9 => seg.requested_size = Some(non_negative(doc, x, &|| ctx("requested_size"))?),
                10 => seg.stack = self.stack(x, &|| ctx("frames"))?,
                11 => blocks = Some(x),
                _ => {}
            }
        }
        if !have_total {
            return Err(format!("segments[{i}]: no 'total_size'").into());
        }
        let blocks = match blocks {
            Some(b) => seq(doc, b, &ctx("blocks"))?,
            None => &[],
        };
        match segment_type.and_then(|t| doc.as_str(t)) {
            Some("small") => {
                seg.size_class = SizeClass::Small;
                seg.size_class_derived = false;
            }
            Some("large") => {
                seg.size_class = SizeClass::Large;
                seg.size_class_derived = false;
            }
            _ => {
                seg.size_class = if seg.total_size <= SMALL_SEGMENT_MAX {
                    SizeClass::Small
                } else {
                    SizeClass::Large
                };
            }
        }
        self.expansion
            .meet(1 + blocks.len(), &|| format!("segments[{i}]"))?;
        let mut offset = seg.address;
        for (j, &b) in blocks.iter().enumerate() {
            let block = self.block(i, j, b, offset)?;
            offset = offset.wrapping_add(block.size);
            self.snap.blocks.push(block);
        }
        seg.block_len = blocks.len() as u32;
        self.snap.segments.push(seg);
        Ok(())
    }

    fn block(&mut self, i: usize, j: usize, v: Value, offset: u64) -> Parse<Block> {
        let doc = self.doc;
        let ctx = |f: &str| format!("segments[{i}].blocks[{j}].{f}");
        let d = doc.as_dict(v).ok_or_else(|| {
            format!(
                "segments[{i}].blocks[{j}]: expected a block dict, found {}",
                doc.type_name(v)
            )
        })?;
        let mut b = Block {
            address: offset,
            size: 0,
            requested_size: None,
            state: BlockState::Unknown,
            stack: StackId::MISSING,
            history_start: self.snap.history.len() as u32,
            history_len: 0,
            has_frames_key: false,
        };
        let (mut have_size, mut have_state) = (false, false);
        for (pos, (k, x)) in d.iter().enumerate() {
            match self.block_keys.field(doc, pos, k) {
                0 => b.address = non_negative(doc, x, &|| ctx("address"))?,
                1 => {
                    b.size = non_negative(doc, x, &|| ctx("size"))?;
                    have_size = true;
                }
                2 => b.requested_size = Some(non_negative(doc, x, &|| ctx("requested_size"))?),
                3 => {
                    b.state = self.state(x, &|| ctx("state"))?;
                    have_state = true;
                }
                4 => {
                    b.stack = self.stack(x, &|| ctx("frames"))?;
                    b.has_frames_key = true;
                }
                5 => {
                    let hist = seq(doc, x, &ctx("history"))?;
                    for (h, &e) in hist.iter().enumerate() {
                        let hctx = |f: &str| format!("segments[{i}].blocks[{j}].history[{h}].{f}");
                        let hd = doc
                            .as_dict(e)
                            .ok_or_else(|| format!("{}: expected a dict", hctx("")))?;
                        let addr = match hd.get("addr") {
                            Some(a) => non_negative(doc, a, &|| hctx("addr"))?,
                            None => offset,
                        };
                        let real_size = match hd.get("real_size") {
                            Some(a) => non_negative(doc, a, &|| hctx("real_size"))?,
                            None => return Err(format!("{}: missing", hctx("real_size")).into()),
                        };
                        let stack = match hd.get("frames") {
                            Some(f) => self.stack(f, &|| hctx("frames"))?,
                            None => StackId::MISSING,
                        };
                        self.snap.history.push(HistoryEntry {
                            addr,
                            real_size,
                            stack,
                        });
                    }
                    b.history_len = hist.len() as u32;
                    self.snap.layout.legacy_block_history = true;
                }
                _ => {}
            }
        }
        if !have_size {
            return Err(format!("segments[{i}].blocks[{j}]: no 'size'").into());
        }
        if !have_state {
            return Err(format!("segments[{i}].blocks[{j}]: no 'state'").into());
        }
        Ok(b)
    }

    fn state(&mut self, v: Value, what: &dyn Fn() -> String) -> Parse<BlockState> {
        if let Some(&(_, s)) = self.states.iter().find(|(h, _)| *h == v) {
            return Ok(s);
        }
        let name = self.doc.as_str(v).ok_or_else(|| {
            format!(
                "{}: expected a string, found {}",
                what(),
                self.doc.type_name(v)
            )
        })?;
        let s = match name {
            "active_allocated" => BlockState::ActiveAllocated,
            "active_pending_free" | "active_awaiting_free" => BlockState::ActivePendingFree,
            "inactive" => BlockState::Inactive,
            _ => BlockState::Unknown,
        };
        if self.states.len() < 16 {
            self.states.push((v, s));
        }
        Ok(s)
    }

    // ---- traces ----

    fn trace(&mut self, dev: usize, entries: &'d [Value]) -> Parse<DeviceTrace> {
        self.expansion
            .meet(entries.len(), &|| format!("device_traces[{dev}]"))?;
        let doc = self.doc;
        // When the sink holds exactly this trace's taken events, in order (one device: the
        // common case), the trace is built inside the sink's vector: a million events are
        // never copied into a second one. The entries it did not take wait in `untaken`.
        let mut t = DeviceTrace {
            events: Vec::with_capacity(entries.len()),
            ..DeviceTrace::default()
        };
        let mut shape_keys: &[Value] = &[];
        let mut shape_fields: Vec<u8> = Vec::new();
        for (n, &v) in entries.iter().enumerate() {
            let ctx = |f: &str| format!("device_traces[{dev}][{n}].{f}");
            let d = doc.as_dict(v).ok_or_else(|| {
                format!(
                    "device_traces[{dev}][{n}]: expected a trace entry dict, found {}",
                    doc.type_name(v)
                )
            })?;
            let mut e = TraceEvent::default();
            let mut have_action = false;
            let mut aux = EventAux::default();
            let mut stream = 0;
            let mut other_name = None;
            // the fields of a shaped dict (every event of a real snapshot has one of a few
            // key lists) are looked up once per key list, not once per event
            let fields: &[u8] = match d.shaped() {
                Some((keys, _)) => {
                    if !std::ptr::eq(keys, shape_keys) {
                        shape_keys = keys;
                        shape_fields = (keys.iter().enumerate())
                            .map(|(pos, &k)| self.event_keys.field(doc, pos, k))
                            .collect();
                    }
                    &shape_fields
                }
                None => &[],
            };
            for (pos, (k, x)) in d.iter().enumerate() {
                let f = match fields.get(pos) {
                    Some(&f) => f,
                    None => self.event_keys.field(doc, pos, k),
                };
                match f {
                    0 => {
                        let (a, name) = self.action(x, &|| ctx("action"))?;
                        e.action = a;
                        other_name = name;
                        have_action = true;
                    }
                    1 => e.addr = non_negative(doc, x, &|| ctx("addr"))?,
                    2 => e.size = non_negative(doc, x, &|| ctx("size"))?,
                    3 => stream = doc.as_int(x).unwrap_or(0),
                    4 => {
                        e.time_us = doc
                            .as_int(x)
                            .or_else(|| doc.as_f64(x).map(|f| f as i64))
                            .unwrap_or(NO_TIME)
                    }
                    5 if self.snap.parts == Parts::All => {
                        e.stack = self.stack(x, &|| ctx("frames"))?
                    }
                    6 => aux.device_free = Some(non_negative(doc, x, &|| ctx("device_free"))?),
                    7 => {
                        if let Some(s) = doc.as_str(x) {
                            if !s.is_empty() {
                                aux.user_metadata = Some(s.to_string());
                            }
                        }
                    }
                    8 => {
                        if let Some(s) = doc.as_str(x) {
                            if !s.is_empty() && s != "N/A" {
                                aux.compile_context = Some(s.to_string());
                            }
                        }
                    }
                    _ => {}
                }
            }
            if !have_action {
                return Err(format!("device_traces[{dev}][{n}]: no 'action'").into());
            }
            aux.action_name = other_name;
            t.push(e, stream, aux)
                .map_err(|m| format!("device_traces[{dev}]: {m}"))?;
        }
        Ok(t)
    }

    fn action(&mut self, v: Value, what: &dyn Fn() -> String) -> Parse<(Action, Option<String>)> {
        if let Some(&(_, a)) = self.actions.iter().find(|(h, _)| *h == v) {
            return Ok((a, None));
        }
        let name = self.doc.as_str(v).ok_or_else(|| {
            format!(
                "{}: expected a string, found {}",
                what(),
                self.doc.type_name(v)
            )
        })?;
        let a = Action::from_name(name);
        if a == Action::Other {
            return Ok((a, Some(name.to_string())));
        }
        if self.actions.len() < 32 {
            self.actions.push((v, a));
        }
        Ok((a, None))
    }
}
