//! The second core's share of a trace: a reading of the tail started after a batch and taken
//! over where it started, its events adopted in order, its stacks mapped to the main reading's.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{Scope, ScopedJoinHandle};
use std::time::{Duration, Instant};

use crate::model::snapshot::{
    DeviceTrace, EventAux, Parts, StackId, TraceEvent, MAX_STREAMS, NO_TIME,
};
use crate::pickle::{Diverted, Value, RECENT_HANDLES};

use super::super::early::Early;
use super::super::rounds::{self, known_between, RoundRead, LAST_ROUND_BYTES, SCAN_BYTES};
use super::super::tail::{self, Entry, Known, Tail, CHUNK as TAIL_CHUNK, FROM_CHECK};

use super::super::fields::{set_action, set_text_field, F_ACTION};
use super::{debug, Result, TraceReader, EVENT_HANDLE, NO_STACK_HANDLE, UNREAD_HANDLE};

use super::walk::{list, Walk};

impl<'f> TraceReader<'f> {
    /// `device_traces`: a list per device, each a list of events, the second core's reading
    /// started and taken over as the rounds go.
    pub(super) fn read_device_traces(&mut self, r: &mut Diverted<'_, '_, '_>) -> Result<()> {
        self.read = true;
        let early = self.early.take();
        let (cancel, done) = match &early {
            Some(e) => (e.cancel.clone(), e.done.clone()),
            None => (Arc::default(), Arc::default()),
        };
        let here = r.position();
        let read = std::thread::scope(|scope| {
            let mut tail = TailState::new(&cancel, &done);
            if let Some(early) = early {
                tail.adopt_early(early, here);
            }
            let mut devices = 0usize;
            let read = list(r, b']', &mut |r, at| {
                if let Walk::BatchRead { .. } = at {
                    return Ok(());
                }
                if r.peek() != Some(b']') {
                    return Err(r.error("device_traces: expected a list per device"));
                }
                let mut t = DeviceTrace::default();
                if devices == 0 {
                    let _ = t.events.try_reserve(self.room); // only an optimization
                }
                self.out.traces.push(t);
                self.out.lengths.push(0);
                self.events(r, devices, &mut tail, scope)?;
                devices += 1;
                Ok(())
            });
            cancel.store(true, Ordering::Relaxed); // a tail still reading stops
            read
        });
        read
    }
}

enum Held {
    /// One of that reading's own.
    Tail(Entry),
    /// The main reading's.
    Main(Value),
}

/// The second core's reading, from the main reading's side.
struct TailState<'s> {
    cancel: &'s AtomicBool,
    done: &'s AtomicUsize,
    /// Where it started (`usize::MAX`: none is reading).
    at: usize,
    /// One was started and is not over: the next round starts as a round is taken over, or
    /// at the end of the batch after a reading it gave up or that did not hold (none after
    /// one that was not where an event starts, whose thread may still be reading).
    started: bool,
    /// Where the main reading went on after the last round it took over (0: none yet).
    resumed_at: usize,
    /// What the second core was told, for the main reading's own share of the round (taken
    /// at its first event).
    own_known: Option<Known>,
    /// `own_known` came from the skim of an early round: it names strings the trace's first
    /// events memoize, so the share is taken after the main reading has read an event, told
    /// only the strings its memo then holds.
    own_early: bool,
    /// It gives back what it was told, with its reading and how long that took.
    handle: Option<Pending<'s>>,
    /// How fast the main reading read its own share and the second core its part in the
    /// last round (bytes a second), which split the next round so that neither waits long.
    speeds: Option<(f64, f64)>,
    /// When and where the main reading's share of this round began.
    round_began: (Instant, usize),
    /// The time the main reading spent in this round adopting the last round's reading (not
    /// reading), and that time an event the last time it was measured.
    adopting: Duration,
    adopt_per_event: f64,
}

impl<'s> TailState<'s> {
    fn new(cancel: &'s AtomicBool, done: &'s AtomicUsize) -> Self {
        TailState {
            cancel,
            done,
            at: usize::MAX,
            started: false,
            resumed_at: 0,
            own_known: None,
            own_early: false,
            handle: None,
            speeds: None,
            round_began: (Instant::now(), 0),
            adopting: Duration::ZERO,
            // (measured at each take-over; 50–150 ns on gen_data's captures)
            adopt_per_event: 70e-9,
        }
    }

    /// The share of a `round` of bytes the main reading takes, when it first adopts the
    /// `to_adopt` events of the round before.
    fn main_share(&self, round: usize, to_adopt: usize) -> f64 {
        let adopting = to_adopt as f64 * self.adopt_per_event;
        rounds::main_share(round, self.speeds, adopting)
    }

    /// Take the early round over as this round (if the skim started one): the main reading
    /// reads its share from `here`, where the trace starts.
    fn adopt_early(&mut self, early: Early, here: usize) {
        if let Ok(Some(start)) = early.start.recv() {
            self.at = start.at;
            self.started = true;
            self.own_known = Some(start.known);
            self.own_early = true;
            self.handle = Some(Pending::Early(early.result));
            self.round_began = (Instant::now(), here);
        }
    }
}

/// A second core's reading under way: on a thread of the trace's reading, or the early round.
enum Pending<'s> {
    Thread(ScopedJoinHandle<'s, RoundRead>),
    Early(std::sync::mpsc::Receiver<RoundRead>),
}

impl Pending<'_> {
    /// Its outcome, once it is over (None if its thread panicked).
    fn wait(self) -> Option<RoundRead> {
        match self {
            Pending::Thread(h) => h.join().ok(),
            Pending::Early(r) => r.recv().ok(),
        }
    }
}

/// What is left of a taken-over reading once its memo entries are stored: its events, their
/// streams and aux, and the strings they fetched from the memo.
struct Unadopted {
    events: Vec<Vec<TraceEvent>>,
    trace: DeviceTrace,
    deferred: Vec<tail::Deferred>,
}

/// A second core's reading being taken over: its memo entries, which take the ids from
/// `first` in the main reading's memo, and its stacks, mapped to the main reading's as events
/// are met.
struct TakenOver {
    first: u64,
    entries: Vec<tail::Packed>,
    /// Of each of its strings, the document string it became.
    text_values: Vec<Value>,
    stacks: Vec<Box<[u32]>>,
    checks: Vec<tail::Check>,
    /// Of each of its stacks, the main reading's id (`u32::MAX`: not met yet).
    stack_of: Vec<u32>,
}

impl TakenOver {
    /// Its strings stored as document strings.
    fn new(
        r: &mut Diverted<'_, '_, '_>,
        first: u64,
        entries: Vec<tail::Packed>,
        texts: &[Box<str>],
        stacks: Vec<Box<[u32]>>,
        checks: Vec<tail::Check>,
    ) -> TakenOver {
        let mut text_values = vec![Value::NONE; texts.len()];
        for e in &entries {
            if let Entry::Text(i) = e.get() {
                text_values[i as usize] = r.push_text(&texts[i as usize]);
            }
        }
        TakenOver {
            first,
            entries,
            text_values,
            stack_of: vec![u32::MAX; stacks.len()],
            stacks,
            checks,
        }
    }

    /// Store its memo entries after the main reading's: strings as document strings, events
    /// and frame lists as handles (frame lists as their stack's when stacks are `kept`).
    fn memoize(self, r: &mut Diverted<'_, '_, '_>, kept: bool) {
        r.memoize_run(self.entries.iter().map(|e| match e.get() {
            Entry::Event => Value::taken(EVENT_HANDLE),
            Entry::FrameList(k) if kept => Value::taken(self.stack_of[k as usize] as u64),
            Entry::FrameList(_) => Value::taken(NO_STACK_HANDLE),
            Entry::Text(i) => self.text_values[i as usize],
            Entry::Unread => Value::taken(UNREAD_HANDLE),
        }));
    }
}

impl<'f> TraceReader<'f> {
    /// A device's list of events. A second core's reading is started after a batch and taken
    /// over where it started (between two events), the main reading's own share of the round
    /// read before that (`read_own_share`); the next round starts as one is taken over.
    fn events<'s, 'a: 's>(
        &mut self,
        r: &mut Diverted<'_, 'a, '_>,
        device: usize,
        tail: &mut TailState<'s>,
        scope: &'s Scope<'s, '_>,
    ) -> Result<()>
    where
        'f: 's,
    {
        list(r, b'}', &mut |r, at| match at {
            Walk::Item => {
                if r.position() >= tail.at && self.take_over(r, device, tail, scope) {
                    return Ok(());
                }
                if tail.own_known.is_some()
                    && r.position() < tail.at
                    && (!tail.own_early || self.out.lengths[device] > 0)
                    && self.read_own_share(r, device, tail)
                {
                    return Ok(());
                }
                self.event(r, device)
            }
            Walk::BatchRead { start } => {
                if !tail.started {
                    // (of a batch a round was taken over in, only what the main reading read
                    // after it)
                    self.start_tail(r, start.max(tail.resumed_at), tail, scope);
                }
                if tail.handle.is_some() {
                    r.read_elsewhere(tail.done.load(Ordering::Relaxed));
                }
                Ok(())
            }
        })
    }

    /// Start the second core's reading at an event past the main reading's share of this round
    /// (the next `round_bytes`, or what is left), to stop at the round's end, telling it the
    /// strings the bytes from `scan_from` (where an opcode starts) to here fetched from the memo.
    fn start_tail<'s, 'a: 's>(
        &mut self,
        r: &mut Diverted<'_, 'a, '_>,
        scan_from: usize,
        tail: &mut TailState<'s>,
        scope: &'s Scope<'s, '_>,
    ) where
        'f: 's,
    {
        if self.second_core.is_none() || r.memo_dense_len().is_none() {
            return;
        }
        let here = r.position();
        let text_of = |id: u64| r.memo_peek(id).and_then(|v| r.doc().as_str(v));
        let known = known_between(r.data(), scan_from, here, text_of);
        self.spawn_tail(r.data(), here, known, 0, tail, scope);
    }

    /// `start_tail` from `here`, the strings of the memo ids the round's reader may meet being
    /// `known`, the main reading first adopting `to_adopt` events of the last round.
    fn spawn_tail<'s, 'a: 's>(
        &mut self,
        data: &'a [u8],
        here: usize,
        known: Known,
        to_adopt: usize,
        tail: &mut TailState<'s>,
        scope: &'s Scope<'s, '_>,
    ) where
        'f: 's,
    {
        let Some(second) = self.second_core else {
            return;
        };
        // the least the file must still hold: a second thread is not worth starting for a small
        // file, but once rounds have run the last one is kept small (what the main reading
        // takes over after it is read alone)
        let left = data.len() - here;
        let floor = match tail.resumed_at {
            0 => second.min_bytes,
            _ => second.min_bytes.min(LAST_ROUND_BYTES),
        };
        if left < floor.max(1) {
            return;
        }
        tail.started = true;
        let share = |round| tail.main_share(round, to_adopt);
        let Some((at, stop)) = rounds::cut(data, here, &known, second.round_bytes, share) else {
            return;
        };
        let round = tail::Round {
            data,
            start: at,
            stop,
            parts: self.parts,
            pages: second.pages,
        };
        let progress = tail::Progress {
            cancel: tail.cancel,
            done: tail.done,
        };
        tail.at = at;
        tail.round_began = (Instant::now(), here);
        tail.adopting = Duration::ZERO;
        // (the last round's count, until this one reports)
        progress.done.store(0, Ordering::Relaxed);
        tail.own_known = Some(known.clone());
        tail.own_early = false;
        tail.handle = Some(Pending::Thread(scope.spawn(move || {
            let began = Instant::now();
            let read = tail::read(round, &known, progress);
            (known, read, began.elapsed())
        })));
    }

    /// The main reading is at or past where the second core's started: take its reading over
    /// if it is exactly there and every check holds (true), else read on alone.
    fn take_over<'s, 'a: 's>(
        &mut self,
        r: &mut Diverted<'_, 'a, '_>,
        device: usize,
        tail: &mut TailState<'s>,
        scope: &'s Scope<'s, '_>,
    ) -> bool
    where
        'f: 's,
    {
        let Some((t, first, texts, known)) = self.join_tail(r, tail) else {
            return false;
        };
        // The next round starts now, before this one's memo entries are stored and its events
        // go to the sink: the second core would idle meanwhile (a tenth of a round's time, and
        // all of it after the last round). It is told the strings of about the last thousand
        // events, as a round started after a batch is: those of the main reading's memo, and
        // those this round's reading stored itself, at the ids from `first` on.
        let data = r.data();
        let scan_from = known.event_start(data, t.end.saturating_sub(SCAN_BYTES), SCAN_BYTES);
        let text_of = |id: u64| match id.checked_sub(first) {
            Some(at) => match t.entries.get(at as usize)?.get() {
                Entry::Text(i) => Some(&*t.texts[i as usize]),
                _ => None,
            },
            None => r.memo_peek(id).and_then(|v| r.doc().as_str(v)),
        };
        if let Some(from) = scan_from {
            let next = known_between(data, from, t.end, text_of);
            self.spawn_tail(data, t.end, next, t.count, tail, scope);
        }
        let (began, count) = (Instant::now(), t.count);
        let (_, rest) = self.adopt_entries(r, device, t, first);
        self.adopt_events(device, rest, &texts);
        tail.adopting = began.elapsed();
        if count > 0 {
            // (averaged with the rounds before: a sink's cost comes in spikes, as when it
            // starts to write what it keeps to disk)
            let now = tail.adopting.as_secs_f64() / count as f64;
            tail.adopt_per_event = (tail.adopt_per_event + now) / 2.0;
        }
        true
    }

    /// The main reading's own share of a round, read by the second core's reader on this
    /// thread (it decodes a third faster than the machine: no document values, no memo
    /// lookups) up to where the second core started, and taken over as the second core's
    /// reading is (true, if that moved the reading on); nothing changes if it gives up or does
    /// not hold (the main reading then reads its share itself, as before).
    fn read_own_share(
        &mut self,
        r: &mut Diverted<'_, '_, '_>,
        device: usize,
        tail: &mut TailState<'_>,
    ) -> bool {
        let (Some(mut known), Some(second)) = (tail.own_known.take(), self.second_core) else {
            return false;
        };
        if tail.own_early {
            known = known.below(r.memo_dense_len().unwrap_or(0));
        }
        let (cancel, done) = (AtomicBool::new(false), AtomicUsize::new(0));
        let round = tail::Round {
            data: r.data(),
            start: r.position(),
            stop: tail.at,
            parts: self.parts,
            pages: second.pages,
        };
        let progress = tail::Progress {
            cancel: &cancel,
            done: &done,
        };
        let Some(t) = tail::read(round, &known, progress) else {
            debug(&"own share: gave up (a layout it leaves to the machine)");
            return false;
        };
        let Some(first) = r.memo_dense_len() else {
            return false;
        };
        let Some(texts) = self.check_tail(r, first, &known, &t) else {
            debug(&"own share: its reading did not hold");
            return false;
        };
        debug(&format_args!(
            "own share: read {} events, bytes {}..{}",
            t.count, t.start, t.end
        ));
        self.read_by.own_share_events += t.count;
        let start = t.start;
        let (end, rest) = self.adopt_entries(r, device, t, first);
        self.adopt_events(device, rest, &texts);
        end != start
    }

    /// A checked reading of the second core's reader taken over, first its memo entries: its
    /// stacks mapped to the main reading's, its entries stored after `first`, its events
    /// counted and the reading moved to its end (returned, with what is left to adopt).
    fn adopt_entries(
        &mut self,
        r: &mut Diverted<'_, '_, '_>,
        device: usize,
        t: Tail,
        first: u64,
    ) -> (usize, Unadopted) {
        let Tail {
            end,
            mut events,
            trace,
            count,
            entries,
            texts: tail_texts,
            stacks,
            checks,
            deferred,
            ..
        } = t;
        // its strings as document strings, its stacks as the main reading's (interned in the
        // order of its events, as one thread would have), then its memo entries
        let mut taken = TakenOver::new(r, first, entries, &tail_texts, stacks, checks);
        let keep = self.parts == Parts::All;
        if keep {
            for e in events.iter_mut().flatten() {
                if e.stack != StackId::MISSING {
                    e.stack = self.tail_stack(r, &mut taken, e.stack);
                }
            }
        }
        taken.memoize(r, keep);
        self.out.lengths[device] += count;
        r.skip_to(end);
        (
            end,
            Unadopted {
                events,
                trace,
                deferred,
            },
        )
    }

    /// Then its events: the strings they fetched from the memo (`texts`, now known) filled
    /// in, and appended to the trace or given to the sink.
    fn adopt_events(&mut self, device: usize, rest: Unadopted, texts: &[String]) {
        let Unadopted {
            mut events,
            trace: mut tail_trace,
            deferred,
        } = rest;
        if self.parts == Parts::SegmentsOnly {
            return;
        }
        for (d, text) in deferred.iter().zip(texts) {
            let (chunk, at) = (d.event as usize / TAIL_CHUNK, d.event as usize % TAIL_CHUNK);
            let e = &mut events[chunk][at];
            let mut set = |aux: &mut EventAux| match d.field {
                F_ACTION => set_action(text, e, aux),
                field => set_text_field(field, text, aux),
            };
            match tail_trace.aux.binary_search_by_key(&d.event, |&(i, _)| i) {
                Ok(i) => set(&mut tail_trace.aux[i].1),
                Err(i) => {
                    // most deferred strings say nothing (a known action, an empty
                    // `user_metadata`): an entry only for those that do
                    let mut aux = EventAux::default();
                    set(&mut aux);
                    if aux.says_something() {
                        tail_trace.aux.insert(i, (d.event, aux));
                    }
                }
            }
        }
        tail_trace.aux.retain(|(_, a)| a.says_something());
        self.append_tail_events(device, events, tail_trace);
    }

    /// Wait for the second core's reading of this round and check it (`check_tail`): the
    /// reading, the first memo id of its entries and the strings of its deferred values; None
    /// (and the main reading reads on alone) if it was not where an event starts, gave up or
    /// does not hold. Either way its thread is over and the next round may start.
    fn join_tail(
        &mut self,
        r: &mut Diverted<'_, '_, '_>,
        tail: &mut TailState<'_>,
    ) -> Option<(Tail, u64, Vec<String>, Known)> {
        let at = std::mem::replace(&mut tail.at, usize::MAX);
        r.read_elsewhere(0); // from here on the main reading's position says it all
        if r.position() != at {
            tail.cancel.store(true, Ordering::Relaxed);
            debug(&format_args!(
                "second core: byte {at} was not an event start"
            ));
            return None;
        }
        let main_took = tail.round_began.0.elapsed().saturating_sub(tail.adopting);
        let main_bytes = at - tail.round_began.1;
        let pending = tail.handle.take();
        let early = matches!(pending, Some(Pending::Early(_)));
        let joined = pending.and_then(Pending::wait);
        // its thread has ended: whatever came of this round, the next may be tried
        tail.started = false;
        let Some((known, Some(t), tail_took)) = joined else {
            debug(&"second core: gave up (a layout it leaves to the main reading)");
            return None;
        };
        let first = r.memo_dense_len()?;
        let Some(texts) = self.check_tail(r, first, &known, &t) else {
            debug(&"second core: its reading did not hold");
            return None;
        };
        debug(&format_args!(
            "second core: read {} events, bytes {}..{}, in {tail_took:?} (the main reading's {} bytes before: {main_took:?}, after adopting the last round's reading for {:?})",
            t.count, t.start, t.end, main_bytes, tail.adopting
        ));
        self.read_by.second_core_events += t.count;
        self.read_by.second_core_rounds += 1;
        if early {
            self.read_by.early_round_events += t.count;
        }
        let speed = |bytes: usize, took: Duration| bytes as f64 / took.as_secs_f64().max(1e-6);
        let (main_speed, tail_speed) = (speed(main_bytes, main_took), speed(t.end - at, tail_took));
        tail.speeds = Some((main_speed, tail_speed));
        tail.resumed_at = t.end;
        Some((t, first, texts, known))
    }

    /// A taken-over reading's events, after the main reading's: to the sink, or appended to
    /// the device's trace a chunk at a time, each let go once copied; their streams as the
    /// main reading's (`check_tail` counted them).
    fn append_tail_events(
        &mut self,
        device: usize,
        events: Vec<Vec<TraceEvent>>,
        tail_trace: DeviceTrace,
    ) {
        let trace = &mut self.out.traces[device];
        let streams: Vec<u16> = (tail_trace.streams.iter())
            .map(|&s| trace.stream_index(s).unwrap_or(0))
            .collect();
        self.out.any_time |= events.iter().flatten().any(|e| e.time_us != NO_TIME);
        if let Some(sink) = self.sink.as_deref_mut() {
            let mut aux = tail_trace.aux.iter().peekable();
            for (i, e) in events.iter().flatten().enumerate() {
                let a = aux.next_if(|(at, _)| *at as usize == i).map(|(_, a)| a);
                let stream = tail_trace.stream(e);
                let e = TraceEvent {
                    stream_index: streams[e.stream_index as usize],
                    ..*e
                };
                sink.event(device as u32, &e, stream, a);
            }
            events.into_iter().for_each(tail::spare_chunk);
            return;
        }
        let same = streams.iter().enumerate().all(|(i, &s)| s as usize == i);
        let first_index = trace.events.len() as u32;
        for mut chunk in events {
            if !same {
                for e in &mut chunk {
                    e.stream_index = streams[e.stream_index as usize];
                }
            }
            trace.events.extend_from_slice(&chunk);
            tail::spare_chunk(chunk);
        }
        (trace.aux).extend(
            tail_trace
                .aux
                .into_iter()
                .map(|(i, a)| (first_index + i, a)),
        );
    }

    /// The main reading's stack for a stack of the second core's reading (`check_tail` has
    /// checked every id it holds).
    fn tail_stack(
        &mut self,
        r: &Diverted<'_, '_, '_>,
        taken: &mut TakenOver,
        stack: StackId,
    ) -> StackId {
        let first = taken.first;
        let k = if stack.0 & FROM_CHECK != 0 {
            // an event's frames fetched by reference: a list of the tail's, or the main's
            let id = taken.checks[(stack.0 & !FROM_CHECK) as usize].id();
            if id >= first {
                match taken.entries[(id - first) as usize].get() {
                    Entry::FrameList(k) => k,
                    _ => return StackId::MISSING, // check_tail let none through
                }
            } else {
                let v = r.memo_peek(id).unwrap_or(Value::NONE);
                if let Some(h) = r.doc().as_taken(v) {
                    return StackId(h as u32);
                }
                self.scratch.clear();
                self.scratch
                    .extend_from_slice(r.doc().as_seq(v).unwrap_or(&[]));
                return self.intern();
            }
        } else {
            stack.0
        };
        if taken.stack_of[k as usize] == u32::MAX {
            self.scratch.clear();
            for &id in taken.stacks[k as usize].iter() {
                let id = id as u64;
                self.scratch.push(if id >= first {
                    match taken.entries[(id - first) as usize].get() {
                        Entry::Text(i) => taken.text_values[i as usize],
                        _ => Value::NONE, // check_tail let none through
                    }
                } else {
                    r.memo_peek(id).unwrap_or(Value::NONE)
                });
            }
            taken.stack_of[k as usize] = self.intern().0;
        }
        StackId(taken.stack_of[k as usize])
    }

    /// Whether the second core's reading holds now that the first id of its memo entries is
    /// known; the strings of its deferred values, in order.
    fn check_tail(
        &self,
        r: &Diverted<'_, '_, '_>,
        first: u64,
        known: &Known,
        t: &Tail,
    ) -> Option<Vec<String>> {
        let keep = self.parts == Parts::All;
        let streams = self.out.traces.last().map_or(0, |t| t.streams.len());
        if streams + t.trace.streams.len() > MAX_STREAMS {
            return None; // the main reading reads on, and says so
        }
        // what it was told is still so (no PUT changed it since)
        for (id, text) in known.iter() {
            if r.memo_peek(id).and_then(|v| r.doc().as_str(v)) != Some(text) {
                return None;
            }
        }
        if t.max_ahead >= first as i64 {
            return None; // a reference to an id not stored yet
        }
        let memo_then = |entries: u32| first + entries as u64;
        // an entry of the tail, or of the main reading's memo as it stood then
        let lookup = |id: u64, entries: u32| -> Option<Held> {
            if id >= memo_then(entries) {
                return None;
            }
            if id >= first {
                let at = (id - first) as usize;
                return Some(Held::Tail(t.entries[at].get()));
            }
            r.memo_peek(id).map(Held::Main)
        };
        for c in &t.checks {
            let frame_list = c.frame_list();
            // handles: the main reading's window holds the recent ones only
            let recent = memo_then(c.entries()) - c.id() <= RECENT_HANDLES as u64;
            let ok = match lookup(c.id(), c.entries())? {
                Held::Tail(Entry::FrameList(_)) => frame_list && recent,
                Held::Tail(Entry::Text(_)) => !frame_list,
                Held::Tail(Entry::Unread) => !frame_list && !keep,
                Held::Tail(Entry::Event) => false,
                Held::Main(v) => match r.doc().as_taken(v) {
                    Some(h) if h < EVENT_HANDLE || h == NO_STACK_HANDLE => frame_list && recent,
                    Some(UNREAD_HANDLE) => !frame_list && !keep,
                    Some(_) => false,
                    None => !frame_list || r.doc().as_seq(v).is_some(),
                },
            };
            if !ok {
                return None;
            }
        }
        // the frames of its stacks: strings of its own, or values of the main reading's
        // memo that are no handles (the main reading would refuse those as frames)
        for &id in t.stacks.iter().flat_map(|s| s.iter()) {
            let id = id as u64;
            let ok = if id >= first {
                matches!(t.entries.get((id - first) as usize)?.get(), Entry::Text(_))
            } else {
                r.memo_peek(id).is_some_and(|v| !v.is_taken())
            };
            if !ok {
                return None;
            }
        }
        t.deferred
            .iter()
            .map(|d| match lookup(d.id, d.entries)? {
                Held::Tail(Entry::Text(i)) => Some(t.texts[i as usize].to_string()),
                Held::Tail(_) => None,
                Held::Main(v) => r.doc().as_str(v).map(str::to_string),
            })
            .collect()
    }
}
