//! The keys of a snapshot's dicts that memtrack reads, numbered, and what every reading of
//! them shares: the key-to-field cache, an event's action and text fields. A leaf: the
//! document conversion, the streamed trace reader and its second-core tail all import it.

use crate::model::snapshot::{Action, EventAux, TraceEvent};
use crate::pickle::{Document, Value};

/// Resolves dict keys to field numbers, predicting that dicts of one kind list their keys in
/// the same order with the same (memo-shared) key strings: one compare per key when they do.
pub(super) struct KeyCache {
    fields: &'static [&'static str],
    seen: Vec<(Value, u8)>,
}

pub(super) const UNKNOWN: u8 = u8::MAX;

impl KeyCache {
    pub(super) fn new(fields: &'static [&'static str]) -> KeyCache {
        KeyCache {
            fields,
            seen: Vec::new(),
        }
    }

    /// The field number of key `k` at position `pos` of a dict (`UNKNOWN`: none).
    #[inline]
    pub(super) fn field(&mut self, doc: &Document, pos: usize, k: Value) -> u8 {
        if let Some(&(v, f)) = self.seen.get(pos) {
            if v == k {
                return f;
            }
        }
        let f = doc
            .as_str(k)
            .and_then(|s| self.fields.iter().position(|&n| n == s))
            .map_or(UNKNOWN, |i| i as u8);
        if pos < self.seen.len() {
            self.seen[pos] = (k, f);
        } else if pos == self.seen.len() {
            self.seen.push((k, f));
        }
        f
    }
}

pub(super) const SEG_FIELDS: &[&str] = &[
    "device",
    "address",
    "total_size",
    "stream",
    "segment_type",
    "segment_pool_id",
    "is_expandable",
    "allocated_size",
    "active_size",
    "requested_size",
    "frames",
    "blocks",
];
pub(super) const BLOCK_FIELDS: &[&str] = &[
    "address",
    "size",
    "requested_size",
    "state",
    "frames",
    "history",
];
/// The keys of a trace event memtrack reads (the `F_*` numbers below index it).
pub(super) const EVENT_FIELDS: &[&str] = &[
    "action",
    "addr",
    "size",
    "stream",
    "time_us",
    "frames",
    "device_free",
    "user_metadata",
    "compile_context",
];
pub(super) const FRAME_FIELDS: &[&str] = &["filename", "name", "line"];

// positions in EVENT_FIELDS
pub(super) const F_ACTION: u8 = 0;
pub(super) const F_ADDR: u8 = 1;
pub(super) const F_SIZE: u8 = 2;
pub(super) const F_STREAM: u8 = 3;
pub(super) const F_TIME: u8 = 4;
pub(super) const F_FRAMES: u8 = 5;
pub(super) const F_DEVICE_FREE: u8 = 6;
pub(super) const F_USER_METADATA: u8 = 7;
pub(super) const F_COMPILE_CONTEXT: u8 = 8;

/// An event's `action` named `name`.
pub(super) fn set_action(name: &str, e: &mut TraceEvent, aux: &mut EventAux) {
    let a = Action::from_name(name);
    aux.action_name = (a == Action::Other).then(|| name.to_string());
    e.action = a;
}

/// An event's `user_metadata` or `compile_context` string (empty and "N/A" say nothing).
/// Inlined: every event of a real capture has both, and they rarely say anything.
#[inline(always)]
pub(super) fn set_text_field(field: u8, s: &str, aux: &mut EventAux) {
    match field {
        F_USER_METADATA if !s.is_empty() => aux.user_metadata = Some(s.to_string()),
        F_COMPILE_CONTEXT if !s.is_empty() && s != "N/A" => {
            aux.compile_context = Some(s.to_string())
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_cache_predicts_and_recovers() {
        let doc = crate::pickle::parse(b"\x80\x04]\x94(\x8c\x01a\x94\x8c\x01b\x94e.").unwrap();
        let items = doc.as_seq(doc.root()).unwrap().to_vec();
        let mut kc = KeyCache::new(&["b", "a"]);
        assert_eq!(kc.field(&doc, 0, items[0]), 1);
        assert_eq!(kc.field(&doc, 0, items[0]), 1);
        assert_eq!(kc.field(&doc, 0, items[1]), 0);
        assert_eq!(kc.field(&doc, 5, items[1]), 0);
    }
}
