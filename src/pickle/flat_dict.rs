//! The fused path's match: a small dict written in one batch of numbers and memo references
//! (`}` `(` key value … `u`), as every trace event and block of an allocator snapshot is,
//! recognized from its bytes before anything is built. A leaf of the reader, which then makes
//! the dict in one step (docs/architecture.md, "Memory and speed").

use super::value::{int_from_le_prefix, Value};

/// Pairs a batch may have: snapshot events have 6, blocks 5; larger dicts go opcode by opcode.
pub(super) const MAX_PAIRS: usize = 12;

/// A value of a flat dict as the fused path decoded it, before it became a document value.
#[derive(Clone, Copy, Debug)]
pub(super) enum FlatValue {
    Int(i64),
    Float(f64),
    /// A memo reference, None or a bool.
    Value(Value),
}

/// A matched batch: its keys and values, and the bytes it spans.
pub(super) struct FlatBatch {
    /// The dict is memoized (MEMOIZE right after `}`).
    pub memoized: bool,
    pub pairs: usize,
    pub keys: [FlatValue; MAX_PAIRS],
    pub values: [FlatValue; MAX_PAIRS],
    /// Bytes from the opcode after `}` through `u`.
    pub len: usize,
}

impl FlatBatch {
    /// The batch that `b` (the bytes after an EMPTY_DICT) starts with, memo references resolved
    /// by `lookup`; None if they are anything else (the machine then reads them opcode by
    /// opcode).
    pub(super) fn match_at(
        b: &[u8],
        mut lookup: impl FnMut(u64) -> Option<Value>,
    ) -> Option<FlatBatch> {
        let memoized = b.first() == Some(&0x94);
        let mut i = memoized as usize;
        if b.get(i) != Some(&b'(') {
            return None;
        }
        i += 1;
        let mut raw_keys = [FlatValue::Value(Value::NONE); MAX_PAIRS];
        let mut values = [FlatValue::Value(Value::NONE); MAX_PAIRS];
        let mut n = 0;
        loop {
            let &code = b.get(i)?;
            if code == b'u' {
                i += 1;
                break;
            }
            if n == 2 * MAX_PAIRS {
                return None;
            }
            let arg = |len: usize| b.get(i + 1..i + 1 + len);
            let (v, len) = match code {
                b'h' | b'j' => {
                    let (id, len) = match code {
                        b'h' => (
                            *match arg(1) {
                                Some(a) => &a[0],
                                None => return None,
                            } as usize,
                            1,
                        ),
                        _ => match arg(4) {
                            Some(a) => (u32::from_le_bytes(a.try_into().unwrap()) as usize, 4),
                            None => return None,
                        },
                    };
                    match lookup(id as u64) {
                        Some(v) => (FlatValue::Value(v), len),
                        None => return None,
                    }
                }
                b'K' => match arg(1) {
                    Some(a) => (FlatValue::Int(a[0] as i64), 1),
                    None => return None,
                },
                b'M' => match arg(2) {
                    Some(a) => (
                        FlatValue::Int(u16::from_le_bytes(a.try_into().unwrap()) as i64),
                        2,
                    ),
                    None => return None,
                },
                b'J' => match arg(4) {
                    Some(a) => (
                        FlatValue::Int(i32::from_le_bytes(a.try_into().unwrap()) as i64),
                        4,
                    ),
                    None => return None,
                },
                0x8a => match arg(1) {
                    // LONG1 of up to 8 bytes (Python writes the fewest that hold the value)
                    Some(&[k]) if k <= 8 && b.len() >= i + 2 + k as usize => (
                        FlatValue::Int(int_from_le_prefix(&b[i + 2..], k as usize)),
                        1 + k as usize,
                    ),
                    _ => return None,
                },
                b'G' => match arg(8) {
                    Some(a) => (
                        FlatValue::Float(f64::from_be_bytes(a.try_into().unwrap())),
                        8,
                    ),
                    None => return None,
                },
                b'N' => (FlatValue::Value(Value::NONE), 0),
                0x88 => (FlatValue::Value(Value::TRUE), 0),
                0x89 => (FlatValue::Value(Value::FALSE), 0),
                _ => return None,
            };
            if n % 2 == 0 {
                raw_keys[n / 2] = v;
            } else {
                values[n / 2] = v;
            }
            n += 1;
            i += 1 + len;
        }
        if n == 0 || n % 2 != 0 {
            return None;
        }
        Some(FlatBatch {
            memoized,
            pairs: n / 2,
            keys: raw_keys,
            values,
            len: i,
        })
    }
}
