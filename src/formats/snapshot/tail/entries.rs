//! What the tail's reader leaves for the main reading to decide: its memo entries, the
//! references to check and the strings to resolve, each packed small (a large tail makes
//! millions).

/// What a memo entry of the tail holds, as the main reading will store it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    Event,
    /// A frame list, with the tail's stack of it (readings with stacks; else 0).
    FrameList(u32),
    /// `texts[i]`.
    Text(u32),
    /// A frame dict or anything inside one (only their presence matters without stacks).
    Unread,
}

/// An [`Entry`] in 4 bytes (a large tail makes millions): the kind in the top two bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packed(u32);

impl Packed {
    const PAYLOAD: u32 = (1 << 30) - 1;

    pub(super) fn new(e: Entry) -> Option<Packed> {
        let (kind, payload) = match e {
            Entry::Event => (0, 0),
            Entry::FrameList(k) => (1, k),
            Entry::Text(i) => (2, i),
            Entry::Unread => (3, 0),
        };
        (payload <= Self::PAYLOAD).then_some(Packed(kind << 30 | payload))
    }

    pub fn get(self) -> Entry {
        let payload = self.0 & Self::PAYLOAD;
        match self.0 >> 30 {
            0 => Entry::Event,
            1 => Entry::FrameList(payload),
            2 => Entry::Text(payload),
            _ => Entry::Unread,
        }
    }
}

/// A reference to check when the first id is known, in 8 bytes: the id (a memo reference
/// holds 32 bits), the entries the tail had made before it (the memo then held `first id +
/// entries`) and whether it is an event's `frames` (a frame list) or a frame of a list.
#[derive(Clone, Copy, Debug)]
pub struct Check(u64);

impl Check {
    pub(super) fn new(id: u32, entries: u32, frame_list: bool) -> Option<Check> {
        (entries < 1 << 31).then_some(Check(
            id as u64 | (entries as u64) << 32 | (frame_list as u64) << 63,
        ))
    }

    pub fn id(self) -> u64 {
        self.0 & 0xFFFF_FFFF
    }

    pub fn entries(self) -> u32 {
        (self.0 >> 32) as u32 & 0x7FFF_FFFF
    }

    pub fn frame_list(self) -> bool {
        self.0 >> 63 == 1
    }
}

/// A string value the tail fetched by a reference it was not told of.
#[derive(Clone, Copy, Debug)]
pub struct Deferred {
    /// Index of the event in the tail.
    pub event: u32,
    pub field: u8,
    pub id: u64,
    pub entries: u32,
}
