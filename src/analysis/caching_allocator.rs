//! A model of PyTorch's CUDA caching allocator (`c10/cuda/CUDACachingAllocator.cpp`, settings
//! from `c10/core/AllocatorConfig.*`), for replaying a snapshot's trace under other settings.
//!
//! What is modelled, with the allocator's own names: small (≤ 1 MiB) and large pools per stream;
//! `round_size` with `roundup_power2_divisions`; segment sizes (`get_allocation_size`);
//! best-fit search ordered by (stream, size, address) (`get_free_block`, with its
//! `max_split_size` / `max_non_split_rounding_size` rejections and its expandable-size walk);
//! `should_split`; merging freed neighbours (`free_block`, `try_merge_blocks`);
//! `release_available_cached_blocks` and `release_cached_blocks` before an OOM; the garbage
//! collection threshold; expandable segments (2 MiB / 20 MiB pages, `find_expandable_block`,
//! `map_block`, `unmap_block`). A freed block returns to the pool at `free_completed`, which
//! the trace says. Not modelled: CUDA graphs' private pools, events between streams (the trace's
//! `free_completed` stands for them), IPC, `release_lock_on_cudamalloc`.
//!
//! Addresses are the model's own: a new segment gets the next free range of a private address
//! space, so only sizes and positions compare with a real run, never addresses.

use std::collections::BTreeSet;

use serde::Serialize;

pub const MIN_BLOCK_SIZE: u64 = 512;
/// Largest request served by the small pool.
pub const SMALL_SIZE: u64 = 1 << 20;
/// Small segments, and the page size of small expandable segments.
pub const SMALL_BUFFER: u64 = 2 << 20;
/// Segments for requests between 1 and 10 MiB, and the page of large expandable segments.
pub const LARGE_BUFFER: u64 = 20 << 20;
pub const MIN_LARGE_ALLOC: u64 = 10 << 20;
pub const ROUND_LARGE: u64 = 2 << 20;
/// `roundup_power2_divisions` has one entry per power of two from 1 MiB to 32 GiB.
pub const ROUNDUP_INTERVALS: usize = 16;

/// What is wrong with one `KEY:VALUE` item of a `PYTORCH_CUDA_ALLOC_CONF` string; each
/// message starts with the item as given.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SettingError {
    /// No `:` between a key and a value.
    #[error("`{item}`: expected KEY:VALUE, e.g. expandable_segments:True")]
    NotKeyValue {
        /// The item as given.
        item: String,
    },
    /// A `*_mb` setting whose value is not a whole number.
    #[error("`{item}`: {key} takes a whole number of MiB")]
    NotWholeMib {
        /// The item as given.
        item: String,
        /// The setting's name.
        key: String,
    },
    /// `max_split_size_mb` at or below 20 (the allocator's large buffer), which PyTorch
    /// refuses too.
    #[error("`{item}`: max_split_size_mb must be above 20")]
    MaxSplitTooSmall {
        /// The item as given.
        item: String,
    },
    /// `expandable_segments` other than True/False (or true/false, 1/0).
    #[error("`{item}`: expandable_segments is True or False")]
    NotBool {
        /// The item as given.
        item: String,
    },
    /// `garbage_collection_threshold` that is not a number.
    #[error("`{item}`: expected a number")]
    NotANumber {
        /// The item as given.
        item: String,
    },
    /// `garbage_collection_threshold` outside (0, 1).
    #[error("`{item}`: garbage_collection_threshold must be between 0.0 and 1.0")]
    ThresholdOutOfRange {
        /// The item as given.
        item: String,
    },
    /// A `roundup_power2_divisions` value that does not parse.
    #[error("`{item}`: roundup_power2_divisions {source}")]
    Divisions {
        /// The item as given.
        item: String,
        /// What is wrong in the value.
        source: DivisionsError,
    },
    /// A key the model does not know (or does not model).
    #[error(
        "`{item}`: unknown setting {key}; simulate models max_split_size_mb, \
         max_non_split_rounding_mb, roundup_power2_divisions, expandable_segments \
         and garbage_collection_threshold"
    )]
    UnknownSetting {
        /// The item as given.
        item: String,
        /// The key as given (trimmed).
        key: String,
    },
}

/// What is wrong in a `roundup_power2_divisions` value (`4` or `[256:1,512:2,>:8]`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DivisionsError {
    /// A division count that is not a number (the text as given).
    #[error("`{0}` is not a number")]
    NotANumber(String),
    /// A division count or an interval's size in MiB that is not a power of two.
    #[error("{0} is not a power of two")]
    NotPowerOfTwo(u64),
    /// A list item without `:` (the item as given).
    #[error("item `{0}` is not SIZE_MB:DIVISIONS")]
    NotSizeDivisions(String),
    /// A list key that is neither `>` nor a number (the key as given).
    #[error("`{0}` is not a size in MiB")]
    NotASize(String),
}

/// The settings that change what the allocator does (`PYTORCH_CUDA_ALLOC_CONF`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Settings {
    /// `max_split_size_mb` in bytes; `None` is unlimited (the default).
    pub max_split_size: Option<u64>,
    /// `max_non_split_rounding_mb` in bytes (default 20 MiB).
    pub max_non_split_rounding_size: u64,
    /// Divisions per power-of-two interval, 1 MiB ... ≥ 32 GiB; 0 and 1 mean no rounding.
    pub roundup_power2_divisions: [u32; ROUNDUP_INTERVALS],
    pub expandable_segments: bool,
    /// Fraction of the memory limit above which cached blocks are freed; 0 is off.
    pub garbage_collection_threshold: f64,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            max_split_size: None,
            max_non_split_rounding_size: LARGE_BUFFER,
            roundup_power2_divisions: [0; ROUNDUP_INTERVALS],
            expandable_segments: false,
            garbage_collection_threshold: 0.0,
        }
    }
}

impl Settings {
    fn max_split(&self) -> u64 {
        self.max_split_size.unwrap_or(u64::MAX)
    }

    fn divisions(&self, size: u64) -> u64 {
        let log = 63 - size.leading_zeros() as usize;
        let index = log.saturating_sub(20).min(ROUNDUP_INTERVALS - 1);
        self.roundup_power2_divisions[index] as u64
    }

    /// The block size a request gets (`round_size`).
    pub fn round_size(&self, size: u64) -> u64 {
        if size < MIN_BLOCK_SIZE {
            return MIN_BLOCK_SIZE;
        }
        let divisions = self.divisions(size);
        if divisions > 1 && size > MIN_BLOCK_SIZE * divisions {
            roundup_power2_next_division(size, divisions)
        } else {
            size.div_ceil(MIN_BLOCK_SIZE) * MIN_BLOCK_SIZE
        }
    }

    /// Apply a `PYTORCH_CUDA_ALLOC_CONF` string: `KEY:VALUE` items separated by commas (those
    /// inside a `[...]` list belong to it).
    pub fn apply_all(&mut self, conf: &str) -> Result<(), SettingError> {
        let mut depth = 0i32;
        let mut start = 0;
        for (i, c) in conf.char_indices().chain([(conf.len(), ',')]) {
            match c {
                '[' => depth += 1,
                ']' => depth -= 1,
                // the end always closes an item, so an unclosed list is an error, not ignored
                ',' if depth <= 0 || i == conf.len() => {
                    let item = conf[start..i.min(conf.len())].trim();
                    if !item.is_empty() {
                        self.apply(item)?;
                    }
                    start = i + 1;
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Apply one `KEY:VALUE` of `PYTORCH_CUDA_ALLOC_CONF` syntax.
    pub fn apply(&mut self, item: &str) -> Result<(), SettingError> {
        let (key, value) = item
            .split_once(':')
            .ok_or_else(|| SettingError::NotKeyValue { item: item.into() })?;
        let (key, value) = (key.trim(), value.trim());
        let mb = |v: &str| -> Result<u64, SettingError> {
            v.parse::<u64>().map_err(|_| SettingError::NotWholeMib {
                item: item.into(),
                key: key.into(),
            })
        };
        match key {
            "max_split_size_mb" => {
                let m = mb(value)?;
                // the allocator refuses values below its large buffer (20 MiB) the same way
                if m * (1 << 20) <= LARGE_BUFFER {
                    return Err(SettingError::MaxSplitTooSmall { item: item.into() });
                }
                self.max_split_size = Some(m << 20);
            }
            "max_non_split_rounding_mb" => self.max_non_split_rounding_size = mb(value)? << 20,
            "expandable_segments" => {
                self.expandable_segments = match value {
                    "True" | "true" | "1" => true,
                    "False" | "false" | "0" => false,
                    _ => return Err(SettingError::NotBool { item: item.into() }),
                }
            }
            "garbage_collection_threshold" => {
                let t: f64 = value
                    .parse()
                    .map_err(|_| SettingError::NotANumber { item: item.into() })?;
                if !(t > 0.0 && t < 1.0) {
                    return Err(SettingError::ThresholdOutOfRange { item: item.into() });
                }
                self.garbage_collection_threshold = t;
            }
            "roundup_power2_divisions" => {
                self.roundup_power2_divisions =
                    parse_divisions(value).map_err(|source| SettingError::Divisions {
                        item: item.into(),
                        source,
                    })?
            }
            _ => {
                return Err(SettingError::UnknownSetting {
                    item: item.into(),
                    key: key.into(),
                })
            }
        }
        Ok(())
    }

    /// `PYTORCH_CUDA_ALLOC_CONF` spelling of what differs from the defaults ("default" if nothing).
    pub fn describe(&self) -> String {
        let d = Settings::default();
        let mut parts = Vec::new();
        if self.expandable_segments {
            parts.push("expandable_segments:True".to_string());
        }
        if let Some(m) = self.max_split_size {
            parts.push(format!("max_split_size_mb:{}", m >> 20));
        }
        if self.max_non_split_rounding_size != d.max_non_split_rounding_size {
            parts.push(format!(
                "max_non_split_rounding_mb:{}",
                self.max_non_split_rounding_size >> 20
            ));
        }
        let div = &self.roundup_power2_divisions;
        if div != &d.roundup_power2_divisions {
            if div.iter().all(|&x| x == div[0]) {
                parts.push(format!("roundup_power2_divisions:{}", div[0]));
            } else {
                let items: Vec<String> = div
                    .iter()
                    .enumerate()
                    .map(|(i, x)| format!("{}:{x}", 1u64 << i))
                    .collect();
                parts.push(format!("roundup_power2_divisions:[{}]", items.join(",")));
            }
        }
        if self.garbage_collection_threshold > 0.0 {
            parts.push(format!(
                "garbage_collection_threshold:{}",
                self.garbage_collection_threshold
            ));
        }
        if parts.is_empty() {
            "default".into()
        } else {
            parts.join(",")
        }
    }

    /// The settings a snapshot's `allocator_settings` records (unknown keys are ignored).
    pub fn from_recorded(items: &[(String, serde_json::Value)]) -> Settings {
        let mut s = Settings::default();
        for (k, v) in items {
            match (k.as_str(), v) {
                ("expandable_segments", serde_json::Value::Bool(b)) => s.expandable_segments = *b,
                ("max_split_size", v) => {
                    s.max_split_size = v.as_i64().filter(|&m| m > 0).map(|m| m as u64)
                }
                ("max_non_split_rounding_size", v) => {
                    if let Some(m) = v.as_u64() {
                        s.max_non_split_rounding_size = m;
                    }
                }
                ("garbage_collection_threshold", v) => {
                    s.garbage_collection_threshold = v.as_f64().unwrap_or(0.0)
                }
                ("roundup_power2_divisions", serde_json::Value::Object(m)) => {
                    // keyed by the interval's start in MiB
                    for (mib, d) in m {
                        if let (Ok(mib), Some(d)) = (mib.parse::<u64>(), d.as_u64()) {
                            if mib.is_power_of_two() {
                                let i = (mib.trailing_zeros() as usize).min(ROUNDUP_INTERVALS - 1);
                                s.roundup_power2_divisions[i] = d as u32;
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        s
    }
}

/// `roundup_power2_divisions:4` (every interval) or `[256:1,512:2,>:8]` (keys in MiB, powers of
/// two; intervals before the first key take its value, `>` fills every interval after the last).
fn parse_divisions(v: &str) -> Result<[u32; ROUNDUP_INTERVALS], DivisionsError> {
    let check = |d: &str| -> Result<u32, DivisionsError> {
        let d: u32 = d
            .trim()
            .parse()
            .map_err(|_| DivisionsError::NotANumber(d.into()))?;
        if d != 0 && !d.is_power_of_two() {
            return Err(DivisionsError::NotPowerOfTwo(d.into()));
        }
        Ok(d)
    };
    let mut out = [0u32; ROUNDUP_INTERVALS];
    let Some(list) = v.strip_prefix('[').and_then(|v| v.strip_suffix(']')) else {
        out = [check(v)?; ROUNDUP_INTERVALS];
        return Ok(out);
    };
    let mut last: Option<usize> = None;
    for item in list.split(',') {
        let (k, d) = item
            .split_once(':')
            .ok_or_else(|| DivisionsError::NotSizeDivisions(item.into()))?;
        let d = check(d)?;
        if k.trim() == ">" {
            let from = last.map_or(0, |l| l + 1);
            out[from.min(ROUNDUP_INTERVALS)..].fill(d);
            continue;
        }
        let mib: u64 = k
            .trim()
            .parse()
            .map_err(|_| DivisionsError::NotASize(k.into()))?;
        if !mib.is_power_of_two() {
            return Err(DivisionsError::NotPowerOfTwo(mib));
        }
        let i = (mib.trailing_zeros() as usize).min(ROUNDUP_INTERVALS - 1);
        if last.is_none() {
            out[..i].fill(d);
        }
        out[i] = d;
        last = Some(i);
    }
    Ok(out)
}

fn roundup_power2_next_division(size: u64, divisions: u64) -> u64 {
    if size.is_power_of_two() {
        return size;
    }
    let floor = 1u64 << (63 - size.leading_zeros());
    let step = floor >> (63 - divisions.leading_zeros());
    if step == 0 {
        return floor << 1;
    }
    let rounded = size & !(step - 1);
    if rounded == size {
        size
    } else {
        rounded + step
    }
}

/// `get_allocation_size`: the segment a request that found no cached block creates.
pub fn allocation_size(size: u64) -> u64 {
    if size <= SMALL_SIZE {
        SMALL_BUFFER
    } else if size < MIN_LARGE_ALLOC {
        LARGE_BUFFER
    } else {
        size.div_ceil(ROUND_LARGE) * ROUND_LARGE
    }
}

/// A segment event the model performs (what the allocator writes to its trace).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SegmentAction {
    SegmentAlloc,
    SegmentFree,
    SegmentMap,
    SegmentUnmap,
}

impl SegmentAction {
    pub fn name(self) -> &'static str {
        match self {
            SegmentAction::SegmentAlloc => "segment_alloc",
            SegmentAction::SegmentFree => "segment_free",
            SegmentAction::SegmentMap => "segment_map",
            SegmentAction::SegmentUnmap => "segment_unmap",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentEvent {
    pub action: SegmentAction,
    pub size: u64,
}

/// A block handle.
pub type BlockId = u32;
const NONE: BlockId = u32::MAX;

#[derive(Clone, Copy, Debug)]
struct Node {
    addr: u64,
    size: u64,
    requested: u64,
    stream: u64,
    prev: BlockId,
    next: BlockId,
    /// Index into `segments`.
    segment: u32,
    small: bool,
    allocated: bool,
    /// Freed by the program, not yet returned to the pool (`free_completed` to come).
    pending: bool,
    mapped: bool,
    /// `get_free_blocks_call_count` of its pool when the block last entered the pool.
    gc_base: u64,
}

#[derive(Clone, Copy, Debug)]
struct SegmentInfo {
    base: u64,
    /// Page size for expandable segments, 0 for cudaMalloc'd ones.
    page: u64,
    alive: bool,
}

#[derive(Default)]
struct Pool {
    /// Free mapped blocks: (stream, size, address, id), the allocator's `BlockComparatorSize`.
    blocks: BTreeSet<(u64, u64, u64, BlockId)>,
    /// Unmapped ranges of expandable segments: (stream, address, id).
    unmapped: BTreeSet<(u64, u64, BlockId)>,
    get_free_blocks_calls: u64,
}

/// A segment as `torch.cuda.memory_snapshot()` would list it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentView {
    pub small: bool,
    pub expandable: bool,
    pub size: u64,
}

/// The allocator of one device.
pub struct Allocator {
    pub settings: Settings,
    /// The most bytes segments may hold (`set_per_process_memory_fraction`'s
    /// `allowed_memory_maximum`, or the device's memory); `None` is unlimited.
    pub limit: Option<u64>,
    nodes: Vec<Node>,
    free_nodes: Vec<BlockId>,
    segments: Vec<SegmentInfo>,
    pools: [Pool; 2],
    next_address: u64,
    /// Segment bytes (cudaMalloc'd plus mapped pages).
    pub reserved: u64,
    /// Bytes of allocated blocks (rounded sizes).
    pub allocated: u64,
    /// Bytes requested by live allocations.
    pub requested: u64,
    /// Blocks freed by the program and not yet returned to the pool.
    pub pending_bytes: u64,
    /// cudaMalloc calls plus expandable page mappings.
    pub segments_created: u64,
    pub num_alloc_retries: u64,
    /// Segment events since the last `take_segment_events`.
    events: Vec<SegmentEvent>,
    /// Where the next cudaMalloc of this size lands (a replay passes the recorded address, so
    /// that best-fit ties between equal blocks break as they did on the device).
    pub address_hint: Option<(u64, u64)>,
}

/// Address space of one expandable segment: far more than any device holds, as the
/// allocator reserves 1.125 times the device's memory.
const EXPANDABLE_RESERVATION: u64 = 1 << 42;

impl Allocator {
    pub fn new(settings: Settings, limit: Option<u64>) -> Allocator {
        Allocator {
            settings,
            limit,
            nodes: Vec::new(),
            free_nodes: Vec::new(),
            segments: Vec::new(),
            pools: [Pool::default(), Pool::default()],
            // above any real device address, so segments placed from a file never collide
            next_address: 1 << 56,
            reserved: 0,
            allocated: 0,
            requested: 0,
            pending_bytes: 0,
            segments_created: 0,
            num_alloc_retries: 0,
            events: Vec::new(),
            address_hint: None,
        }
    }

    pub fn take_segment_events(&mut self) -> std::vec::Drain<'_, SegmentEvent> {
        self.events.drain(..)
    }

    pub fn has_segment_events(&self) -> bool {
        !self.events.is_empty()
    }

    fn gc_enabled(&self) -> bool {
        self.limit.is_some() && self.settings.garbage_collection_threshold > 0.0
    }

    fn new_node(&mut self, n: Node) -> BlockId {
        match self.free_nodes.pop() {
            Some(id) => {
                self.nodes[id as usize] = n;
                id
            }
            None => {
                self.nodes.push(n);
                (self.nodes.len() - 1) as BlockId
            }
        }
    }

    fn pool_of(&self, id: BlockId) -> usize {
        usize::from(!self.nodes[id as usize].small)
    }

    fn insert_free(&mut self, id: BlockId) {
        let p = self.pool_of(id);
        let calls = self.pools[p].get_free_blocks_calls;
        let n = &mut self.nodes[id as usize];
        n.gc_base = calls;
        let key = (n.stream, n.size, n.addr, id);
        self.pools[p].blocks.insert(key);
    }

    fn remove_free(&mut self, id: BlockId) -> bool {
        let n = self.nodes[id as usize];
        let p = self.pool_of(id);
        self.pools[p].blocks.remove(&(n.stream, n.size, n.addr, id))
    }

    fn insert_unmapped(&mut self, id: BlockId) {
        let n = self.nodes[id as usize];
        let p = self.pool_of(id);
        self.pools[p].unmapped.insert((n.stream, n.addr, id));
    }

    fn remove_unmapped(&mut self, id: BlockId) -> bool {
        let n = self.nodes[id as usize];
        let p = self.pool_of(id);
        self.pools[p].unmapped.remove(&(n.stream, n.addr, id))
    }

    fn is_expandable(&self, id: BlockId) -> bool {
        self.segments[self.nodes[id as usize].segment as usize].page != 0
    }

    fn reserve_address(&mut self, size: u64) -> u64 {
        let a = self.next_address;
        self.next_address += size.div_ceil(LARGE_BUFFER) * LARGE_BUFFER;
        a
    }

    /// Put an existing segment in place (the state before a trace's first event): `blocks` are
    /// (address, size, requested, pending) of its active blocks; the gaps between are free.
    pub fn place_segment(
        &mut self,
        address: u64,
        size: u64,
        stream: u64,
        small: bool,
        blocks: &[(u64, u64, u64, bool)],
    ) -> Vec<(u64, BlockId)> {
        let segment = self.segments.len() as u32;
        self.segments.push(SegmentInfo {
            base: address,
            page: 0,
            alive: true,
        });
        self.reserved += size;
        let mut placed = Vec::new();
        let mut at = address;
        let end = address + size;
        let mut prev = NONE;
        let mut push = |me: &mut Allocator, addr: u64, size: u64, active: Option<(u64, bool)>| {
            let id = me.new_node(Node {
                addr,
                size,
                requested: active.map_or(0, |a| a.0),
                stream,
                prev,
                next: NONE,
                segment,
                small,
                allocated: active.is_some_and(|a| !a.1),
                pending: active.is_some_and(|a| a.1),
                mapped: true,
                gc_base: 0,
            });
            if prev != NONE {
                me.nodes[prev as usize].next = id;
            }
            prev = id;
            match active {
                None => me.insert_free(id),
                Some((req, pending)) => {
                    if pending {
                        me.pending_bytes += size;
                    } else {
                        me.allocated += size;
                        me.requested += req;
                    }
                }
            }
            id
        };
        for &(a, s, req, pending) in blocks {
            if a < at || a + s > end {
                continue; // overlapping or outside: the file's blocks disagree; leave it out
            }
            if a > at {
                push(self, at, a - at, None);
            }
            let id = push(self, a, s, Some((req, pending)));
            placed.push((a, id));
            at = a + s;
        }
        if at < end {
            push(self, at, end - at, None);
        }
        placed
    }

    /// `malloc`: a block for `size` bytes on `stream`, or `None` where the allocator raises
    /// an out-of-memory error.
    pub fn malloc(&mut self, size: u64, stream: u64) -> Option<BlockId> {
        let orig = size;
        let size = self.settings.round_size(size);
        let small = size <= SMALL_SIZE;
        let alloc_size = allocation_size(size);
        let mut block = self.get_free_block(small, stream, size);
        if block.is_none() {
            if self.gc_enabled() {
                self.garbage_collect();
            }
            block = self.alloc_block(small, stream, size, alloc_size, false);
            if block.is_none() && self.release_available_cached_blocks(small, stream, size) {
                block = self.alloc_block(small, stream, size, alloc_size, false);
            }
            if block.is_none() {
                self.release_cached_blocks();
                block = self.alloc_block(small, stream, size, alloc_size, true);
            }
        }
        let id = block?;
        let split = self.should_split(id, size);
        Some(self.alloc_found_block(id, size, orig, split))
    }

    fn should_split(&self, id: BlockId, size: u64) -> bool {
        let n = &self.nodes[id as usize];
        let remaining = n.size - size;
        if n.small || self.settings.expandable_segments {
            remaining >= MIN_BLOCK_SIZE
        } else {
            size < self.settings.max_split() && remaining > SMALL_SIZE
        }
    }

    fn alloc_found_block(&mut self, id: BlockId, size: u64, orig: u64, split: bool) -> BlockId {
        let id = if split {
            let rest = self.nodes[id as usize];
            let new = self.new_node(Node {
                size,
                next: id,
                ..rest
            });
            if rest.prev != NONE {
                self.nodes[rest.prev as usize].next = new;
            }
            let r = &mut self.nodes[id as usize];
            r.prev = new;
            r.addr += size;
            r.size -= size;
            self.insert_free(id);
            new
        } else {
            id
        };
        let n = &mut self.nodes[id as usize];
        n.allocated = true;
        n.pending = false;
        n.requested = orig;
        self.allocated += n.size;
        self.requested += orig;
        id
    }

    fn get_free_block(&mut self, small: bool, stream: u64, size: u64) -> Option<BlockId> {
        let p = usize::from(!small);
        if self.gc_enabled() {
            self.pools[p].get_free_blocks_calls += 1;
        }
        let pool = &self.pools[p];
        let mut it = pool.blocks.range((stream, size, 0, 0)..);
        let mut cur = *it.next()?;
        if cur.0 != stream {
            return None;
        }
        if self.is_expandable(cur.3) {
            if self.settings.expandable_segments {
                // best fit by the size a block can grow to, not the size it has
                let expandable_size = |b: BlockId| {
                    let n = &self.nodes[b as usize];
                    let next = n.next;
                    n.size
                        + if next != NONE && !self.nodes[next as usize].mapped {
                            self.nodes[next as usize].size
                        } else {
                            0
                        }
                };
                for next in it {
                    if !self.is_expandable(cur.3)
                        || next.0 != stream
                        || expandable_size(next.3) >= expandable_size(cur.3)
                    {
                        break;
                    }
                    cur = *next;
                }
            } else {
                // expandable segments turned off after some were made: skip them
                cur = *it.find(|b| b.0 != stream || !self.is_expandable(b.3))?;
                if cur.0 != stream {
                    return None;
                }
            }
        }
        let max_split = self.settings.max_split();
        if size < max_split && cur.1 >= max_split {
            return None; // an oversized block for a small request
        }
        if size >= max_split
            && cur.1 >= size.saturating_add(self.settings.max_non_split_rounding_size)
        {
            return None; // an oversized block for a large request
        }
        self.pools[p].blocks.remove(&cur);
        Some(cur.3)
    }

    fn over_limit(&self, bytes: u64) -> bool {
        self.limit.is_some_and(|l| self.reserved + bytes > l)
    }

    fn alloc_block(
        &mut self,
        small: bool,
        stream: u64,
        size: u64,
        alloc_size: u64,
        is_retry: bool,
    ) -> Option<BlockId> {
        if is_retry {
            self.num_alloc_retries += 1;
        }
        if self.over_limit(alloc_size) {
            return None;
        }
        if self.settings.expandable_segments {
            return self.try_allocate_expandable_block(small, stream, size);
        }
        let addr = match self.address_hint.take() {
            Some((size, addr)) if size == alloc_size => addr,
            _ => self.reserve_address(alloc_size),
        };
        self.reserved += alloc_size;
        self.segments_created += 1;
        self.events.push(SegmentEvent {
            action: SegmentAction::SegmentAlloc,
            size: alloc_size,
        });
        Some(self.new_segment(addr, alloc_size, stream, small, 0))
    }

    /// A new segment (`page` 0: cudaMalloc'd, mapped; else an expandable one, all unmapped)
    /// as one block covering it.
    fn new_segment(
        &mut self,
        addr: u64,
        size: u64,
        stream: u64,
        small: bool,
        page: u64,
    ) -> BlockId {
        let segment = self.segments.len() as u32;
        self.segments.push(SegmentInfo {
            base: addr,
            page,
            alive: true,
        });
        self.new_node(Node {
            addr,
            size,
            requested: 0,
            stream,
            prev: NONE,
            next: NONE,
            segment,
            small,
            allocated: false,
            pending: false,
            mapped: page == 0,
            gc_base: 0,
        })
    }

    fn allocatable(&self, id: BlockId) -> bool {
        id != NONE && {
            let n = &self.nodes[id as usize];
            !n.allocated && !n.pending
        }
    }

    fn find_expandable_block(&mut self, small: bool, stream: u64, size: u64) -> BlockId {
        let p = usize::from(!small);
        let has_room = |me: &Allocator, mut b: BlockId| {
            let mut bytes = 0;
            while bytes < size && me.allocatable(b) {
                bytes += me.nodes[b as usize].size;
                b = me.nodes[b as usize].next;
            }
            bytes >= size
        };
        for &(s, _, id) in self.pools[p].unmapped.range((stream, 0, 0)..) {
            if s != stream {
                break;
            }
            let prev = self.nodes[id as usize].prev;
            let c = if self.allocatable(prev) { prev } else { id };
            if has_room(self, c) {
                return c;
            }
        }
        let page = if small { SMALL_BUFFER } else { LARGE_BUFFER };
        let addr = self.reserve_address(EXPANDABLE_RESERVATION);
        let id = self.new_segment(addr, EXPANDABLE_RESERVATION, stream, small, page);
        self.insert_unmapped(id);
        id
    }

    fn try_allocate_expandable_block(
        &mut self,
        small: bool,
        stream: u64,
        size: u64,
    ) -> Option<BlockId> {
        let mut c = self.find_expandable_block(small, stream, size);
        if !self.nodes[c as usize].mapped {
            let s = self.nodes[c as usize].size.min(size);
            if !self.map_block(c, s) {
                return None;
            }
        }
        while self.nodes[c as usize].size < size {
            let remaining = size - self.nodes[c as usize].size;
            let next = self.nodes[c as usize].next;
            let s = remaining.min(self.nodes[next as usize].size);
            if !self.map_block(next, s) {
                return None;
            }
            c = next;
        }
        self.remove_free(c);
        Some(c)
    }

    fn map_block(&mut self, id: BlockId, size: u64) -> bool {
        let n = self.nodes[id as usize];
        let seg = self.segments[n.segment as usize];
        let first = (n.addr - seg.base) / seg.page;
        let last = (n.addr + size - seg.base).div_ceil(seg.page);
        let mapped = ((last - first) * seg.page).min(n.size);
        if self.over_limit(mapped) {
            return false;
        }
        self.remove_unmapped(id);
        if mapped < n.size {
            let rest = self.new_node(Node {
                addr: n.addr + mapped,
                size: n.size - mapped,
                prev: id,
                next: n.next,
                mapped: false,
                ..n
            });
            if n.next != NONE {
                self.nodes[n.next as usize].prev = rest;
            }
            self.nodes[id as usize].next = rest;
            self.insert_unmapped(rest);
        }
        let m = &mut self.nodes[id as usize];
        m.mapped = true;
        m.size = mapped;
        self.try_merge(id, self.nodes[id as usize].prev);
        self.try_merge(id, self.nodes[id as usize].next);
        self.insert_free(id);
        self.reserved += mapped;
        self.segments_created += 1;
        self.events.push(SegmentEvent {
            action: SegmentAction::SegmentMap,
            size: mapped,
        });
        true
    }

    /// Unmap the whole pages inside a free block of an expandable segment.
    fn unmap_block(&mut self, id: BlockId) {
        let n = self.nodes[id as usize];
        let seg = self.segments[n.segment as usize];
        let begin = seg.base + (n.addr - seg.base).div_ceil(seg.page) * seg.page;
        let end = seg.base + (n.addr + n.size - seg.base) / seg.page * seg.page;
        if begin >= end {
            return;
        }
        self.remove_free(id);
        let mut prev = n.prev;
        if begin > n.addr {
            let before = self.new_node(Node {
                addr: n.addr,
                size: begin - n.addr,
                prev: n.prev,
                next: id,
                ..n
            });
            if n.prev != NONE {
                self.nodes[n.prev as usize].next = before;
            }
            self.insert_free(before);
            prev = before;
        }
        let mut next = n.next;
        let block_end = n.addr + n.size;
        if end < block_end {
            let after = self.new_node(Node {
                addr: end,
                size: block_end - end,
                prev: id,
                next: n.next,
                ..n
            });
            if n.next != NONE {
                self.nodes[n.next as usize].prev = after;
            }
            self.insert_free(after);
            next = after;
        }
        let b = &mut self.nodes[id as usize];
        b.addr = begin;
        b.size = end - begin;
        b.prev = prev;
        b.next = next;
        b.mapped = false;
        self.try_merge(id, prev);
        self.try_merge(id, next);
        self.insert_unmapped(id);
        self.reserved -= end - begin;
        self.events.push(SegmentEvent {
            action: SegmentAction::SegmentUnmap,
            size: end - begin,
        });
    }

    /// Merge free neighbour `src` into `dst` (both free, same mapped state).
    fn try_merge(&mut self, dst: BlockId, src: BlockId) {
        if src == NONE {
            return;
        }
        let s = self.nodes[src as usize];
        if s.allocated || s.pending || s.mapped != self.nodes[dst as usize].mapped {
            return;
        }
        if s.mapped {
            self.remove_free(src);
        } else {
            self.remove_unmapped(src);
        }
        let d = &mut self.nodes[dst as usize];
        if d.prev == src {
            d.addr = s.addr;
            d.prev = s.prev;
            if s.prev != NONE {
                self.nodes[s.prev as usize].next = dst;
            }
        } else {
            d.next = s.next;
            if s.next != NONE {
                self.nodes[s.next as usize].prev = dst;
            }
        }
        self.nodes[dst as usize].size += s.size;
        self.free_nodes.push(src);
    }

    /// The program freed the block (`free_requested`): it stops counting as allocated.
    pub fn free_requested(&mut self, id: BlockId) {
        let n = &mut self.nodes[id as usize];
        if !n.allocated {
            return;
        }
        n.allocated = false;
        n.pending = true;
        self.allocated -= n.size;
        self.requested -= n.requested;
        self.pending_bytes += n.size;
    }

    /// The block returns to the pool (`free_completed`): merged with free neighbours.
    pub fn free_completed(&mut self, id: BlockId) {
        if self.nodes[id as usize].allocated {
            self.free_requested(id);
        }
        let n = &mut self.nodes[id as usize];
        if !n.pending {
            return;
        }
        n.pending = false;
        self.pending_bytes -= n.size;
        self.try_merge(id, self.nodes[id as usize].prev);
        self.try_merge(id, self.nodes[id as usize].next);
        self.insert_free(id);
    }

    /// cudaFree of a whole cached segment.
    fn release_block(&mut self, id: BlockId) {
        let n = self.nodes[id as usize];
        self.remove_free(id);
        self.reserved -= n.size;
        self.segments[n.segment as usize].alive = false;
        self.free_nodes.push(id);
        self.events.push(SegmentEvent {
            action: SegmentAction::SegmentFree,
            size: n.size,
        });
    }

    fn is_whole_segment(&self, id: BlockId) -> bool {
        let n = &self.nodes[id as usize];
        n.prev == NONE && n.next == NONE
    }

    /// Free cached oversize (≥ max_split_size) segments of the pool until `size` bytes are free.
    fn release_available_cached_blocks(&mut self, small: bool, stream: u64, size: u64) -> bool {
        let Some(max_split) = self.settings.max_split_size else {
            return false;
        };
        let p = usize::from(!small);
        let key = size.max(max_split);
        let first = self.pools[p]
            .blocks
            .range((stream, key, 0, 0)..)
            .next()
            .copied();
        match first {
            Some(b) if b.0 == stream && !self.is_expandable(b.3) => {
                if self.is_whole_segment(b.3) {
                    self.release_block(b.3);
                }
                true
            }
            _ => {
                // no single block is large enough: free oversize ones, largest first
                let candidates: Vec<(u64, u64, u64, BlockId)> = self.pools[p]
                    .blocks
                    .range(..(stream, key, 0, 0))
                    .rev()
                    .take_while(|b| b.0 == stream && b.1 >= max_split)
                    .copied()
                    .collect();
                let mut released = 0;
                for b in candidates {
                    if released >= key {
                        break;
                    }
                    if !self.is_expandable(b.3) && self.is_whole_segment(b.3) {
                        self.release_block(b.3);
                        released += b.1;
                    }
                }
                released >= key
            }
        }
    }

    /// `release_cached_blocks` (also `torch.cuda.empty_cache()`): free every cached whole
    /// segment, unmap the free pages of expandable ones; large pool first.
    pub fn release_cached_blocks(&mut self) {
        for p in [1, 0] {
            let free: Vec<BlockId> = self.pools[p].blocks.iter().map(|b| b.3).collect();
            let mut to_unmap = Vec::new();
            for id in free {
                if self.is_expandable(id) {
                    to_unmap.push(id);
                } else if self.is_whole_segment(id) {
                    self.release_block(id);
                }
            }
            for id in to_unmap {
                self.unmap_block(id);
                // a segment with nothing mapped left is given back whole
                if self.is_whole_segment(id) && !self.nodes[id as usize].mapped {
                    self.remove_unmapped(id);
                    let seg = self.nodes[id as usize].segment;
                    self.segments[seg as usize].alive = false;
                    self.free_nodes.push(id);
                }
            }
        }
    }

    /// `garbage_collect_cached_blocks`: above the threshold, free cached whole large segments
    /// that went unused for longer than the average, until under it.
    fn garbage_collect(&mut self) {
        let Some(limit) = self.limit else { return };
        let threshold = (self.settings.garbage_collection_threshold * limit as f64) as u64;
        if self.reserved <= threshold {
            return;
        }
        let target = self.reserved - threshold;
        let calls = self.pools[1].get_free_blocks_calls;
        let age = |me: &Allocator, id: BlockId| calls - me.nodes[id as usize].gc_base;
        let (mut total_age, mut count) = (0u64, 0u64);
        for b in &self.pools[1].blocks {
            if self.is_whole_segment(b.3) {
                total_age += age(self, b.3);
                count += 1;
            }
        }
        let mut reclaimed = 0;
        let mut freed = true;
        while reclaimed < target && freed && count > 0 {
            let threshold_age = total_age as f64 / count as f64;
            freed = false;
            let candidates: Vec<BlockId> = self.pools[1].blocks.iter().map(|b| b.3).collect();
            for id in candidates {
                if self.is_whole_segment(id)
                    && !self.is_expandable(id)
                    && age(self, id) as f64 >= threshold_age
                {
                    freed = true;
                    reclaimed += self.nodes[id as usize].size;
                    total_age -= age(self, id);
                    count -= 1;
                    self.release_block(id);
                }
            }
        }
    }

    /// Mapped free bytes and the largest free block (what an allocation could still use).
    pub fn free_stats(&self) -> (u64, u64) {
        let mut total = 0;
        let mut largest = 0;
        for p in &self.pools {
            for b in &p.blocks {
                total += b.1;
                largest = largest.max(b.1);
            }
        }
        (total, largest)
    }

    /// The segments as `torch.cuda.memory_snapshot()` would list them (an expandable segment
    /// is one entry per contiguous mapped range), in address order.
    pub fn segments(&self) -> Vec<SegmentView> {
        let mut heads: Vec<BlockId> = Vec::new();
        let mut live = vec![false; self.nodes.len()];
        for (i, n) in self.nodes.iter().enumerate() {
            live[i] = self.segments[n.segment as usize].alive;
        }
        for id in &self.free_nodes {
            live[*id as usize] = false;
        }
        for (i, n) in self.nodes.iter().enumerate() {
            if live[i] && n.mapped && (n.prev == NONE || !self.nodes[n.prev as usize].mapped) {
                heads.push(i as BlockId);
            }
        }
        heads.sort_by_key(|&h| self.nodes[h as usize].addr);
        heads
            .into_iter()
            .map(|h| {
                let mut size = 0;
                let mut b = h;
                while b != NONE && self.nodes[b as usize].mapped {
                    size += self.nodes[b as usize].size;
                    b = self.nodes[b as usize].next;
                }
                let n = &self.nodes[h as usize];
                SegmentView {
                    small: n.small,
                    expandable: self.segments[n.segment as usize].page != 0,
                    size,
                }
            })
            .collect()
    }

    pub fn block_size(&self, id: BlockId) -> u64 {
        self.nodes[id as usize].size
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn round_size_follows_the_allocator() {
        let s = Settings::default();
        assert_eq!(s.round_size(1), 512);
        assert_eq!(s.round_size(513), 1024);
        assert_eq!(s.round_size(3 * MIB + 1), 3 * MIB + 512);
        let mut s4 = Settings::default();
        s4.apply("roundup_power2_divisions:4").unwrap();
        // 1.1 MiB lies in [1, 2) MiB, divided in four: rounds up to 1.25 MiB
        assert_eq!(s4.round_size(MIB + MIB / 10), MIB + MIB / 4);
        assert_eq!(s4.round_size(2 * MIB), 2 * MIB);
        // small sizes (at most 512 * divisions) are not power-rounded
        assert_eq!(s4.round_size(1500), 1536);
        assert_eq!(s4.round_size(600 * 1024), 640 * 1024);
    }

    #[test]
    fn division_lists_fill_as_pytorch_does() {
        let d = parse_divisions("[256:1,512:2,>:8]").unwrap();
        assert_eq!(d[..8], [1; 8]);
        assert_eq!(d[9], 2);
        assert_eq!(d[10..], [8; 6]);
        assert!(parse_divisions("[3:1]").is_err());
        let mut s = Settings::default();
        s.apply_all("roundup_power2_divisions:[1:2,>:8],expandable_segments:True")
            .unwrap();
        assert_eq!(s.roundup_power2_divisions[0], 2);
        assert_eq!(s.roundup_power2_divisions[5], 8);
        assert!(s.expandable_segments);
        assert!(s.apply_all("roundup_power2_divisions:[1:2,").is_err());
        assert!(parse_divisions("3").is_err());
    }

    #[test]
    fn allocation_sizes() {
        assert_eq!(allocation_size(MIB), SMALL_BUFFER);
        assert_eq!(allocation_size(MIB + 512), LARGE_BUFFER);
        assert_eq!(allocation_size(10 * MIB), 10 * MIB);
        assert_eq!(allocation_size(11 * MIB + 1), 12 * MIB);
    }

    #[test]
    fn splits_and_merges_back() {
        let mut a = Allocator::new(Settings::default(), None);
        let x = a.malloc(3 * MIB, 0).unwrap();
        let y = a.malloc(3 * MIB, 0).unwrap();
        assert_eq!(a.reserved, LARGE_BUFFER);
        assert_eq!(a.segments_created, 1);
        a.free_completed(x);
        a.free_completed(y);
        assert_eq!(a.free_stats(), (LARGE_BUFFER, LARGE_BUFFER));
        // 1 MiB left over is not split off a large block: the request gets all 20 MiB
        let z = a.malloc(19 * MIB, 0).unwrap();
        assert_eq!(a.block_size(z), 20 * MIB);
        // 17 MiB gets an 18 MiB segment (2 MiB rounding), whole; 5 MiB one of 20 MiB, split
        let w = a.malloc(17 * MIB, 0).unwrap();
        assert_eq!(a.block_size(w), 18 * MIB);
        let v = a.malloc(5 * MIB, 0).unwrap();
        assert_eq!(a.block_size(v), 5 * MIB);
        assert_eq!(a.segments_created, 3);
        assert_eq!(a.reserved, 58 * MIB);
    }

    #[test]
    fn max_split_size_keeps_big_blocks_whole_and_frees_them_before_an_oom() {
        let mut s = Settings::default();
        s.apply("max_split_size_mb:100").unwrap();
        let mut a = Allocator::new(s, Some(300 * MIB));
        let big = a.malloc(200 * MIB, 0).unwrap();
        a.free_completed(big);
        // a small request may not use the oversize cached block: a new segment instead
        let small = a.malloc(30 * MIB, 0).unwrap();
        assert_eq!(a.reserved, 230 * MIB);
        // 150 MiB does not fit beside the cached 200 MiB: it is released first
        let _ = a.malloc(150 * MIB, 0).unwrap();
        assert_eq!(a.reserved, 180 * MIB);
        a.free_completed(small);
        let ev: Vec<_> = a.take_segment_events().map(|e| e.action).collect();
        assert_eq!(
            ev,
            [
                SegmentAction::SegmentAlloc,
                SegmentAction::SegmentAlloc,
                SegmentAction::SegmentFree,
                SegmentAction::SegmentAlloc
            ]
        );
    }

    #[test]
    fn expandable_segments_grow_by_pages() {
        let mut s = Settings::default();
        s.apply("expandable_segments:True").unwrap();
        let mut a = Allocator::new(s, None);
        let x = a.malloc(30 * MIB, 0).unwrap();
        assert_eq!(a.reserved, 40 * MIB, "two 20 MiB pages");
        let y = a.malloc(15 * MIB, 0).unwrap();
        assert_eq!(
            a.reserved,
            60 * MIB,
            "10 MiB left in the mapped page + one more page"
        );
        assert_eq!(a.segments().len(), 1);
        a.free_completed(x);
        a.free_completed(y);
        a.release_cached_blocks();
        assert_eq!(a.reserved, 0);
        assert!(a.segments().is_empty());
    }
}
