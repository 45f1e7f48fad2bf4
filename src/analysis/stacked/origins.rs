//! The origins of allocations, numbered as first seen, and what the grouping reads of each.

use rustc_hash::FxHashMap;

use crate::model::snapshot::StackId;

use super::super::groups::Grouper;
use super::super::sites::Extra;

/// The origins of allocations (by site), numbered as first seen: what allocated them, and
/// only what of the rest the grouping reads. By the stack alone (the common case) or by the
/// stack and how the allocation ended (categories), an origin is found by indexing a table
/// by stack id: no hashing per allocation.
pub(super) struct OriginIds {
    /// (stack, extra, freed_by) of each origin (for lifetimes, the first freeing stack of its
    /// kind: the category reads only whether it is backward's).
    pub(super) origins: Vec<(StackId, u32, Option<StackId>)>,
    pub(super) key: OriginKey,
}

/// How an origin is found.
pub(super) enum OriginKey {
    /// By the stack alone: the origin of stack slot `s` (see `slot`) at `s`.
    Stack(Vec<u32>),
    /// By the stack and how the allocation ended (live to the end, freed by backward, freed
    /// otherwise: 0, 1, 2): the origin at `3 s + ended`. `backward[s]`: whether stack slot
    /// `s` is backward's (0: not read yet, 1: it is, 2: it is not).
    Lifetime { table: Vec<u32>, backward: Vec<u8> },
    /// By the stack, what the allocation carried and, if `lifetimes`, the freeing stack.
    Keyed {
        map: FxHashMap<(StackId, u32, Option<StackId>), u32>,
        lifetimes: bool,
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
    /// For a grouping keeping `extra` and, if `lifetimes`, how each allocation ended, over
    /// `stacks` stack ids.
    pub(super) fn new(extra: &Extra, lifetimes: bool, stacks: usize) -> OriginIds {
        let key = match (extra, lifetimes) {
            (Extra::Nothing, false) => OriginKey::Stack(vec![u32::MAX; stacks + 1]),
            (Extra::Nothing, true) => OriginKey::Lifetime {
                table: vec![u32::MAX; 3 * (stacks + 1)],
                backward: vec![0; stacks + 1],
            },
            _ => OriginKey::Keyed {
                map: FxHashMap::default(),
                lifetimes,
            },
        };
        OriginIds {
            origins: Vec::new(),
            key,
        }
    }

    /// The origin of an allocation made at `stack`, carrying `extra`, freed at `freed_by`
    /// (`grouper` tells which stacks are backward's).
    #[inline]
    pub(super) fn id(
        &mut self,
        stack: StackId,
        extra: u32,
        freed_by: Option<StackId>,
        grouper: &mut Grouper,
    ) -> u32 {
        let next = self.origins.len() as u32;
        let (id, freed_by) = match &mut self.key {
            OriginKey::Stack(table) => (at(table, slot(stack), u32::MAX), None),
            OriginKey::Lifetime { table, backward } => {
                let ended = match freed_by {
                    None => 0,
                    Some(f) => {
                        let b = at(backward, slot(f), 0);
                        if *b == 0 {
                            *b = if grouper.is_backward(f) { 1 } else { 2 };
                        }
                        *b as usize
                    }
                };
                (at(table, 3 * slot(stack) + ended, u32::MAX), freed_by)
            }
            OriginKey::Keyed { map, lifetimes } => {
                let freed_by = freed_by.filter(|_| *lifetimes);
                (
                    map.entry((stack, extra, freed_by)).or_insert(u32::MAX),
                    freed_by,
                )
            }
        };
        if *id == u32::MAX {
            *id = next;
            self.origins.push((stack, extra, freed_by));
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
