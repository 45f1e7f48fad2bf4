//! A snapshot's trace events as they go by: the sinks a reading hands them to
//! ([`TraceSink`]: the analyses, or [`KeptTraces`] that keeps them), and the events given again
//! in order ([`TraceEvents`]: from a kept snapshot, or from where a reading put them aside).

use super::snapshot::{DeviceTrace, EventAux, Snapshot, StackId, TraceEvent};

/// Takes a snapshot's trace events as they are read, in order, instead of the model keeping
/// them: what an analysis keeps is then its own (running totals, live blocks), not the trace.
pub trait TraceSink {
    /// Event `e` of device `device`'s trace, on `stream`, with what only some events carry.
    /// Its `stack` is `MISSING` when the reading leaves stacks out; else see `renumber_stacks`.
    fn event(&mut self, device: u32, e: &TraceEvent, stream: i64, aux: Option<&EventAux>);

    /// The events will come again from the first one (a reading that was dropped and is
    /// read again): forget those taken so far.
    fn restart(&mut self);

    /// The events' stacks so far were the reading's own numbering (it settles the snapshot's
    /// only at its end): stack `n` is the snapshot's `ids[n]` (`MISSING` stays so). Said once,
    /// after the last event, by a streamed reading with stacks; events fed from a kept trace
    /// ([`feed`]) carry the snapshot's ids and come without it.
    fn renumber_stacks(&mut self, _ids: &[StackId]) {}
}

/// Both take every event.
impl<A: TraceSink, B: TraceSink> TraceSink for (A, B) {
    fn event(&mut self, device: u32, e: &TraceEvent, stream: i64, aux: Option<&EventAux>) {
        self.0.event(device, e, stream, aux);
        self.1.event(device, e, stream, aux);
    }

    fn restart(&mut self) {
        self.0.restart();
        self.1.restart();
    }

    fn renumber_stacks(&mut self, ids: &[StackId]) {
        self.0.renumber_stacks(ids);
        self.1.renumber_stacks(ids);
    }
}

/// A sink that may not be wanted: `None` takes nothing.
impl<T: TraceSink> TraceSink for Option<T> {
    fn event(&mut self, device: u32, e: &TraceEvent, stream: i64, aux: Option<&EventAux>) {
        if let Some(s) = self {
            s.event(device, e, stream, aux);
        }
    }

    fn restart(&mut self) {
        if let Some(s) = self {
            s.restart();
        }
    }

    fn renumber_stacks(&mut self, ids: &[StackId]) {
        if let Some(s) = self {
            s.renumber_stacks(ids);
        }
    }
}

/// What [`TraceEvents::visit`] gives each event to: its index, the event, its stream and
/// what only some events carry.
pub type EventVisitor<'v> =
    dyn FnMut(usize, &TraceEvent, i64, Option<&EventAux>) -> std::io::Result<()> + 'v;

/// A snapshot's trace events, given in order as often as asked: from a kept trace, or from
/// where a reading put them aside (`formats::event_spool`).
pub trait TraceEvents {
    /// Events of device `device`'s trace.
    fn count(&self, device: u32) -> usize;

    /// Each event of device `device`'s trace in order, with its index, its stream and what
    /// only some events carry; stops at `f`'s first error.
    fn visit(&mut self, device: u32, f: &mut EventVisitor<'_>) -> std::io::Result<()>;

    /// Each event of device `device`'s trace from event `first` on, the last first (to undo
    /// them from the end: `segments --at`, `simulate`'s state before the trace); stops at
    /// `f`'s first error.
    fn visit_back_from(
        &mut self,
        device: u32,
        first: usize,
        f: &mut EventVisitor<'_>,
    ) -> std::io::Result<()>;

    /// Each event of device `device`'s trace after event `after`, the last first.
    fn visit_back(
        &mut self,
        device: u32,
        after: usize,
        f: &mut EventVisitor<'_>,
    ) -> std::io::Result<()> {
        // (`usize::MAX`: none)
        self.visit_back_from(device, after.saturating_add(1), f)
    }

    /// Two walkers of these events that can walk at once, each on its own thread; `None`
    /// where walks must take turns.
    fn two_readers(&mut self) -> std::io::Result<Option<[Box<dyn TraceEvents + Send + '_>; 2]>> {
        Ok(None)
    }
}

/// A kept trace gives its events from memory.
impl TraceEvents for &Snapshot {
    fn count(&self, device: u32) -> usize {
        self.trace(device).map_or(0, |t| t.events.len())
    }

    fn visit(&mut self, device: u32, f: &mut EventVisitor<'_>) -> std::io::Result<()> {
        let Some(trace) = self.trace(device) else {
            return Ok(());
        };
        let mut aux = trace.aux.iter().peekable();
        for (i, e) in trace.events.iter().enumerate() {
            let a = aux.next_if(|(at, _)| *at as usize == i).map(|(_, a)| a);
            f(i, e, trace.stream(e), a)?;
        }
        Ok(())
    }

    fn visit_back_from(
        &mut self,
        device: u32,
        first: usize,
        f: &mut EventVisitor<'_>,
    ) -> std::io::Result<()> {
        let Some(trace) = self.trace(device) else {
            return Ok(());
        };
        for i in (first..trace.events.len()).rev() {
            let e = &trace.events[i];
            f(i, e, trace.stream(e), trace.aux(i))?;
        }
        Ok(())
    }

    fn two_readers(&mut self) -> std::io::Result<Option<[Box<dyn TraceEvents + Send + '_>; 2]>> {
        Ok(Some([Box::new(*self), Box::new(*self)]))
    }
}

/// Device `device`'s events of `events` as a sequence, each element written by `element` as
/// the event is read (a serializer's error stops the walk and is the one returned).
pub fn serialize_events<S: serde::Serializer>(
    s: S,
    events: &mut dyn TraceEvents,
    device: u32,
    mut element: impl FnMut(
        &mut S::SerializeSeq,
        usize,
        &TraceEvent,
        i64,
        Option<&EventAux>,
    ) -> Result<(), S::Error>,
) -> Result<S::Ok, S::Error> {
    use serde::ser::{Error, SerializeSeq};
    let mut seq = s.serialize_seq(Some(events.count(device)))?;
    let mut failed = None;
    let walked = events.visit(device, &mut |i, e, stream, aux| {
        element(&mut seq, i, e, stream, aux).map_err(|err| {
            failed = Some(err);
            std::io::Error::other("serializing")
        })
    });
    if let Some(err) = failed {
        return Err(err);
    }
    walked.map_err(S::Error::custom)?;
    seq.end()
}

/// Keeps the events given it, up to a number: past that it lets them all go (memory stays
/// bounded; whoever needed them reads the file again).
pub struct KeptTraces {
    traces: Vec<DeviceTrace>,
    /// Events given so far (kept while no more than `limit`).
    given: usize,
    limit: usize,
}

impl KeptTraces {
    /// A sink that keeps every device's events while no more than `limit` have come in all.
    pub fn up_to(limit: usize) -> KeptTraces {
        KeptTraces {
            traces: Vec::new(),
            given: 0,
            limit,
        }
    }

    /// Whether the next event would be past the limit (and let all go).
    pub fn is_full(&self) -> bool {
        self.given >= self.limit
    }

    /// The traces so far, by device index, if no more than the limit of events came.
    pub fn traces(&self) -> Option<&[DeviceTrace]> {
        (self.given <= self.limit).then_some(&self.traces[..])
    }

    /// The traces, by device index, if no more than the limit of events came.
    pub fn into_traces(self) -> Option<Vec<DeviceTrace>> {
        (self.given <= self.limit).then_some(self.traces)
    }
}

impl KeptTraces {
    /// `event`'s rare cases: past the limit (every event let go), or a device's first event.
    #[cold]
    fn first_or_past_limit(
        &mut self,
        device: u32,
        e: &TraceEvent,
        stream: i64,
        aux: Option<&EventAux>,
    ) {
        if self.given > self.limit {
            if self.given == self.limit + 1 {
                self.traces = Vec::new();
            }
            return;
        }
        let d = device as usize;
        if self.traces.len() <= d {
            self.traces.resize_with(d + 1, DeviceTrace::default);
        }
        let trace = &mut self.traces[d];
        if trace.events.capacity() == 0 {
            // address space only until written, and the vector never moves (written end to
            // end: no huge pages, see `memory::advise_huge_pages`)
            let _ = trace.events.try_reserve_exact(self.limit - self.given + 1);
        }
        let _ = trace.push_copy(*e, stream, aux);
    }
}

impl TraceSink for KeptTraces {
    #[inline]
    fn event(&mut self, device: u32, e: &TraceEvent, stream: i64, aux: Option<&EventAux>) {
        self.given += 1;
        if self.given <= self.limit {
            let trace = self.traces.get_mut(device as usize);
            if let Some(trace) = trace.filter(|t| t.events.capacity() != 0) {
                // (a stream past MAX_STREAMS failed the reading already)
                let _ = trace.push_copy(*e, stream, aux);
                return;
            }
        }
        self.first_or_past_limit(device, e, stream, aux);
    }

    fn restart(&mut self) {
        *self = KeptTraces::up_to(self.limit);
    }

    fn renumber_stacks(&mut self, ids: &[StackId]) {
        for e in self.traces.iter_mut().flat_map(|t| &mut t.events) {
            if !e.stack.is_missing() {
                e.stack = ids[e.stack.0 as usize];
            }
        }
    }
}

/// Give a kept snapshot's trace events to `sink`, in order, as a streamed reading would have.
pub fn feed(snapshot: &Snapshot, sink: &mut dyn TraceSink) {
    for (device, trace) in snapshot.traces.iter().enumerate() {
        for (i, e) in trace.events.iter().enumerate() {
            sink.event(device as u32, e, trace.stream(e), trace.aux(i));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::snapshot::Action;

    fn event(i: u64) -> TraceEvent {
        TraceEvent {
            addr: i,
            action: Action::Alloc,
            ..TraceEvent::default()
        }
    }

    #[test]
    fn kept_traces_keep_up_to_their_limit_and_start_again() {
        let mut kept = KeptTraces::up_to(3);
        let oom = EventAux {
            device_free: Some(7),
            ..EventAux::default()
        };
        kept.event(0, &event(1), 0, None);
        kept.event(1, &event(2), 5, Some(&oom));
        kept.event(0, &event(3), 0, None);
        let traces = kept.into_traces().expect("within the limit");
        assert_eq!(traces.len(), 2);
        assert_eq!(traces[0].events.len(), 2);
        assert_eq!(traces[1].stream(&traces[1].events[0]), 5);
        assert_eq!(traces[1].aux(0).and_then(|a| a.device_free), Some(7));

        let mut kept = KeptTraces::up_to(3);
        for i in 0..4 {
            kept.event(0, &event(i), 0, None);
        }
        kept.restart(); // a reading read again: the count starts over
        for i in 0..3 {
            kept.event(0, &event(i), 0, None);
        }
        assert_eq!(kept.into_traces().map(|t| t[0].events.len()), Some(3));

        let mut both = (KeptTraces::up_to(1), KeptTraces::up_to(2));
        both.event(0, &event(1), 0, None);
        both.event(0, &event(2), 0, None);
        assert!(both.0.into_traces().is_none(), "over its limit");
        assert_eq!(both.1.into_traces().map(|t| t[0].events.len()), Some(2));
    }
}
