//! The origins of allocations, numbered as first seen, and what the grouping reads of each.

use rustc_hash::FxHashMap;

use crate::model::snapshot::StackId;

use super::super::categories::Judgement;
use super::super::sites::Extra;

/// The origins of allocations (by site), numbered as first seen: what allocated them, and
/// only what of the rest the grouping reads. By the stack alone (the common case) an origin
/// is found by indexing a table by stack id: no hashing per allocation.
pub(super) struct OriginIds {
    /// (stack, extra, judgement) of each origin (the judgement when categories are asked for).
    pub(super) origins: Vec<(StackId, u32, Option<Judgement>)>,
    pub(super) key: OriginKey,
}

/// How an origin is found.
pub(super) enum OriginKey {
    /// By the stack alone: the origin of stack slot `s` (see `slot`) at `s`.
    Stack(Vec<u32>),
    /// By the stack, what the allocation carried and, if `judged`, its judgement.
    Keyed {
        map: FxHashMap<(StackId, u32, Option<Judgement>), u32>,
        judged: bool,
    },
}

/// The index of `stack` in tables by stack: 0 for no stack.
#[inline]
pub(super) fn slot(stack: StackId) -> usize {
    if stack.is_missing() {
        0
    } else {
        stack.0 as usize + 1
    }
}

/// `table[i]`, the table grown with `fill` if short.
#[inline]
pub(super) fn at<T: Copy>(table: &mut Vec<T>, i: usize, fill: T) -> &mut T {
    if i >= table.len() {
        table.resize(i + 1, fill);
    }
    &mut table[i]
}

impl OriginIds {
    /// For a grouping keeping `extra` and, if `judged`, each allocation's judgement, over
    /// `stacks` stack ids.
    pub(super) fn new(extra: &Extra, judged: bool, stacks: usize) -> OriginIds {
        let key = match (extra, judged) {
            (Extra::Nothing, false) => OriginKey::Stack(vec![u32::MAX; stacks + 1]),
            _ => OriginKey::Keyed {
                map: FxHashMap::default(),
                judged,
            },
        };
        OriginIds {
            origins: Vec::new(),
            key,
        }
    }

    /// The origin of an allocation made at `stack`, carrying `extra`, judged `judged`.
    #[inline]
    pub(super) fn id(&mut self, stack: StackId, extra: u32, judged: Option<Judgement>) -> u32 {
        let next = self.origins.len() as u32;
        let (id, judged) = match &mut self.key {
            OriginKey::Stack(table) => (at(table, slot(stack), u32::MAX), None),
            OriginKey::Keyed { map, judged: keep } => {
                let judged = judged.filter(|_| *keep);
                (
                    map.entry((stack, extra, judged)).or_insert(u32::MAX),
                    judged,
                )
            }
        };
        if *id == u32::MAX {
            *id = next;
            self.origins.push((stack, extra, judged));
        }
        *id
    }
}

/// Of one origin's (or site's) allocations: the area they cover on the picture, how many there
/// are, and the first (the lowest id).
#[derive(Clone, Copy)]
pub(super) struct OriginStats {
    pub(super) area: f64,
    pub(super) count: u64,
    pub(super) first: u32,
}

impl Default for OriginStats {
    fn default() -> OriginStats {
        OriginStats {
            area: 0.0,
            count: 0,
            first: u32::MAX,
        }
    }
}
