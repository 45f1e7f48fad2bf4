//! One event dict and its frame list, decoded into a `TraceEvent` and an interned stack.

use crate::model::snapshot::{Action, EventAux, Parts, StackId, TraceEvent, NO_TIME};
use crate::pickle::{Diverted, Op, Value, View};

use super::super::fields::{
    set_action, set_text_field, F_ACTION, F_ADDR, F_COMPILE_CONTEXT, F_DEVICE_FREE, F_FRAMES,
    F_SIZE, F_STREAM, F_TIME, F_USER_METADATA, UNKNOWN as F_UNKNOWN,
};
use super::{Result, TraceReader, EVENT_HANDLE, NO_STACK_HANDLE, UNREAD_HANDLE};

use super::walk::{memo_entries, scalar, Scalar};

impl TraceReader<'_> {
    /// One event dict: `}` memo `(` key value … `u`.
    pub(super) fn event(&mut self, r: &mut Diverted<'_, '_, '_>, device: usize) -> Result<()> {
        if !matches!(r.next_op()?, Op::EmptyDict) {
            return Err(r.error("device_traces: expected an event dict"));
        }
        memo_entries(r, Value::taken(EVENT_HANDLE))?;
        if !r.eat(b'(') {
            return Err(r.error("an event dict not written in one batch"));
        }
        let mut e = TraceEvent::default();
        let mut aux = EventAux::default();
        let mut stream = 0;
        let mut have_action = false;
        let mut pos = 0;
        while !r.eat(b'u') {
            let k = scalar(r)?;
            if k.value().is_some_and(|k| k.is_taken()) {
                return Err(r.error("a frame list or event as a key"));
            }
            let field = match k.value() {
                Some(k) => self.keys.field(r.doc(), pos, k),
                None => F_UNKNOWN,
            };
            pos += 1;
            if field == F_FRAMES {
                e.stack = self.frames(r)?;
                continue;
            }
            let v = scalar(r)?;
            let doc = r.doc();
            let fail = |r: &Diverted<'_, '_, '_>| Err(r.error("an event value read differently"));
            if v.value().is_some_and(|v| v.is_taken()) {
                return fail(r); // a frame list or event where a plain value belongs
            }
            match field {
                F_ACTION => {
                    let Some(v) = v.value() else {
                        return fail(r);
                    };
                    match self.actions.iter().find(|(h, _)| *h == v) {
                        Some(&(_, a)) => {
                            aux.action_name = None;
                            e.action = a;
                        }
                        None => {
                            let Some(name) = doc.as_str(v) else {
                                return fail(r);
                            };
                            set_action(name, &mut e, &mut aux);
                            if e.action != Action::Other && self.actions.len() < 32 {
                                self.actions.push((v, e.action));
                            }
                        }
                    }
                    have_action = true;
                }
                F_ADDR | F_SIZE | F_DEVICE_FREE => {
                    let n = match v {
                        Scalar::Int(i) if i >= 0 => i as u64,
                        _ => match v.value().map(|v| doc.view(v)) {
                            Some(View::Int(i)) if i >= 0 => i as u64,
                            Some(View::Bool(b)) => b as u64,
                            _ => return fail(r),
                        },
                    };
                    match field {
                        F_ADDR => e.addr = n,
                        F_SIZE => e.size = n,
                        _ => aux.device_free = Some(n),
                    }
                }
                F_STREAM => stream = v.int(doc).unwrap_or(0),
                F_TIME => {
                    e.time_us = v
                        .int(doc)
                        .or_else(|| v.float(doc).map(|f| f as i64))
                        .unwrap_or(NO_TIME)
                }
                F_USER_METADATA | F_COMPILE_CONTEXT => {
                    if let Some(s) = v.value().and_then(|v| doc.as_str(v)) {
                        set_text_field(field, s, &mut aux);
                    }
                }
                _ => {}
            }
        }
        if !have_action {
            return Err(r.error("a trace event without 'action'"));
        }
        self.out.lengths[device] += 1;
        if self.parts == Parts::SegmentsOnly {
            return Ok(());
        }
        self.out.any_time |= e.time_us != NO_TIME;
        let trace = &mut self.out.traces[device];
        if let Some(sink) = self.sink.as_deref_mut() {
            // the streams are still counted: past MAX_STREAMS the reading fails, as without
            e.stream_index = trace
                .stream_index(stream)
                .map_err(|m| r.error(m.to_string()))?;
            let aux = aux.says_something().then_some(&aux);
            sink.event(device as u32, &e, stream, aux);
            return Ok(());
        }
        trace
            .push(e, stream, aux)
            .map_err(|m| r.error(m.to_string()))?;
        Ok(())
    }

    /// An event's `frames`: a fresh list of frames (memo references to frame dicts, or new
    /// frame dicts), or a memo reference to a list seen before.
    fn frames(&mut self, r: &mut Diverted<'_, '_, '_>) -> Result<StackId> {
        let keep = self.parts == Parts::All;
        match r.peek() {
            Some(b'h' | b'j') => {
                let Op::Get(id) = r.next_op()? else {
                    return Err(r.error("expected GET"));
                };
                let v = r.get(id)?;
                if let Some(h) = r.doc().as_taken(v) {
                    return match h {
                        NO_STACK_HANDLE => Ok(StackId::MISSING),
                        EVENT_HANDLE.. => Err(r.error("an event where frames belong")),
                        local => Ok(StackId(local as u32)),
                    };
                }
                // a list the document holds (a block's frames, shared with its event)
                let Some(items) = r.doc().as_seq(v) else {
                    return Err(r.error("frames: not a list"));
                };
                if !keep {
                    return Ok(StackId::MISSING);
                }
                self.scratch.clear();
                self.scratch.extend_from_slice(items);
                Ok(self.intern())
            }
            Some(b'N') => {
                // None reads as an empty stack
                r.next_op()?;
                self.scratch.clear();
                Ok(if keep {
                    self.intern()
                } else {
                    StackId::MISSING
                })
            }
            Some(b']') => {
                r.next_op()?;
                let memo = memo_entries(r, Value::taken(NO_STACK_HANDLE))?;
                self.scratch.clear();
                loop {
                    match r.peek() {
                        Some(b'(') => {
                            r.eat(b'(');
                            loop {
                                // the common case, a run of references to shared frames
                                r.memo_refs(keep.then_some(&mut self.scratch))?;
                                match r.peek() {
                                    Some(b'e') => break,
                                    _ => self.frame(r, keep)?,
                                }
                            }
                            r.eat(b'e');
                        }
                        Some(b'h' | b'j' | b'}') => {
                            self.frame(r, keep)?;
                            if !r.eat(b'a') {
                                return Err(r.error("expected APPEND after a single frame"));
                            }
                        }
                        _ => break,
                    }
                }
                if !keep {
                    return Ok(StackId::MISSING);
                }
                let id = self.intern();
                if let Some(m) = memo {
                    r.put(m, Value::taken(id.0 as u64));
                }
                Ok(id)
            }
            _ => Err(r.error("frames: not a list")),
        }
    }

    /// One frame of a list: a memo reference or a frame dict (read by the machine: it is
    /// memoized and shared, and there are only as many as distinct frames).
    #[inline]
    fn frame(&mut self, r: &mut Diverted<'_, '_, '_>, keep: bool) -> Result<()> {
        let v = match r.peek() {
            Some(b'h' | b'j') => {
                let Op::Get(id) = r.next_op()? else {
                    return Err(r.error("expected GET"));
                };
                r.get(id)?
            }
            Some(b'}') => r.generic_value()?,
            _ => return Err(r.error("a frame that is not a dict")),
        };
        // (a frame the second core's reading left unread is a frame all the same)
        if v.is_taken() && (keep || r.doc().as_taken(v) != Some(UNREAD_HANDLE)) {
            return Err(r.error("a frame list where a frame belongs"));
        }
        if keep {
            self.scratch.push(v);
        }
        Ok(())
    }

    /// The local id of the stack in `scratch`, by content.
    pub(super) fn intern(&mut self) -> StackId {
        if let Some(&id) = self.stack_ids.get(&self.scratch[..]) {
            return StackId(id);
        }
        let id = self.out.stacks.len() as u32;
        let frames: Box<[Value]> = self.scratch.as_slice().into();
        self.out.stacks.push(frames.clone());
        self.stack_ids.insert(frames, id);
        StackId(id)
    }
}
