//! Bytes by allocation site: live at the end of the snapshot, and live at the peak of the trace.
//!
//! A stack is the frames `_memory_viz` keeps (its `_frame_filter`); a site is the stack's
//! innermost kept Python frame (`*.py`), or its innermost kept frame when it has no Python
//! frame, or `<non-python>` for an empty stack and `<no-context>` for a missing one (the labels
//! `_memory_viz` uses). Bytes are what the program requested (trace sizes, `requested_size`).
//!
//! The live set at the peak is rebuilt by replaying the trace: allocations made in the trace
//! and not yet freed, plus allocations older than the trace that it frees after the peak, plus
//! blocks live at the end that the trace never touched. It is gathered as the events go by
//! ([`LiveAtPeak`]), keeping per stack totals and the live blocks, not the trace.

use rustc_hash::FxHashMap;
use serde::Serialize;

use crate::model::is_agent_file;
use crate::model::snapshot::{Action, EventAux, FrameId, Snapshot, StackId, TraceEvent};
use crate::model::trace::TraceSink;

use super::memviz::FrameFilter;
use super::timeline::{Timeline, TimelineBuilder};

/// Where an allocation was made: its first frame `_memory_viz` shows, or why there is none.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SiteKey {
    /// The site's frame: the innermost kept Python frame, else the innermost kept frame.
    Frame(FrameId),
    /// A stack with no kept frame (`<non-python>`).
    NonPython,
    /// An allocation recorded without a stack (`<no-context>`).
    NoContext,
}

/// Live allocations at one moment, by stack.
#[derive(Debug, Default)]
pub struct LiveSet {
    /// (stack, bytes, count)
    pub by_stack: FxHashMap<StackId, (u64, u64)>,
    /// Requested bytes of all the live allocations.
    pub bytes: u64,
    /// Number of live allocations.
    pub count: u64,
}

impl LiveSet {
    fn add(&mut self, stack: StackId, bytes: u64) {
        self.add_many(stack, bytes, 1);
    }

    /// `count` allocations of `bytes` in all.
    fn add_many(&mut self, stack: StackId, bytes: u64, count: u64) {
        let e = self.by_stack.entry(stack).or_insert((0, 0));
        e.0 += bytes;
        e.1 += count;
        self.bytes += bytes;
        self.count += count;
    }
}

/// Allocations live at the end: `active_allocated` blocks of the device.
pub fn live_at_end(snap: &Snapshot, device: u32) -> LiveSet {
    let mut live = LiveSet::default();
    for s in snap.segments_on(device) {
        for b in s.blocks(&snap.blocks) {
            if b.state.is_allocated() {
                live.add(b.alloc_stack(&snap.history), b.requested(&snap.history));
            }
        }
    }
    live
}

/// Allocations live right after a device's peak-allocated event (the timeline's), gathered
/// one event at a time: the blocks the trace allocated and has not freed, their bytes by stack
/// now and as they stood at the peak so far, and what older blocks the trace freed since.
/// Memory follows the live blocks and the distinct stacks, not the trace.
#[derive(Default)]
pub struct LiveAtPeak {
    /// For the peak, by the timeline's own rule.
    timeline: TimelineBuilder,
    /// Allocations of the trace not freed yet: address → (bytes, stack).
    live: FxHashMap<u64, (u64, StackId)>,
    /// By stack id (ids are dense: the reading's or the snapshot's list of distinct stacks).
    stacks: Vec<StackLive>,
    /// For events without a stack.
    missing: StackLive,
    /// The stacks whose `now` moved since the last peak (their `at_peak` is the last peak's).
    changed: Vec<StackId>,
    /// Allocations older than the trace that it freed after the peak so far (live at it).
    older_freed: LiveSet,
    peak: Option<usize>,
}

/// A stack's live allocations: (bytes, count) now and at the peak so far.
#[derive(Clone, Copy, Default)]
struct StackLive {
    now: (u64, u64),
    at_peak: (u64, u64),
    /// In `LiveAtPeak::changed`.
    changed: bool,
}

impl LiveAtPeak {
    /// Feed the next trace event.
    pub fn push(&mut self, e: &TraceEvent) {
        let index = self.timeline.events();
        self.timeline.push(e, None);
        match e.action {
            Action::Alloc => {
                // (an address allocated twice: the later allocation replaces the earlier)
                if let Some((bytes, stack)) = self.live.insert(e.addr, (e.size, e.stack)) {
                    self.change(stack, bytes, false);
                }
                self.change(e.stack, e.size, true);
            }
            Action::FreeRequested => match self.live.remove(&e.addr) {
                Some((bytes, stack)) => self.change(stack, bytes, false),
                // allocated before the trace began: live at the peak if freed after it
                None => self.older_freed.add(e.stack, e.size),
            },
            _ => {}
        }
        if self.timeline.peak_allocated_index() == Some(index) {
            self.peak = Some(index);
            for stack in std::mem::take(&mut self.changed) {
                let s = self.stack(stack);
                s.at_peak = s.now;
                s.changed = false;
            }
            self.older_freed = LiveSet::default();
        }
    }

    fn stack(&mut self, stack: StackId) -> &mut StackLive {
        if stack.is_missing() {
            return &mut self.missing;
        }
        let i = stack.0 as usize;
        if self.stacks.len() <= i {
            self.stacks.resize(i + 1, StackLive::default());
        }
        &mut self.stacks[i]
    }

    /// An allocation of `bytes` at `stack` became live (`added`) or was freed.
    fn change(&mut self, stack: StackId, bytes: u64, added: bool) {
        let s = self.stack(stack);
        if added {
            s.now.0 += bytes;
            s.now.1 += 1;
        } else {
            // (it was added: the totals do not go below zero)
            s.now.0 -= bytes;
            s.now.1 -= 1;
        }
        if !s.changed {
            s.changed = true;
            self.changed.push(stack);
        }
    }

    /// The device's timeline (without series), and the live set at the peak and the peak's
    /// index (None without events); `stack_ids`: the snapshot's ids of the stacks the events
    /// carried, when those were a reading's own.
    pub fn finish(
        self,
        snap: &Snapshot,
        device: u32,
        stack_ids: Option<&[StackId]>,
    ) -> (Timeline, Option<(usize, LiveSet)>) {
        let timeline = self.timeline.finish(snap, device);
        let Some(peak) = self.peak else {
            return (timeline, None);
        };
        let id = |s: StackId| match stack_ids {
            Some(ids) if !s.is_missing() => ids[s.0 as usize],
            _ => s,
        };
        let mut set = LiveSet::default();
        let stacks = (self.stacks.iter().enumerate())
            .map(|(i, s)| (StackId(i as u32), s))
            .chain([(StackId::MISSING, &self.missing)]);
        for (stack, s) in stacks {
            if s.at_peak.1 > 0 {
                set.add_many(id(stack), s.at_peak.0, s.at_peak.1);
            }
        }
        for (&stack, &(bytes, count)) in &self.older_freed.by_stack {
            set.add_many(id(stack), bytes, count);
        }
        // blocks live at the end that no trace allocation accounts for were live all along
        for s in snap.segments_on(device) {
            for b in s.blocks(&snap.blocks) {
                if b.state.is_allocated() && !self.live.contains_key(&b.address) {
                    set.add(b.alloc_stack(&snap.history), b.requested(&snap.history));
                }
            }
        }
        (timeline, Some((peak, set)))
    }
}

/// A [`LiveAtPeak`] per device, fed as the reader streams the events by (with stacks).
#[derive(Default)]
pub struct LiveAtPeaks {
    devices: Vec<LiveAtPeak>,
    stack_ids: Option<Vec<StackId>>,
}

impl LiveAtPeaks {
    /// Device `device`'s timeline (without series) and live set at its peak (None if its
    /// trace had no events).
    pub fn take(&mut self, snap: &Snapshot, device: u32) -> (Timeline, Option<(usize, LiveSet)>) {
        let d = match self.devices.get_mut(device as usize) {
            Some(d) => std::mem::take(d),
            None => LiveAtPeak::default(),
        };
        d.finish(snap, device, self.stack_ids.as_deref())
    }
}

impl TraceSink for LiveAtPeaks {
    fn event(&mut self, device: u32, e: &TraceEvent, _stream: i64, _aux: Option<&EventAux>) {
        let d = device as usize;
        if self.devices.len() <= d {
            self.devices.resize_with(d + 1, LiveAtPeak::default);
        }
        self.devices[d].push(e);
    }

    fn restart(&mut self) {
        *self = LiveAtPeaks::default();
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
            // Under `memtrack record --snapshot` every allocation is made inside the agent's
            // __torch_dispatch__ (and the op call it makes, torch/_ops.py): the program's own
            // code is the frame below it.
            let program = match kept.iter().position(|&f| is_agent_file(file(f))) {
                Some(i) if i + 1 < kept.len() => &kept[i + 1..],
                _ => &kept[..],
            };
            let py = program.iter().copied().find(|&f| file(f).ends_with(".py"));
            match py.or(program.first().copied()) {
                Some(f) => SiteKey::Frame(f),
                None => SiteKey::NonPython,
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

/// One site's live bytes and allocations on one device.
#[derive(Debug, Serialize)]
pub struct SiteRow {
    /// Device index.
    pub device: u32,
    /// `file:line:function` (file name only), or `<non-python>` / `<no-context>`.
    pub site: String,
    /// The same with the full file path.
    pub location: String,
    /// Requested bytes from this site live at the end of the snapshot.
    pub end_bytes: u64,
    /// Allocations from this site live at the end.
    pub end_count: u64,
    /// Requested bytes from this site live at the allocated peak; None without a trace.
    pub peak_bytes: Option<u64>,
    /// Allocations from this site live at the peak; None without a trace.
    pub peak_count: Option<u64>,
    /// Kept frames (innermost first) of the stack contributing most bytes to this site.
    pub example_stack: Vec<String>,
}

/// The sites holding the most memory on one device, at the end of the trace and at its peak.
#[derive(Debug, Serialize)]
pub struct SiteReport {
    /// Device index.
    pub device: u32,
    /// Requested bytes of every allocation live at the end.
    pub end_bytes: u64,
    /// Allocations live at the end.
    pub end_count: u64,
    /// Index of the trace event after which allocated bytes peaked, when there is a trace.
    pub peak_event_index: Option<usize>,
    /// Requested bytes of every allocation live at the peak; None without a trace.
    pub peak_bytes: Option<u64>,
    /// Allocations live at the peak; None without a trace.
    pub peak_count: Option<u64>,
    /// Distinct sites in all (the rows may be the first N).
    pub sites: usize,
    /// The first `--top` sites, by bytes at the moment chosen (end or peak), largest first.
    pub rows: Vec<SiteRow>,
}

/// When live memory is counted: at the end of the trace or at its peak.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Moment {
    /// At the end of the snapshot (the final state).
    End,
    /// Right after the trace's peak-allocated event.
    Peak,
}

/// The sites of device `device` by bytes live at the end and at the peak (`peak`: the live
/// set at it and its index, None without a trace), the first `top` by `by`.
pub fn site_report(
    snap: &Snapshot,
    device: u32,
    top: usize,
    by: Moment,
    peak: Option<(usize, LiveSet)>,
) -> SiteReport {
    let end = live_at_end(snap, device);
    let mut sites = Sites::new(snap);
    #[derive(Default)]
    struct Acc {
        end: (u64, u64),
        peak: (u64, u64),
        best_stack: Option<(u64, StackId)>,
    }
    let mut acc: FxHashMap<SiteKey, Acc> = FxHashMap::default();
    let note = |a: &mut Acc, stack: StackId, bytes: u64| {
        if a.best_stack
            .is_none_or(|(b, s)| bytes > b || (bytes == b && stack < s))
        {
            a.best_stack = Some((bytes, stack));
        }
    };
    for (&stack, &(bytes, count)) in &end.by_stack {
        let a = acc.entry(sites.site(stack)).or_default();
        a.end.0 += bytes;
        a.end.1 += count;
        note(a, stack, bytes);
    }
    if let Some((_, p)) = &peak {
        for (&stack, &(bytes, count)) in &p.by_stack {
            let a = acc.entry(sites.site(stack)).or_default();
            a.peak.0 += bytes;
            a.peak.1 += count;
            note(a, stack, bytes);
        }
    }
    let has_peak = peak.is_some();
    let by = if has_peak { by } else { Moment::End };
    let mut rows: Vec<(SiteKey, Acc)> = acc.into_iter().collect();
    let n_sites = rows.len();
    let label_of = |k: SiteKey| sites.label(k, true);
    rows.sort_by(|(ka, a), (kb, b)| {
        let (va, vb) = match by {
            Moment::End => ((a.end.0, a.peak.0), (b.end.0, b.peak.0)),
            Moment::Peak => ((a.peak.0, a.end.0), (b.peak.0, b.end.0)),
        };
        vb.cmp(&va).then_with(|| label_of(*ka).cmp(&label_of(*kb)))
    });
    rows.truncate(top);
    let rows = rows
        .into_iter()
        .map(|(k, a)| SiteRow {
            device,
            site: sites.label(k, false),
            location: sites.label(k, true),
            end_bytes: a.end.0,
            end_count: a.end.1,
            peak_bytes: has_peak.then_some(a.peak.0),
            peak_count: has_peak.then_some(a.peak.1),
            example_stack: a
                .best_stack
                .map(|(_, s)| sites.frames(s))
                .unwrap_or_default(),
        })
        .collect();
    SiteReport {
        device,
        end_bytes: end.bytes,
        end_count: end.count,
        peak_event_index: peak.as_ref().map(|(i, _)| *i),
        peak_bytes: peak.as_ref().map(|(_, p)| p.bytes),
        peak_count: peak.as_ref().map(|(_, p)| p.count),
        sites: n_sites,
        rows,
    }
}

/// Folded stacks (`frame;frame;... bytes`, root first) of the allocations `live` (those live
/// at the end when None), for flamegraph.pl, inferno, speedscope. `prefix` goes first on every
/// line (e.g. `cuda:0`).
pub fn folded(snap: &Snapshot, device: u32, live: Option<LiveSet>, prefix: Option<&str>) -> String {
    let live = live.unwrap_or_else(|| live_at_end(snap, device));
    let mut sites = Sites::new(snap);
    let mut lines: FxHashMap<String, u64> = FxHashMap::default();
    for (&stack, &(bytes, _)) in &live.by_stack {
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

    /// The live set at the peak the plain way: replay to the peak, copy the live blocks.
    fn replayed(snap: &Snapshot) -> Option<(usize, LiveSet)> {
        let events = &snap.trace(0)?.events;
        let peak = timeline(snap, 0, false).peak_allocated?.index;
        let mut live: FxHashMap<u64, (u64, StackId)> = FxHashMap::default();
        let mut set = LiveSet::default();
        for (i, e) in events.iter().enumerate() {
            match e.action {
                Action::Alloc => {
                    live.insert(e.addr, (e.size, e.stack));
                }
                Action::FreeRequested if live.remove(&e.addr).is_none() && i > peak => {
                    set.add(e.stack, e.size);
                }
                _ => {}
            }
            if i == peak {
                for &(size, stack) in live.values() {
                    set.add(stack, size);
                }
            }
        }
        Some((peak, set))
    }

    /// Traces that peak early and late, free blocks older than the trace before and after the
    /// peak, and allocate an address twice: gathered as they go by, the live set at the peak
    /// is the replayed one.
    #[test]
    fn live_at_the_peak_as_the_events_go_by_is_the_replayed_one() {
        let mut seed = 7u64;
        let mut next = |n: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        for _ in 0..300 {
            let len = 1 + next(120) as usize;
            let events: Vec<TraceEvent> = (0..len)
                .map(|_| TraceEvent {
                    action: [Action::Alloc, Action::FreeRequested, Action::FreeCompleted]
                        [next(3) as usize],
                    addr: next(12),
                    size: 1 + next(1000),
                    stack: StackId(next(5) as u32),
                    ..TraceEvent::default()
                })
                .collect();
            let mut snap = Snapshot::default();
            snap.traces.push(DeviceTrace {
                events,
                streams: vec![0],
                ..DeviceTrace::default()
            });
            let mut gathered = LiveAtPeak::default();
            snap.traces[0].events.iter().for_each(|e| gathered.push(e));
            let (peak, set) = gathered.finish(&snap, 0, None).1.unwrap();
            let (want_peak, want) = replayed(&snap).unwrap();
            assert_eq!(peak, want_peak);
            assert_eq!(set.by_stack, want.by_stack);
            assert_eq!((set.bytes, set.count), (want.bytes, want.count));
        }
    }
}
