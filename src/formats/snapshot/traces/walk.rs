//! The opcode shapes a trace is made of: lists in MARK … APPENDS batches, memo entries, and an
//! event's scalar values.

use crate::pickle::{Diverted, Document, IntOrRef, Op, Value};

use super::{Result, EVENT_HANDLE};

/// Where [`list`] is when it calls back.
#[derive(Clone, Copy)]
pub(super) enum Walk {
    /// At an item: read it.
    Item,
    /// A MARK … APPENDS batch of items, begun at byte `start`, was read.
    BatchRead { start: usize },
}

/// A list: EMPTY_LIST, its memo entry, then its items in MARK … APPENDS batches or one by one
/// with APPEND; `visit` reads one item (which starts with opcode `item_code`) at each
/// `Walk::Item`, and is told of each batch read. The list itself is memoized as an inert
/// handle.
pub(super) fn list<'a>(
    r: &mut Diverted<'_, 'a, '_>,
    item_code: u8,
    visit: &mut dyn FnMut(&mut Diverted<'_, 'a, '_>, Walk) -> Result<()>,
) -> Result<()> {
    match r.next_op()? {
        Op::EmptyList => {}
        _ => return Err(r.error("expected a list")),
    }
    memo_entries(r, Value::taken(EVENT_HANDLE))?;
    loop {
        match r.peek() {
            Some(b'(') => {
                r.eat(b'(');
                let start = r.position();
                while r.peek() != Some(b'e') {
                    visit(r, Walk::Item)?;
                }
                r.eat(b'e');
                visit(r, Walk::BatchRead { start })?;
            }
            Some(c) if c == item_code => {
                visit(r, Walk::Item)?;
                if !r.eat(b'a') {
                    return Err(r.error("expected APPEND after a single item"));
                }
            }
            _ => return Ok(()),
        }
        r.tick();
    }
}

/// The memo entries (MEMOIZE, PUT) that follow a value; the id of the last.
#[inline]
pub(super) fn memo_entries(r: &mut Diverted<'_, '_, '_>, v: Value) -> Result<Option<u64>> {
    let mut id = None;
    loop {
        match r.peek() {
            Some(0x94) => {
                r.eat(0x94);
                id = Some(r.memoize(v));
            }
            Some(b'q' | b'r' | b'p') => {
                let Op::Put(i) = r.next_op()? else {
                    return Err(r.error("expected PUT"));
                };
                r.put(i, v);
                id = Some(i);
            }
            _ => return Ok(id),
        }
    }
}

/// A value of an event: a number as decoded, or a document value (strings, memo references,
/// and whatever the machine read).
#[derive(Clone, Copy)]
pub(super) enum Scalar {
    Int(i64),
    Float(f64),
    Value(Value),
}

impl Scalar {
    pub(super) fn int(self, doc: &Document) -> Option<i64> {
        match self {
            Scalar::Int(i) => Some(i),
            Scalar::Float(_) => None,
            Scalar::Value(v) => doc.as_int(v),
        }
    }

    pub(super) fn float(self, doc: &Document) -> Option<f64> {
        match self {
            Scalar::Float(f) => Some(f),
            Scalar::Int(_) => None,
            Scalar::Value(v) => doc.as_f64(v),
        }
    }

    pub(super) fn value(self) -> Option<Value> {
        match self {
            Scalar::Value(v) => Some(v),
            _ => None,
        }
    }
}

/// A value the reader reads itself (numbers, strings, None/bools, memo references), or the
/// machine's reading of anything else.
#[inline]
pub(super) fn scalar(r: &mut Diverted<'_, '_, '_>) -> Result<Scalar> {
    match r.int_or_ref()? {
        Some(IntOrRef::Int(i)) => return Ok(Scalar::Int(i)),
        Some(IntOrRef::Ref(v)) => return Ok(Scalar::Value(v)),
        None => {}
    }
    match r.peek() {
        Some(b'K' | b'M' | b'J' | 0x8a | b'G' | b'N' | 0x88 | 0x89 | b'h' | b'j' | 0x8c | b'X') => {
        }
        _ => return Ok(Scalar::Value(r.generic_value()?)),
    }
    let v = match r.next_op()? {
        Op::Int(i) => return Ok(Scalar::Int(i)),
        Op::Long(le) if le.len() <= 8 => {
            return Ok(Scalar::Int(crate::pickle::int_from_short_le(le)))
        }
        Op::Long(le) => {
            let v = r.int_from_le(le);
            memo_entries(r, v)?;
            return Ok(Scalar::Value(v));
        }
        Op::Float(f) => return Ok(Scalar::Float(f)),
        Op::None => return Ok(Scalar::Value(Value::NONE)),
        Op::Bool(b) => return Ok(Scalar::Value(if b { Value::TRUE } else { Value::FALSE })),
        Op::Get(id) => return Ok(Scalar::Value(r.get(id)?)),
        Op::Unicode(raw) => r.push_str(raw),
        _ => return Err(r.error("unexpected opcode in a trace event")),
    };
    memo_entries(r, v)?;
    Ok(Scalar::Value(v))
}
