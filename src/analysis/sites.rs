//! Bytes by allocation site: live at the end of the snapshot, and live at the peak of the trace.
//!
//! A stack is the frames `_memory_viz` keeps (its `_frame_filter`); a site is the stack's
//! innermost kept Python frame (`*.py`); a stack with no Python frame is named by its autograd
//! node (`<backward MmBackward0>`) or ATen op (`<aten::mm>`), else its innermost frame; an empty
//! stack is `<non-python>` and a missing one `<no-context>` (the labels `_memory_viz` uses). Bytes are what the program requested (trace sizes, `requested_size`).
//!
//! The live set at the peak is rebuilt by replaying the trace: allocations made in the trace
//! and not yet freed, plus allocations older than the trace that it frees after the peak, plus
//! blocks live at the end that the trace never touched. It is gathered as the events go by
//! ([`LiveAt`]), keeping the live blocks and per origin totals, not the trace. The same
//! gathering finds any other moment of the trace (an event, a time, an OOM).

use std::collections::VecDeque;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::model::snapshot::{Action, EventAux, FrameId, Snapshot, StackId, TraceEvent};
use crate::model::trace::{TraceEvents, TraceSink};

use super::address_map::AddressMap;
use super::categories::{judge_block, Judgement, PhaseTable, PhaseWalk, Place};
use super::memviz::FrameFilter;
use super::timeline::{Timeline, TimelineBuilder};

/// Where an allocation was made: its first frame `_memory_viz` shows, or why there is none.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SiteKey {
    /// The site's frame: the innermost kept Python frame.
    Frame(FrameId),
    /// A stack with no Python frame (the autograd engine's threads, C++ callers): the frame
    /// that says what allocated, named as [`native_label`] names it.
    Native(FrameId),
    /// A stack with no kept frame (`<non-python>`).
    NonPython,
    /// An allocation recorded without a stack (`<no-context>`).
    NoContext,
}

/// What an allocation is counted under: the stack that allocated it, what else the grouping
/// keeps of it (`extra`: see [`Extra`]), and when the grouping asks for categories, how it was
/// judged (where it was made, and freed after the moment or still live at the end).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Origin {
    /// The allocating stack.
    pub stack: StackId,
    /// `Extra`'s id of what the allocation carried (0: nothing).
    pub extra: u32,
    /// Its judgement, when categories are asked for.
    pub judged: Option<Judgement>,
}

impl Origin {
    /// Only a stack.
    pub fn of(stack: StackId) -> Origin {
        Origin {
            stack,
            extra: 0,
            judged: None,
        }
    }
}

/// Live allocations at one moment, by origin.
#[derive(Debug, Default)]
pub struct LiveSet {
    /// (bytes, count) by origin
    pub by_origin: FxHashMap<Origin, (u64, u64)>,
    /// Requested bytes of all the live allocations.
    pub bytes: u64,
    /// Number of live allocations.
    pub count: u64,
}

impl LiveSet {
    fn add(&mut self, origin: Origin, bytes: u64) {
        self.add_many(origin, bytes, 1);
    }

    /// `count` allocations of `bytes` in all.
    fn add_many(&mut self, origin: Origin, bytes: u64, count: u64) {
        let e = self.by_origin.entry(origin).or_insert((0, 0));
        e.0 += bytes;
        e.1 += count;
        self.bytes += bytes;
        self.count += count;
    }

    /// (bytes, count) by allocating stack alone.
    pub fn by_stack(&self) -> FxHashMap<StackId, (u64, u64)> {
        let mut out: FxHashMap<StackId, (u64, u64)> = FxHashMap::default();
        for (o, &(b, c)) in &self.by_origin {
            let e = out.entry(o.stack).or_default();
            e.0 += b;
            e.1 += c;
        }
        out
    }
}

/// Allocations live at the end: `active_allocated` blocks of the device.
pub fn live_at_end(snap: &Snapshot, device: u32) -> LiveSet {
    let mut live = LiveSet::default();
    for s in snap.segments_on(device) {
        for b in s.blocks(&snap.blocks) {
            if b.state.is_allocated() {
                live.add(
                    Origin::of(b.alloc_stack(&snap.history)),
                    b.requested(&snap.history),
                );
            }
        }
    }
    live
}

/// Which trace event the moment follows, decided as the events go by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Capture {
    /// The snapshot's end only: no event is the moment.
    End,
    /// The peak-allocated event (it moves while allocated bytes climb).
    #[default]
    Peak,
    /// The n-th `oom` event (from 1).
    Oom(usize),
    /// Event `index`.
    Event(usize),
    /// The last event at or before this many microseconds after the first timed event.
    SinceFirst(i64),
    /// The last event at or before this `time_us`.
    AtTime(i64),
    /// The trace's last event.
    Last,
}

/// What of an allocation, besides its stack, a grouping needs.
#[derive(Clone, Debug, Default)]
pub enum Extra {
    /// Nothing.
    #[default]
    Nothing,
    /// Its `user_metadata` (at allocation, or from a later `annotate` event).
    Metadata,
    /// Its `compile_context`.
    Compile,
    /// The annotation ranges open when it was allocated: the start times of the spans between
    /// boundaries, ascending (span `i` is id `i + 1`; before the first, 0).
    Annotations(Vec<i64>),
}

/// What to gather: when, and what of each allocation.
#[derive(Clone, Debug, Default)]
pub struct LiveConfig {
    /// When the moment is.
    pub capture: Capture,
    /// What to keep besides the stack.
    pub extra: Extra,
    /// Judge each allocation (its category) with these stacks read: the events must carry
    /// the snapshot's stack ids (a replay, not a streamed reading's own numbering).
    pub phases: Option<Arc<PhaseTable>>,
}

/// Events [`LiveAt`] holds before taking them, while their live-map slots are fetched.
const LOOKAHEAD: usize = 16;

/// A trace allocation not freed yet.
#[derive(Clone, Copy)]
struct LiveAlloc {
    bytes: u64,
    stack: StackId,
    extra: u32,
    /// The event that made it.
    index: u32,
    /// Where it was made (when allocations are judged).
    made: Place,
}

impl Default for LiveAlloc {
    fn default() -> Self {
        LiveAlloc {
            bytes: 0,
            stack: StackId::MISSING,
            extra: 0,
            index: 0,
            made: Place::UNKNOWN,
        }
    }
}

/// Allocations live right after one event of a device's trace (the moment: the timeline's
/// peak-allocated event, an index, a time, an OOM), gathered one event at a time. The moment
/// may move (the peak does): what is live at it is the trace's allocations made by then and
/// not yet freed (kept as the live blocks, each with the event that made it), plus what was
/// freed since of what was live at it (by origin, reset whenever the moment moves), plus
/// blocks older than the trace that stay live to the end. Memory follows the live blocks and
/// the distinct origins, not the trace.
#[derive(Default)]
pub struct LiveAt {
    config: LiveConfig,
    /// For the peak, by the timeline's own rule.
    timeline: TimelineBuilder,
    /// Allocations of the trace not freed yet, by address.
    live: AddressMap<LiveAlloc>,
    /// Events given and not yet taken: the live map's slot of each is being fetched meanwhile
    /// (with a large live set every lookup is a cache miss).
    pending: VecDeque<(TraceEvent, Option<EventAux>)>,
    /// Live at the moment and freed since, by origin (older allocations by the freeing stack).
    freed: FxHashMap<Origin, (u64, u64)>,
    moment: Option<usize>,
    /// The last `time_us` at the moment's event.
    moment_time: Option<i64>,
    last_time: Option<i64>,
    finder: MomentFinder,
    tagger: Tagger,
    /// Where the events ran (when allocations are judged).
    walk: PhaseWalk,
}

/// Says, event by event, whether this event is (so far) the moment of a [`Capture`]: the
/// last event it says so of is the moment.
#[derive(Clone, Debug, Default)]
pub struct MomentFinder {
    capture: Capture,
    ooms: usize,
    first_time: Option<i64>,
    /// A time moment is behind us.
    past: bool,
    found: bool,
}

impl MomentFinder {
    /// Finding `capture`.
    pub fn new(capture: Capture) -> MomentFinder {
        MomentFinder {
            capture,
            ..MomentFinder::default()
        }
    }

    /// Whether event `index` (`e`) is the moment so far; `peak`: the timeline's
    /// peak-allocated index after it.
    pub fn at(&mut self, index: usize, e: &TraceEvent, peak: Option<usize>) -> bool {
        if e.action == Action::Oom {
            self.ooms += 1;
        }
        let at = match self.capture {
            Capture::End => false,
            Capture::Last => true,
            Capture::Peak => peak == Some(index),
            Capture::Oom(n) => e.action == Action::Oom && self.ooms == n,
            Capture::Event(i) => i == index,
            Capture::SinceFirst(us) => {
                if let Some(t) = e.time() {
                    let first = *self.first_time.get_or_insert(t);
                    self.past |= t - first > us;
                }
                !self.past
            }
            Capture::AtTime(t) => {
                self.past |= e.time().is_some_and(|et| et > t);
                // (events before the first timed one are not known to be before t)
                !self.past && (e.time().is_some() || self.found)
            }
        };
        self.found |= at;
        at
    }

    /// `oom` events so far.
    pub fn ooms(&self) -> usize {
        self.ooms
    }
}

/// What of an allocation, besides its stack, a grouping keeps: an id per distinct string
/// (`user_metadata`, `compile_context`) or the annotation span it was made in.
#[derive(Clone, Debug, Default)]
pub struct Tagger {
    extra: Extra,
    /// Id `i + 1` is `strings[i]`.
    strings: Vec<String>,
    string_ids: FxHashMap<String, u32>,
}

impl Tagger {
    /// Keeping `extra`.
    pub fn new(extra: Extra) -> Tagger {
        Tagger {
            extra,
            ..Tagger::default()
        }
    }

    fn intern(&mut self, s: Option<&str>) -> u32 {
        let Some(s) = s else { return 0 };
        if let Some(&id) = self.string_ids.get(s) {
            return id;
        }
        self.strings.push(s.to_string());
        let id = self.strings.len() as u32;
        self.string_ids.insert(s.to_string(), id);
        id
    }

    /// The id of what allocation event `e` carries (0: nothing).
    pub fn tag(&mut self, e: &TraceEvent, aux: Option<&EventAux>) -> u32 {
        match &self.extra {
            Extra::Nothing => 0,
            Extra::Metadata => self.intern(aux.and_then(|a| a.user_metadata.as_deref())),
            Extra::Compile => self.intern(aux.and_then(|a| a.compile_context.as_deref())),
            Extra::Annotations(starts) => match e.time() {
                Some(t) => starts.partition_point(|&s| s <= t) as u32,
                None => 0,
            },
        }
    }

    /// The id an `annotate` event gives its allocation, when metadata is kept.
    pub fn retag(&mut self, aux: Option<&EventAux>) -> Option<u32> {
        matches!(self.extra, Extra::Metadata)
            .then(|| self.intern(aux.and_then(|a| a.user_metadata.as_deref())))
    }

    /// The strings, id `i + 1` at `i`.
    pub fn into_strings(self) -> Vec<String> {
        self.strings
    }
}

impl LiveAt {
    /// Gathering by `config`.
    pub fn new(config: LiveConfig) -> LiveAt {
        LiveAt {
            finder: MomentFinder::new(config.capture),
            tagger: Tagger::new(config.extra.clone()),
            config,
            ..LiveAt::default()
        }
    }

    /// Feed the next trace event.
    pub fn push(&mut self, e: &TraceEvent, aux: Option<&EventAux>) {
        self.live.prefetch(e.addr);
        self.pending.push_back((*e, aux.cloned()));
        if self.pending.len() > LOOKAHEAD {
            let (e, aux) = self.pending.pop_front().expect("not empty");
            self.take(&e, aux.as_ref());
        }
    }

    /// Take the events still pending.
    fn drain(&mut self) {
        while let Some((e, aux)) = self.pending.pop_front() {
            self.take(&e, aux.as_ref());
        }
    }

    /// Take the next trace event.
    fn take(&mut self, e: &TraceEvent, aux: Option<&EventAux>) {
        let index = self.timeline.events();
        self.timeline.push(e, aux);
        if let Some(t) = e.time() {
            self.last_time = Some(t);
        }
        match e.action {
            Action::Alloc => {
                let extra = self.tagger.tag(e, aux);
                let a = LiveAlloc {
                    bytes: e.size,
                    stack: e.stack,
                    extra,
                    index: index as u32,
                    made: self.place(e.stack),
                };
                // (an address allocated twice: the later allocation replaces the earlier)
                if let Some(old) = self.live.insert(e.addr, a) {
                    self.freed_now(old, None);
                }
            }
            Action::FreeRequested => {
                let freed = self.place(e.stack);
                let judge = |made: Place| Judgement::new(made, Some(freed));
                match self.live.remove(e.addr) {
                    Some(a) => {
                        let judged = self.config.phases.as_ref().map(|_| judge(a.made));
                        self.freed_now(a, judged)
                    }
                    // allocated before the trace began: live at the moment if freed after it
                    None => {
                        let o = Origin {
                            stack: e.stack,
                            extra: 0,
                            judged: (self.config.phases.as_ref())
                                .map(|_| judge(Place::BEFORE_TRACE)),
                        };
                        let f = self.freed.entry(o).or_default();
                        f.0 += e.size;
                        f.1 += 1;
                    }
                }
            }
            Action::Annotate => {
                if let Some(id) = self.tagger.retag(aux) {
                    if let Some(a) = self.live.get_mut(e.addr) {
                        a.extra = id;
                    }
                }
            }
            _ => {}
        }
        let at = (self.finder).at(index, e, self.timeline.peak_allocated_index());
        if at {
            self.moment = Some(index);
            self.moment_time = self.last_time;
            if !self.freed.is_empty() {
                self.freed.clear();
            }
        }
    }

    /// Where an allocating or freeing event at `stack` ran, when allocations are judged.
    fn place(&mut self, stack: StackId) -> Place {
        match &self.config.phases {
            Some(table) => self.walk.event(table, stack),
            None => Place::UNKNOWN,
        }
    }

    /// An allocation stopped being live (freed, or its address allocated again).
    fn freed_now(&mut self, a: LiveAlloc, judged: Option<Judgement>) {
        if self.moment.is_some_and(|m| a.index as usize <= m) {
            let o = Origin {
                stack: a.stack,
                extra: a.extra,
                judged,
            };
            let f = self.freed.entry(o).or_default();
            f.0 += a.bytes;
            f.1 += 1;
        }
    }

    /// The device's timeline (without series), the live set at the moment and its index (None
    /// when no event was the moment), and the live set at the end (the final segments' blocks,
    /// each with what the trace's allocation of it carried); `stack_ids`: the snapshot's ids of
    /// the stacks the events carried, when those were a reading's own.
    pub fn finish(
        mut self,
        snap: &Snapshot,
        device: u32,
        stack_ids: Option<&[StackId]>,
    ) -> LiveAtMoment {
        self.drain();
        let timeline = self.timeline.finish(snap, device);
        let id = |s: StackId| match stack_ids {
            Some(ids) if !s.is_missing() => ids[s.0 as usize],
            _ => s,
        };
        let renumber = |o: Origin| Origin {
            stack: id(o.stack),
            ..o
        };
        let phases = self.config.phases.clone();
        // what a block live at the end and never freed is: as the trace made it, or (made
        // before the trace) as its own stack says
        let live_judged = |a: Option<&LiveAlloc>, stack: StackId| {
            (phases.as_deref()).map(|t| match a {
                Some(a) => Judgement::new(a.made, None),
                None => judge_block(t, stack),
            })
        };
        let mut end = LiveSet::default();
        for s in snap.segments_on(device) {
            for b in s.blocks(&snap.blocks) {
                if b.state.is_allocated() {
                    let a = self.live.get(b.address);
                    let stack = b.alloc_stack(&snap.history);
                    let o = Origin {
                        stack,
                        extra: a.map_or(0, |a| a.extra),
                        judged: live_judged(a, stack),
                    };
                    end.add(o, b.requested(&snap.history));
                }
            }
        }
        let at = self.moment.map(|m| {
            let mut set = LiveSet::default();
            for (&o, &(bytes, count)) in &self.freed {
                set.add_many(renumber(o), bytes, count);
            }
            for a in self.live.values() {
                if a.index as usize <= m {
                    let o = Origin {
                        stack: a.stack,
                        extra: a.extra,
                        judged: live_judged(Some(a), a.stack),
                    };
                    set.add(renumber(o), a.bytes);
                }
            }
            // blocks live at the end that no trace allocation accounts for were live all along
            for s in snap.segments_on(device) {
                for b in s.blocks(&snap.blocks) {
                    if b.state.is_allocated() && !self.live.contains_key(b.address) {
                        let stack = b.alloc_stack(&snap.history);
                        let o = Origin {
                            judged: live_judged(None, stack),
                            ..Origin::of(stack)
                        };
                        set.add(o, b.requested(&snap.history));
                    }
                }
            }
            (m, set)
        });
        let t0 = timeline.t0_us;
        LiveAtMoment {
            at_time_s: (self.moment_time.zip(t0)).map(|(t, t0)| (t - t0) as f64 / 1e6),
            timeline,
            at,
            end,
            ooms: self.finder.ooms(),
            strings: self.tagger.into_strings(),
        }
    }
}

/// Device `device`'s events of `events` gathered by `config`: events put aside, replayed once
/// what the file holds after its trace (the annotations) is known.
pub fn gather(
    events: &mut dyn TraceEvents,
    snap: &Snapshot,
    device: u32,
    config: LiveConfig,
) -> std::io::Result<LiveAtMoment> {
    let mut g = LiveAt::new(config);
    events.visit(device, &mut |_, e, _, aux| {
        g.push(e, aux);
        Ok(())
    })?;
    Ok(g.finish(snap, device, None))
}

/// What [`LiveAt`] gathered on one device.
pub struct LiveAtMoment {
    /// The device's timeline (without series).
    pub timeline: Timeline,
    /// The moment's event index and what was live right after it; None when no event was.
    pub at: Option<(usize, LiveSet)>,
    /// Seconds from the first timed event to the moment's event (its time, or the last before).
    pub at_time_s: Option<f64>,
    /// What was live at the end (the final segments).
    pub end: LiveSet,
    /// `oom` events in the trace.
    pub ooms: usize,
    /// The `Extra` strings (`user_metadata`, `compile_context`): id `i + 1` is `strings[i]`.
    pub strings: Vec<String>,
}

/// A [`LiveAt`] per device, fed as the reader streams the events by (with stacks), or from
/// events put aside.
#[derive(Default)]
pub struct LiveAtMoments {
    config: LiveConfig,
    /// The config of single devices (annotation spans differ by device).
    per_device: FxHashMap<u32, LiveConfig>,
    devices: Vec<LiveAt>,
    stack_ids: Option<Vec<StackId>>,
}

impl LiveAtMoments {
    /// Gathering by `config` on every device.
    pub fn new(config: LiveConfig) -> LiveAtMoments {
        LiveAtMoments {
            config,
            ..LiveAtMoments::default()
        }
    }

    /// Device `device` gathers by `config` instead (before its first event).
    pub fn set_device_config(&mut self, device: u32, config: LiveConfig) {
        self.per_device.insert(device, config);
    }

    fn device(&mut self, d: u32) -> &mut LiveAt {
        let i = d as usize;
        while self.devices.len() <= i {
            let n = self.devices.len() as u32;
            let c = (self.per_device.get(&n).cloned()).unwrap_or_else(|| self.config.clone());
            self.devices.push(LiveAt::new(c));
        }
        &mut self.devices[i]
    }

    /// What device `device` gathered (an empty trace's when it had no events).
    pub fn take(&mut self, snap: &Snapshot, device: u32) -> LiveAtMoment {
        let d = std::mem::take(self.device(device));
        d.finish(snap, device, self.stack_ids.as_deref())
    }
}

impl TraceSink for LiveAtMoments {
    fn event(&mut self, device: u32, e: &TraceEvent, _stream: i64, aux: Option<&EventAux>) {
        self.device(device).push(e, aux);
    }

    fn restart(&mut self) {
        self.devices.clear();
        self.stack_ids = None;
    }

    fn renumber_stacks(&mut self, ids: &[StackId]) {
        self.stack_ids = Some(ids.to_vec());
    }
}

/// Resolves stacks to sites and kept frames, once per distinct stack.
pub struct Sites<'s> {
    /// The snapshot whose stacks, frames and strings are resolved.
    pub snap: &'s Snapshot,
    filter: FrameFilter<'s>,
    site_of: FxHashMap<StackId, SiteKey>,
}

impl<'s> Sites<'s> {
    /// Sites of `snap`'s stacks.
    pub fn new(snap: &'s Snapshot) -> Sites<'s> {
        Sites {
            snap,
            filter: FrameFilter::new(snap),
            site_of: FxHashMap::default(),
        }
    }

    /// The site of `stack` (remembered per stack).
    pub fn site(&mut self, stack: StackId) -> SiteKey {
        if let Some(&k) = self.site_of.get(&stack) {
            return k;
        }
        let k = if stack.is_missing() {
            SiteKey::NoContext
        } else {
            let kept = self.filter.kept(stack);
            let file = |f: FrameId| self.snap.stacks.str(self.snap.stacks.frame(f).filename);
            let py = kept.iter().copied().find(|&f| file(f).ends_with(".py"));
            let name = |f: FrameId| self.snap.stacks.str(self.snap.stacks.frame(f).name);
            match py {
                Some(f) => SiteKey::Frame(f),
                None => native_site(&kept, name),
            }
        };
        self.site_of.insert(stack, k);
        k
    }

    /// `file:line:function` of a site (the file's name only unless `full_filename`), or
    /// `<non-python>` / `<no-context>`.
    pub fn label(&self, k: SiteKey, full_filename: bool) -> String {
        match k {
            SiteKey::Frame(f) => self.snap.frame_label(f, full_filename),
            SiteKey::Native(f) => {
                native_label(self.snap.stacks.str(self.snap.stacks.frame(f).name))
            }
            SiteKey::NonPython => "<non-python>".into(),
            SiteKey::NoContext => "<no-context>".into(),
        }
    }

    /// The folded-stack line body (root first, `;`-separated), as `_memory_viz` writes them.
    pub fn folded(&mut self, stack: StackId) -> String {
        if stack.is_missing() {
            return "<no-context>".into();
        }
        let kept = self.filter.kept(stack);
        if kept.is_empty() {
            return "<non-python>".into();
        }
        kept.iter()
            .rev()
            .map(|&f| self.snap.frame_label(f, false).replace(';', ":"))
            .collect::<Vec<_>>()
            .join(";")
    }

    /// Kept frames of a stack, innermost first, formatted with full file names.
    pub fn frames(&mut self, stack: StackId) -> Vec<String> {
        self.filter
            .kept(stack)
            .iter()
            .map(|&f| self.snap.frame_label(f, true))
            .collect()
    }
}

/// The site of a stack with no Python frame (`frames` innermost first). Its innermost frame
/// is plumbing (`??:0:PyMethod_New`, a dispatcher wrapper) that names nothing a user wrote;
/// what does is the autograd node that ran (`MmBackward0::apply`: a backward allocation in the
/// engine's thread), else the ATen op that was called (`at::_ops::mm::call`), else the
/// innermost frame.
fn native_site<'n>(frames: &[FrameId], name: impl Fn(FrameId) -> &'n str) -> SiteKey {
    let node = frames
        .iter()
        .copied()
        .find(|&f| autograd_node(name(f)).is_some());
    let op = || frames.iter().copied().find(|&f| aten_op(name(f)).is_some());
    match node.or_else(op).or(frames.first().copied()) {
        Some(f) => SiteKey::Native(f),
        None => SiteKey::NonPython,
    }
}

/// `MmBackward0` of `torch::autograd::generated::MmBackward0::apply(...)`.
fn autograd_node(name: &str) -> Option<&str> {
    let rest = name.split_once("torch::autograd::generated::")?.1;
    let (node, after) = rest.split_once("::")?;
    after.starts_with("apply(").then_some(node)
}

/// `mm` of `at::_ops::mm::call(...)`.
fn aten_op(name: &str) -> Option<&str> {
    let rest = name.strip_prefix("at::_ops::")?;
    let (op, after) = rest.split_once("::")?;
    after.starts_with("call(").then_some(op)
}

/// How a native site reads: `<backward MmBackward0>`, `<aten::mm>`, or the function's name
/// without its argument list.
pub fn native_label(name: &str) -> String {
    if let Some(node) = autograd_node(name) {
        return format!("<backward {node}>");
    }
    if let Some(op) = aten_op(name) {
        return format!("<aten::{op}>");
    }
    let bare = name.split_once('(').map_or(name, |(head, _)| head);
    format!("<{bare}>")
}

/// Folded stacks (`frame;frame;... bytes`, root first) of the allocations `live` (those live
/// at the end when None), for flamegraph.pl, inferno, speedscope. `prefix` goes first on every
/// line (e.g. `cuda:0`).
pub fn folded(snap: &Snapshot, device: u32, live: Option<LiveSet>, prefix: Option<&str>) -> String {
    let live = live.unwrap_or_else(|| live_at_end(snap, device));
    let mut sites = Sites::new(snap);
    let mut lines: FxHashMap<String, u64> = FxHashMap::default();
    for (stack, (bytes, _)) in live.by_stack() {
        if bytes == 0 {
            continue;
        }
        let mut line = String::new();
        if let Some(p) = prefix {
            line.push_str(p);
            line.push(';');
        }
        line.push_str(&sites.folded(stack));
        *lines.entry(line).or_default() += bytes;
    }
    let mut lines: Vec<(String, u64)> = lines.into_iter().collect();
    lines.sort();
    let mut out = String::new();
    for (l, b) in lines {
        out.push_str(&l);
        out.push(' ');
        out.push_str(&b.to_string());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::timeline::timeline;
    use crate::model::snapshot::DeviceTrace;

    #[test]
    fn native_sites_read_as_the_autograd_node_or_aten_op() {
        let node = "torch::autograd::generated::MmBackward0::apply(std::vector<at::Tensor, \
                    std::allocator<at::Tensor> >&&)";
        assert_eq!(native_label(node), "<backward MmBackward0>");
        assert_eq!(
            native_label("at::_ops::mm::call(at::Tensor const&, at::Tensor const&)"),
            "<aten::mm>"
        );
        // a helper of the node (`MmBackward0_apply_functional`) is not the node
        assert_eq!(
            native_label("torch::autograd::generated::MmBackward0_apply_functional(int)"),
            "<torch::autograd::generated::MmBackward0_apply_functional>"
        );
        assert_eq!(native_label("PyMethod_New"), "<PyMethod_New>");
    }

    /// The live set after event `at` the plain way: replay to it, copy the live blocks, and
    /// count older blocks freed after it (by the freeing stack).
    fn replayed(snap: &Snapshot, at: usize) -> LiveSet {
        let events = &snap.trace(0).unwrap().events;
        let mut live: FxHashMap<u64, (u64, StackId)> = FxHashMap::default();
        let mut set = LiveSet::default();
        for (i, e) in events.iter().enumerate() {
            match e.action {
                Action::Alloc => {
                    live.insert(e.addr, (e.size, e.stack));
                }
                Action::FreeRequested if live.remove(&e.addr).is_none() && i > at => {
                    set.add(Origin::of(e.stack), e.size);
                }
                _ => {}
            }
            if i == at {
                for &(size, stack) in live.values() {
                    set.add(Origin::of(stack), size);
                }
            }
        }
        set
    }

    /// Traces that peak early and late, free blocks older than the trace before and after the
    /// moment, and allocate an address twice: gathered as they go by, the live set at the
    /// peak, at an event, at a time and at an OOM is the replayed one.
    #[test]
    fn live_at_a_moment_as_the_events_go_by_is_the_replayed_one() {
        let mut seed = 7u64;
        let mut next = |n: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        for _ in 0..300 {
            let len = 1 + next(120) as usize;
            let mut t = 1000;
            let events: Vec<TraceEvent> = (0..len)
                .map(|_| {
                    t += next(3) as i64; // times repeat
                    TraceEvent {
                        action: [
                            Action::Alloc,
                            Action::FreeRequested,
                            Action::FreeCompleted,
                            Action::Oom,
                        ][next(4) as usize],
                        addr: next(12),
                        size: 1 + next(1000),
                        stack: StackId(next(5) as u32),
                        time_us: t,
                        ..TraceEvent::default()
                    }
                })
                .collect();
            let mut snap = Snapshot::default();
            snap.traces.push(DeviceTrace {
                events: events.clone(),
                streams: vec![0],
                ..DeviceTrace::default()
            });
            let peak = timeline(&snap, 0, false).peak_allocated.unwrap().index;
            let pick = next(len as u64) as usize;
            let since = next(2 * len as u64) as i64;
            let last_by = |limit: i64| events.iter().rposition(|e| e.time_us <= limit);
            let ooms: Vec<usize> = (0..len)
                .filter(|&i| events[i].action == Action::Oom)
                .collect();
            let cases = [
                (Capture::Peak, Some(peak)),
                (Capture::Event(pick), Some(pick)),
                (Capture::Event(len), None),
                (
                    Capture::SinceFirst(since),
                    last_by(events[0].time_us + since),
                ),
                (Capture::AtTime(1000 + since), last_by(1000 + since)),
                (Capture::Oom(2), ooms.get(1).copied()),
            ];
            for (capture, want_at) in cases {
                let mut gathered = LiveAt::new(LiveConfig {
                    capture,
                    ..LiveConfig::default()
                });
                events.iter().for_each(|e| gathered.push(e, None));
                let got = gathered.finish(&snap, 0, None).at;
                assert_eq!(got.as_ref().map(|g| g.0), want_at, "{capture:?}");
                if let (Some((at, set)), Some(_)) = (got, want_at) {
                    let want = replayed(&snap, at);
                    assert_eq!(set.by_origin, want.by_origin, "{capture:?}");
                    assert_eq!((set.bytes, set.count), (want.bytes, want.count));
                }
            }
        }
    }
}
