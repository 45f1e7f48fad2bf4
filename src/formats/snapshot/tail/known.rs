//! The strings of the memo the main reading had stored when it started the tail's reader,
//! looked up for every key and value of every event.

use rustc_hash::FxHashMap;

use crate::model::snapshot::Action;

use super::super::fields::{EVENT_FIELDS, UNKNOWN};

/// Strings of the memo the main reading had stored when it started this reader (the event
/// keys and action names, fetched by reference in every event).
#[derive(Clone)]
pub struct Known {
    ids: FxHashMap<u64, u32>,
    /// A direct-mapped front to `ids`, looked up for every key and value of every event (a
    /// few dozen ids): each id goes to the slot its hash picks if that slot is still free,
    /// else to `ids` only, so a slot that is free means the id is not known. A slot holds the
    /// field the string names too, saving a key a second lookup.
    front: Box<[FrontSlot; FRONT_SLOTS]>,
    pub(super) texts: Vec<Box<str>>,
    /// Of each text: the event field it names as a key, the action it names as a value.
    fields: Vec<u8>,
    pub(super) actions: Vec<Action>,
    /// Memo id of the string "action": an event's first key, how a start is recognized.
    action_key: Option<u64>,
}

/// A known id, its index in `texts` and the event field it names.
#[derive(Clone, Copy)]
struct FrontSlot {
    id: u64,
    text: u32,
    field: u8,
}

const FRONT_SLOTS: usize = 256;
/// A free slot of `Known::front` (no memo id is this large).
const FREE: u64 = u64::MAX;

fn front_slot(id: u64) -> usize {
    (id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as usize
}

impl Default for Known {
    fn default() -> Self {
        Known {
            ids: FxHashMap::default(),
            front: Box::new(
                [FrontSlot {
                    id: FREE,
                    text: 0,
                    field: UNKNOWN,
                }; FRONT_SLOTS],
            ),
            texts: Vec::new(),
            fields: Vec::new(),
            actions: Vec::new(),
            action_key: None,
        }
    }
}

impl Known {
    pub fn insert(&mut self, id: u64, text: &str) {
        if id == FREE || self.ids.contains_key(&id) {
            return;
        }
        if text == "action" {
            self.action_key = Some(id);
        }
        let i = self.texts.len() as u32;
        let field = field_named(text);
        let slot = &mut self.front[front_slot(id)];
        if slot.id == FREE {
            *slot = FrontSlot { id, text: i, field };
        }
        self.ids.insert(id, i);
        self.texts.push(text.into());
        self.fields.push(field);
        self.actions.push(Action::from_name(text));
    }

    pub fn contains(&self, id: u64) -> bool {
        self.index(id).is_some()
    }

    /// Which known string memo id `id` is, and the event field it names.
    #[inline(always)]
    pub(super) fn index(&self, id: u64) -> Option<(u32, u8)> {
        match self.front[front_slot(id)] {
            FrontSlot { id: FREE, .. } => None,
            FrontSlot { id: k, text, field } if k == id => Some((text, field)),
            _ => self.ids.get(&id).map(|&i| (i, self.fields[i as usize])),
        }
    }

    /// What a reference to memo id `id` reads as: a known string, or a reference to resolve.
    #[inline(always)]
    pub(super) fn val_of(&self, id: u64) -> Val {
        match self.index(id) {
            Some((i, field)) => Val::Known(i, field),
            None => Val::Ref(id),
        }
    }

    /// The strings of the ids below `end` only.
    pub fn below(&self, end: u64) -> Known {
        let mut known = Known::default();
        for (id, text) in self.iter().filter(|&(id, _)| id < end) {
            known.insert(id, text);
        }
        known
    }

    /// Each known id with its string.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &str)> {
        self.ids
            .iter()
            .map(|(&id, &i)| (id, &*self.texts[i as usize]))
    }

    /// The first offset at or after `from` (within `limit` bytes) whose bytes read as the
    /// start of an event: `}` MEMOIZE `(` then a reference to "action".
    pub fn event_start(&self, data: &[u8], from: usize, limit: usize) -> Option<usize> {
        let key = self.action_key?;
        let end = data.len().min(from.saturating_add(limit));
        let mut at = from;
        while at < end {
            at += data[at..end].iter().position(|&b| b == b'}')?;
            let id = match &data[at..] {
                [b'}', 0x94, b'(', b'h', a, ..] => Some(*a as u64),
                [b'}', 0x94, b'(', b'j', a, b, c, d, ..] => {
                    Some(u32::from_le_bytes([*a, *b, *c, *d]) as u64)
                }
                _ => None,
            };
            if id == Some(key) {
                return Some(at);
            }
            at += 1;
        }
        None
    }
}

/// The event field `name` is the key of.
pub(super) fn field_named(name: &str) -> u8 {
    EVENT_FIELDS
        .iter()
        .position(|&f| f == name)
        .map_or(UNKNOWN, |f| f as u8)
}

/// A value of an event as the tail decodes it.
#[derive(Clone, Copy)]
pub(super) enum Val {
    Int(i64),
    Float(f64),
    None,
    Bool(bool),
    /// A known string (`Known::texts`) and the event field it names.
    Known(u32, u8),
    /// One of the tail's own strings.
    Own(u32),
    /// A reference to something the tail was not told of.
    Ref(u64),
}
