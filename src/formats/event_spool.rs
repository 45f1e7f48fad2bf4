//! Trace events kept in a temporary file instead of memory, as they are read, and read back in
//! order (or the last first) as often as asked: for output that needs the whole trace before
//! its first line (the listing of `trace` starts with its count of entries), memory then stays
//! bounded however long the trace. On disk (in the system's temporary directory, `TMPDIR`) a
//! device's events lie in independent blocks of up to [`BLOCK`] events, each event a few
//! variable-length integers (addresses and times as differences from the previous event of
//! its block): about a third of their 32 bytes in memory, so writing and reading them back
//! costs a third of the system's time. The blocks' index, and what only some events carry,
//! stay in memory.

use std::fs::File;
use std::io::{self, BufWriter, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;

use crate::model::snapshot::{Action, DeviceTrace, EventAux, StackId, TraceEvent};
use crate::model::trace::{EventVisitor, KeptTraces, TraceEvents, TraceSink};

/// Events a block: a block is what one read brings back (tens of kilobytes), and what is
/// decoded at once when visiting the last first.
const BLOCK: usize = 4096;

/// Blocks a walk must cover for its decoding to go to another core (a thread's start is
/// worth it past a few hundred thousand events).
const DECODE_AHEAD_BLOCKS: usize = 64;

/// An encoded event starts with two bytes (little-endian): the action (its index in
/// `Action::ALL`)...
const ACTION_BITS: u16 = 0x0f;
/// ... whether the stream index follows (two bytes) rather than being 0...
const STREAM_FOLLOWS: u16 = 0x10;
/// ... and the bytes of each field that follows, less one: the address's difference from the
/// previous address (zigzag), the size, the time's difference from the previous time (zigzag)
/// (three bits each, 1 to 8 bytes), the stack (plus one: `MISSING` is 0; two bits, 1 to 4
/// bytes). Each field's bytes little-endian, so that one unaligned load and a mask read it.
const ADDR_LEN_SHIFT: u32 = 5;
const SIZE_LEN_SHIFT: u32 = 8;
const TIME_LEN_SHIFT: u32 = 11;
const STACK_LEN_SHIFT: u32 = 14;
/// Zero bytes past a block's end when read back, so that every field is one 8-byte load.
const PADDING: usize = 8;

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    (v >> 1) as i64 ^ -((v & 1) as i64)
}

/// Bytes `v` needs, 1 to 8.
fn len_of(v: u64) -> usize {
    ((64 - v.leading_zeros() as usize).div_ceil(8)).max(1)
}

/// Writes the `len_of(v)` low bytes of `v`, and returns their number less one.
fn put_field(out: &mut Vec<u8>, v: u64) -> u16 {
    let n = len_of(v);
    out.extend_from_slice(&v.to_le_bytes()[..n]);
    n as u16 - 1
}

/// Reads the field of `len` bytes (1 to 8) at `*at` (with `PADDING` bytes past the end of what
/// is read), moving past it.
#[inline(always)]
fn take_field(bytes: &[u8], at: &mut usize, len: usize) -> Option<u64> {
    let word = u64::from_le_bytes(bytes.get(*at..*at + 8)?.try_into().ok()?);
    *at += len;
    Some(word & (u64::MAX >> (64 - 8 * len)))
}

/// The events of one block being written, and what each is written against.
#[derive(Default)]
struct BlockWriter {
    bytes: Vec<u8>,
    events: usize,
    addr: u64,
    time_us: i64,
}

impl BlockWriter {
    fn push(&mut self, e: &TraceEvent) {
        let at = self.bytes.len();
        self.bytes.extend_from_slice(&[0, 0]);
        let mut head = e.action as u16;
        if e.stream_index != 0 {
            head |= STREAM_FOLLOWS;
            self.bytes.extend_from_slice(&e.stream_index.to_le_bytes());
        }
        let addr = zigzag(e.addr.wrapping_sub(self.addr) as i64);
        head |= put_field(&mut self.bytes, addr) << ADDR_LEN_SHIFT;
        head |= put_field(&mut self.bytes, e.size) << SIZE_LEN_SHIFT;
        let time = zigzag(e.time_us.wrapping_sub(self.time_us));
        head |= put_field(&mut self.bytes, time) << TIME_LEN_SHIFT;
        // (`MISSING`, u32::MAX, as 0)
        head |= put_field(&mut self.bytes, e.stack.0.wrapping_add(1) as u64) << STACK_LEN_SHIFT;
        self.bytes[at..at + 2].copy_from_slice(&head.to_le_bytes());
        self.addr = e.addr;
        self.time_us = e.time_us;
        self.events += 1;
    }
}

/// Decodes a block of `events` events written by [`BlockWriter`] (its bytes followed by
/// `PADDING` zero bytes) into `out` (emptied first); `None` when the bytes are not such a
/// block.
fn decode_block(padded: &[u8], events: usize, out: &mut Vec<TraceEvent>) -> Option<()> {
    out.clear();
    out.reserve(events);
    let (mut at, mut addr, mut time_us) = (0usize, 0u64, 0i64);
    for _ in 0..events {
        let head = u16::from_le_bytes(padded.get(at..at + 2)?.try_into().ok()?);
        at += 2;
        let action = *Action::ALL.get((head & ACTION_BITS) as usize)?;
        let mut stream_index = 0;
        if head & STREAM_FOLLOWS != 0 {
            stream_index = u16::from_le_bytes(padded.get(at..at + 2)?.try_into().ok()?);
            at += 2;
        }
        let len = |shift: u32, mask: u16| ((head >> shift) & mask) as usize + 1;
        let addr_delta = take_field(padded, &mut at, len(ADDR_LEN_SHIFT, 7))?;
        addr = addr.wrapping_add(unzigzag(addr_delta) as u64);
        let size = take_field(padded, &mut at, len(SIZE_LEN_SHIFT, 7))?;
        let time_delta = take_field(padded, &mut at, len(TIME_LEN_SHIFT, 7))?;
        time_us = time_us.wrapping_add(unzigzag(time_delta));
        let stack = take_field(padded, &mut at, len(STACK_LEN_SHIFT, 3))? as u32;
        out.push(TraceEvent {
            addr,
            size,
            time_us,
            stack: StackId(stack.wrapping_sub(1)),
            stream_index,
            action,
        });
    }
    (at + PADDING == padded.len()).then_some(())
}

/// Where a block lies in the file and which of its device's events it holds.
struct Block {
    offset: u64,
    len: usize,
    /// The device's index of its first event.
    first: usize,
    events: usize,
}

/// One device's events: their blocks, their streams, what some carry.
#[derive(Default)]
struct DeviceEvents {
    blocks: Vec<Block>,
    /// The block being filled, not yet in the file.
    open: BlockWriter,
    count: usize,
    /// The distinct streams, indexed as the events' `stream_index`.
    streams: Vec<i64>,
    /// (event index, what it carries), in event order.
    aux: Vec<(usize, EventAux)>,
}

/// A [`TraceSink`] that writes the events to an unnamed temporary file.
pub struct EventSpool {
    file: BufWriter<File>,
    /// Bytes written to the file.
    written: u64,
    devices: Vec<DeviceEvents>,
    /// The snapshot's ids of the stacks the events carry, when those are the reading's own.
    stack_ids: Option<Vec<StackId>>,
    /// The first write that failed (a sink cannot fail: `finish` says it).
    error: Option<io::Error>,
}

impl EventSpool {
    /// An empty spool: an unnamed file in the system's temporary directory.
    pub fn new() -> io::Result<EventSpool> {
        Ok(EventSpool {
            file: BufWriter::with_capacity(1 << 20, tempfile::tempfile()?),
            written: 0,
            devices: Vec::new(),
            stack_ids: None,
            error: None,
        })
    }

    /// Ready to be read back; the first error writing it, if any.
    pub fn finish(&mut self) -> io::Result<()> {
        for d in 0..self.devices.len() {
            self.close_block(d);
        }
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        self.file.flush()
    }

    /// Bytes of the file an event, on average (what the encoding saves).
    pub fn bytes_per_event(&self) -> f64 {
        let events: usize = self.devices.iter().map(|d| d.count).sum();
        self.written as f64 / events.max(1) as f64
    }

    /// Writes device `d`'s open block to the file, if it holds any event.
    fn close_block(&mut self, d: usize) {
        let dev = &mut self.devices[d];
        if dev.open.events == 0 {
            return;
        }
        let open = std::mem::take(&mut dev.open);
        dev.blocks.push(Block {
            offset: self.written,
            len: open.bytes.len(),
            first: dev.count - open.events,
            events: open.events,
        });
        self.written += open.bytes.len() as u64;
        if self.error.is_none() {
            if let Err(err) = self.file.write_all(&open.bytes) {
                self.error = Some(err);
            }
        }
        // (its buffer serves the next block)
        let mut bytes = open.bytes;
        bytes.clear();
        dev.open.bytes = bytes;
    }

    /// Every event in the file, and a reader of them.
    fn ready(&mut self) -> io::Result<SpoolReader<'_>> {
        self.finish()?;
        Ok(SpoolReader::new(self))
    }

    /// Device `device`'s events of its block `b` into `events`, by way of `bytes`.
    fn read_block(
        &self,
        device: usize,
        b: usize,
        bytes: &mut Vec<u8>,
        events: &mut Vec<TraceEvent>,
    ) -> io::Result<()> {
        let block = &self.devices[device].blocks[b];
        bytes.clear();
        bytes.resize(block.len + PADDING, 0);
        (self.file.get_ref()).read_exact_at(&mut bytes[..block.len], block.offset)?;
        decode_block(bytes, block.events, events).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                "the temporary file of trace events does not read back as written",
            )
        })?;
        if let Some(ids) = &self.stack_ids {
            for e in events {
                if !e.stack.is_missing() {
                    e.stack = ids[e.stack.0 as usize];
                }
            }
        }
        Ok(())
    }
}

/// Walks of an [`EventSpool`] whose events are all in its file, with buffers of their own: several
/// can walk one spool at once, each on its own thread (a read at an offset moves no shared
/// position).
struct SpoolReader<'s> {
    spool: &'s EventSpool,
    /// A block's bytes read back, and its events decoded.
    read_bytes: Vec<u8>,
    read_events: Vec<TraceEvent>,
}

impl SpoolReader<'_> {
    /// A reader of `spool`, every event of which is in its file (`EventSpool::ready`).
    fn new(spool: &EventSpool) -> SpoolReader<'_> {
        SpoolReader {
            spool,
            read_bytes: Vec::new(),
            read_events: Vec::new(),
        }
    }

    /// Device `d`'s `blocks`, in that order, each decoded and given to `f` with its index. A
    /// long walk has its blocks read and decoded on another core, a few ahead of `f`, where
    /// there is one (the walks of `plot --stacked` or `segments --at` leave it idle).
    fn each_block(
        &mut self,
        d: usize,
        blocks: impl ExactSizeIterator<Item = usize> + Send,
        f: &mut dyn FnMut(usize, &[TraceEvent]) -> io::Result<()>,
    ) -> io::Result<()> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        if blocks.len() < DECODE_AHEAD_BLOCKS || cores < 2 {
            for b in blocks {
                self.spool
                    .read_block(d, b, &mut self.read_bytes, &mut self.read_events)?;
                f(b, &self.read_events)?;
            }
            return Ok(());
        }
        let spool = self.spool;
        let (decoded_tx, decoded) = std::sync::mpsc::sync_channel(2);
        let (spare, spare_rx) = std::sync::mpsc::channel::<Vec<TraceEvent>>();
        std::thread::scope(|scope| {
            scope.spawn(move || {
                let mut bytes = Vec::new();
                for b in blocks {
                    let mut events = spare_rx.try_recv().unwrap_or_default();
                    let read = spool.read_block(d, b, &mut bytes, &mut events);
                    let failed = read.is_err();
                    // (a send fails only once the walk has stopped, at its visitor's error)
                    if decoded_tx.send(read.map(|_| (b, events))).is_err() || failed {
                        return;
                    }
                }
            });
            for read in decoded {
                let (b, events) = read?;
                f(b, &events)?;
                let _ = spare.send(events);
            }
            Ok(())
        })
    }
}

impl TraceSink for EventSpool {
    fn event(&mut self, device: u32, e: &TraceEvent, stream: i64, aux: Option<&EventAux>) {
        let d = device as usize;
        if self.devices.len() <= d {
            self.devices.resize_with(d + 1, DeviceEvents::default);
        }
        let dev = &mut self.devices[d];
        let s = e.stream_index as usize;
        if dev.streams.len() <= s {
            dev.streams.resize(s + 1, 0);
        }
        dev.streams[s] = stream;
        if let Some(a) = aux {
            dev.aux.push((dev.count, a.clone()));
        }
        dev.count += 1;
        dev.open.push(e);
        if dev.open.events == BLOCK {
            self.close_block(d);
        }
    }

    fn restart(&mut self) {
        self.written = 0;
        self.devices.clear();
        self.stack_ids = None;
        self.error = None;
        let rewound = (self.file.flush())
            .and_then(|_| self.file.get_mut().set_len(0))
            .and_then(|_| self.file.seek(SeekFrom::Start(0)));
        if let Err(e) = rewound {
            self.error = Some(e);
        }
    }

    fn renumber_stacks(&mut self, ids: &[StackId]) {
        // (applied as the events are read back)
        self.stack_ids = Some(ids.to_vec());
    }
}

impl TraceEvents for EventSpool {
    fn count(&self, device: u32) -> usize {
        self.devices.get(device as usize).map_or(0, |d| d.count)
    }

    fn visit(&mut self, device: u32, f: &mut EventVisitor<'_>) -> io::Result<()> {
        self.ready()?.visit(device, f)
    }

    fn visit_back_from(
        &mut self,
        device: u32,
        from: usize,
        f: &mut EventVisitor<'_>,
    ) -> io::Result<()> {
        self.ready()?.visit_back_from(device, from, f)
    }

    fn two_readers(&mut self) -> io::Result<Option<[Box<dyn TraceEvents + Send + '_>; 2]>> {
        self.ready()?;
        Ok(Some([
            Box::new(SpoolReader::new(self)),
            Box::new(SpoolReader::new(self)),
        ]))
    }
}

impl TraceEvents for SpoolReader<'_> {
    fn count(&self, device: u32) -> usize {
        self.spool.count(device)
    }

    fn visit(&mut self, device: u32, f: &mut EventVisitor<'_>) -> io::Result<()> {
        let d = device as usize;
        let Some(dev) = self.spool.devices.get(d) else {
            return Ok(());
        };
        let mut aux = 0;
        self.each_block(d, 0..dev.blocks.len(), &mut |b, events| {
            let first = dev.blocks[b].first;
            for (k, e) in events.iter().enumerate() {
                let i = first + k;
                let a = match dev.aux.get(aux) {
                    Some((at, a)) if *at == i => {
                        aux += 1;
                        Some(a)
                    }
                    _ => None,
                };
                f(i, e, dev.streams[e.stream_index as usize], a)?;
            }
            Ok(())
        })
    }

    fn visit_back_from(
        &mut self,
        device: u32,
        from: usize,
        f: &mut EventVisitor<'_>,
    ) -> io::Result<()> {
        let d = device as usize;
        let Some(dev) = self.spool.devices.get(d).filter(|dev| from < dev.count) else {
            return Ok(());
        };
        // the first block to read: the one that holds event `from`
        let first_block = dev.blocks.partition_point(|b| b.first + b.events <= from);
        // the aux past the last event, walked back from there
        let mut aux = dev.aux.len();
        self.each_block(
            d,
            (first_block..dev.blocks.len()).rev(),
            &mut |b, events| {
                let first = dev.blocks[b].first;
                let skip = from.saturating_sub(first);
                for (k, e) in events.iter().enumerate().skip(skip).rev() {
                    let i = first + k;
                    while aux > 0 && dev.aux[aux - 1].0 > i {
                        aux -= 1;
                    }
                    let a = match aux.checked_sub(1).map(|at| &dev.aux[at]) {
                        Some((at, a)) if *at == i => Some(a),
                        _ => None,
                    };
                    f(i, e, dev.streams[e.stream_index as usize], a)?;
                }
                Ok(())
            },
        )
    }
}

/// Trace events kept for a use the end of the reading may or may not call for: in memory up
/// to a number of events, and past that all put aside in an [`EventSpool`] (memory stays
/// bounded), to be had back whole only if wanted.
pub struct SpillingTraces {
    kept: KeptTraces,
    limit: usize,
    /// Past the limit: every event so far, in order (or why there is no file for them).
    spool: Option<std::io::Result<EventSpool>>,
}

impl SpillingTraces {
    /// Up to `limit` events in memory.
    pub fn keeping(limit: usize) -> SpillingTraces {
        SpillingTraces {
            kept: KeptTraces::up_to(limit),
            limit,
            spool: None,
        }
    }

    /// Give the events kept to `sink` in order, from memory or read back from disk, keeping
    /// them (`devices`: how many devices to read back).
    pub fn feed(&mut self, sink: &mut dyn TraceSink, devices: usize) -> std::io::Result<()> {
        match &mut self.spool {
            None => {
                for (d, t) in self.kept.traces().unwrap_or_default().iter().enumerate() {
                    for (i, e) in t.events.iter().enumerate() {
                        sink.event(d as u32, e, t.stream(e), t.aux(i));
                    }
                }
                Ok(())
            }
            Some(Ok(spool)) => {
                spool.finish()?;
                for d in 0..devices as u32 {
                    spool.visit(d, &mut |_, e, stream, aux| {
                        sink.event(d, e, stream, aux);
                        Ok(())
                    })?;
                }
                Ok(())
            }
            Some(Err(e)) => Err(std::io::Error::new(e.kind(), e.to_string())),
        }
    }

    /// The traces, by device index (`devices` of them when read back from disk).
    pub fn into_traces(self, devices: usize) -> std::io::Result<Vec<DeviceTrace>> {
        let Some(spool) = self.spool else {
            return Ok(self.kept.into_traces().unwrap_or_default());
        };
        let mut spool = spool?;
        spool.finish()?;
        let mut traces = Vec::with_capacity(devices);
        for d in 0..devices as u32 {
            let mut t = DeviceTrace::default();
            t.events.reserve_exact(spool.count(d));
            spool.visit(d, &mut |_, e, stream, aux| {
                (t.push_copy(*e, stream, aux)).map_err(std::io::Error::other)
            })?;
            traces.push(t);
        }
        Ok(traces)
    }
}

impl SpillingTraces {
    /// `event` once the events go to the spool, or as they start to.
    #[inline(never)]
    fn spill(&mut self, device: u32, e: &TraceEvent, stream: i64, aux: Option<&EventAux>) {
        match &mut self.spool {
            Some(Ok(spool)) => spool.event(device, e, stream, aux),
            Some(Err(_)) => {}
            None => {
                // the kept ones first, then this one and all that follow
                let kept = std::mem::replace(&mut self.kept, KeptTraces::up_to(0));
                self.spool = Some(EventSpool::new().map(|mut spool| {
                    for (d, t) in kept.into_traces().unwrap_or_default().iter().enumerate() {
                        for (i, k) in t.events.iter().enumerate() {
                            spool.event(d as u32, k, t.stream(k), t.aux(i));
                        }
                    }
                    spool.event(device, e, stream, aux);
                    spool
                }));
            }
        }
    }
}

impl TraceSink for SpillingTraces {
    #[inline]
    fn event(&mut self, device: u32, e: &TraceEvent, stream: i64, aux: Option<&EventAux>) {
        if self.spool.is_none() && !self.kept.is_full() {
            self.kept.event(device, e, stream, aux);
        } else {
            self.spill(device, e, stream, aux);
        }
    }

    fn restart(&mut self) {
        *self = SpillingTraces::keeping(self.limit);
    }

    fn renumber_stacks(&mut self, ids: &[StackId]) {
        match &mut self.spool {
            Some(Ok(spool)) => spool.renumber_stacks(ids),
            Some(Err(_)) => {}
            None => self.kept.renumber_stacks(ids),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Snapshot;

    fn ev(i: u64, action: Action) -> TraceEvent {
        TraceEvent {
            addr: i * 512,
            size: 1 << i,
            time_us: if i.is_multiple_of(2) {
                -(i as i64)
            } else {
                crate::model::snapshot::NO_TIME
            },
            stack: StackId(i as u32),
            stream_index: (i % 3) as u16,
            action,
        }
    }

    fn read_back(s: &mut EventSpool, device: u32) -> Vec<String> {
        let mut got = Vec::new();
        s.visit(device, &mut |i, e, stream, aux| {
            got.push(format!("{i} {e:?} {stream} {aux:?}"));
            Ok(())
        })
        .unwrap();
        got
    }

    /// Every field and every action comes back as it went in, each device's events in order,
    /// as often as asked; a restart forgets what came before.
    #[test]
    fn events_come_back_as_they_went_in() {
        let mut s = EventSpool::new().unwrap();
        s.event(0, &ev(9, Action::Alloc), 7, None);
        s.restart();
        let oom = EventAux {
            device_free: Some(5),
            ..EventAux::default()
        };
        let mut want: [Vec<String>; 2] = Default::default();
        for (i, &action) in Action::ALL.iter().enumerate() {
            let (device, e) = ((i % 2) as u32, ev(i as u64, action));
            let stream = 100 + e.stream_index as i64;
            let aux = (action == Action::Oom).then_some(&oom);
            s.event(device, &e, stream, aux);
            let index = want[device as usize].len();
            want[device as usize].push(format!("{index} {e:?} {stream} {aux:?}"));
        }
        s.finish().unwrap();
        for _ in 0..2 {
            assert_eq!(read_back(&mut s, 0), want[0]);
            assert_eq!(read_back(&mut s, 1), want[1]);
        }
        // stacks renumbered by the reading at its end come back renumbered
        let ids: Vec<StackId> = (0..Action::ALL.len() as u32)
            .map(|i| StackId(i * 10))
            .collect();
        s.renumber_stacks(&ids);
        let first = read_back(&mut s, 0).remove(0);
        assert!(first.contains("stack: StackId(0)"), "{first}");
        let third = read_back(&mut s, 0).remove(1);
        assert!(third.contains("stack: StackId(20)"), "{third}");
        assert_eq!((s.count(0), s.count(1), s.count(2)), (6, 5, 0));
        // backwards, from any event on: the same events, last first
        for after in [0, 2, 5, 9] {
            let mut back = Vec::new();
            s.visit_back(0, after, &mut |i, e, stream, aux| {
                back.push(format!("{i} {e:?} {stream} {aux:?}"));
                Ok(())
            })
            .unwrap();
            let mut forward = read_back(&mut s, 0);
            forward.drain(..(after + 1).min(forward.len()));
            forward.reverse();
            assert_eq!(back, forward, "after {after}");
        }
        assert!(read_back(&mut s, 2).is_empty());
    }

    /// A varied event: every field at its extremes now and then (`u64::MAX` addresses and
    /// sizes, times before 1970, `NO_TIME` and `i64::MAX`, stacks `MISSING`, far streams),
    /// else near its neighbours as in a real trace.
    fn varied(rng: &mut u64, prev: &TraceEvent) -> TraceEvent {
        let mut next = || {
            // (xorshift64)
            *rng ^= *rng << 13;
            *rng ^= *rng >> 7;
            *rng ^= *rng << 17;
            *rng
        };
        let r = next();
        let addr = match r % 7 {
            0 => u64::MAX,
            1 => 0,
            2 => next(),
            3 => prev.addr.wrapping_sub(512 * (next() % 1000)),
            _ => prev.addr.wrapping_add(512 * (next() % 100_000) + (r >> 60)),
        };
        let size = match (r >> 8) % 6 {
            0 => u64::MAX,
            1 => 0,
            2 => next(),
            3 => next() % 1000,
            _ => 512 * (next() % (1 << 22)),
        };
        let time_us = match (r >> 16) % 8 {
            0 => crate::model::snapshot::NO_TIME,
            1 => i64::MAX,
            2 => -(next() as i64 >> 3),
            3 => next() as i64,
            _ => prev.time_us.wrapping_add((next() % 5000) as i64),
        };
        let stack = match (r >> 24) % 5 {
            0 => StackId::MISSING,
            1 => StackId(u32::MAX - 1),
            _ => StackId((next() % 50_000) as u32),
        };
        let stream_index = match (r >> 32) % 9 {
            0 => 3,
            1 => 2,
            2 => 1000,
            _ => 0,
        };
        let action = Action::ALL[(next() % Action::ALL.len() as u64) as usize];
        TraceEvent {
            addr,
            size,
            time_us,
            stack,
            stream_index,
            action,
        }
    }

    /// Gives `s` a [`varied`] event after `prev` on `device` (an `oom` carrying `k`), and
    /// returns the line [`read_back`] gives for it as its device's event `index`.
    fn add_varied(
        s: &mut EventSpool,
        rng: &mut u64,
        prev: &mut TraceEvent,
        device: u32,
        k: usize,
        index: usize,
    ) -> String {
        let e = varied(rng, prev);
        *prev = e;
        let stream = -(e.stream_index as i64) - 1;
        let oom = EventAux {
            device_free: Some(k as u64),
            ..EventAux::default()
        };
        let aux = (e.action == Action::Oom).then_some(&oom);
        s.event(device, &e, stream, aux);
        format!("{index} {e:?} {stream} {aux:?}")
    }

    fn read_back_from(s: &mut EventSpool, device: u32, from: usize) -> Vec<String> {
        let mut got = Vec::new();
        s.visit_back_from(device, from, &mut |i, e, stream, aux| {
            got.push(format!("{i} {e:?} {stream} {aux:?}"));
            Ok(())
        })
        .unwrap();
        got
    }

    /// Many blocks' worth of events on several devices, interleaved, with every field at its
    /// extremes: each comes back as it went in, forwards, backwards from any event (at a
    /// block's edges too), and after more events are added to a spool already read.
    #[test]
    fn events_across_blocks_come_back_forwards_and_backwards() {
        const DEVICES: usize = 3;
        let mut s = EventSpool::new().unwrap();
        let mut want: [Vec<String>; DEVICES] = Default::default();
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut prev = TraceEvent::default();
        let mut add = |s: &mut EventSpool, want: &mut [Vec<String>; DEVICES], n: usize| {
            for k in 0..n {
                // device 0 has most events, in long runs; the others come between
                let device = match k % 1000 {
                    0..=899 => 0,
                    900..=989 => 1,
                    _ => 2,
                };
                let index = want[device].len();
                let line = add_varied(s, &mut rng, &mut prev, device as u32, k, index);
                want[device].push(line);
            }
        };
        add(&mut s, &mut want, 3 * BLOCK * 10 / 9 + 777);
        s.finish().unwrap();
        assert!(want[0].len() > 3 * BLOCK, "{}", want[0].len());
        assert!(s.bytes_per_event() < 32.0, "{}", s.bytes_per_event());
        for round in 0..2 {
            for (d, want) in want.iter().enumerate() {
                let n = want.len();
                assert_eq!(s.count(d as u32), n);
                assert_eq!(&read_back(&mut s, d as u32), want, "device {d}");
                let mut edges = vec![0, 1, n / 2, n.saturating_sub(1), n, n + 5];
                for b in 1..=n / BLOCK {
                    edges.extend([b * BLOCK - 1, b * BLOCK, b * BLOCK + 1]);
                }
                for from in edges {
                    let mut suffix = want[from.min(n)..].to_vec();
                    suffix.reverse();
                    assert_eq!(read_back_from(&mut s, d as u32, from), suffix, "{d} {from}");
                }
                let mut none = Vec::new();
                s.visit_back(d as u32, usize::MAX, &mut |i, _, _, _| {
                    none.push(i);
                    Ok(())
                })
                .unwrap();
                assert!(none.is_empty());
            }
            // two readers at once, one on another thread: each the same events, one the
            // last first
            let [mut ahead, mut back] = s.two_readers().unwrap().expect("a spool has two");
            let (forward, backward) = std::thread::scope(|scope| {
                let backward = scope.spawn(move || {
                    let mut got = Vec::new();
                    back.visit_back_from(0, 0, &mut |i, e, stream, aux| {
                        got.push(format!("{i} {e:?} {stream} {aux:?}"));
                        Ok(())
                    })
                    .unwrap();
                    got
                });
                let mut got = Vec::new();
                ahead
                    .visit(0, &mut |i, e, stream, aux| {
                        got.push(format!("{i} {e:?} {stream} {aux:?}"));
                        Ok(())
                    })
                    .unwrap();
                (got, backward.join().unwrap())
            });
            drop(ahead);
            assert_eq!(forward, want[0]);
            assert!(backward.iter().rev().eq(want[0].iter()));
            if round == 0 {
                // more events after reading: they go on from where the others ended
                add(&mut s, &mut want, BLOCK + 5);
            }
        }
        assert!(read_back(&mut s, DEVICES as u32).is_empty());
        assert!(read_back_from(&mut s, DEVICES as u32, 0).is_empty());
    }

    /// A walk long enough to be decoded on another core gives what the one-thread walk
    /// gives, forwards and backwards from anywhere, and stops at its visitor's first error.
    #[test]
    fn long_walks_decoded_ahead_come_back_the_same() {
        let mut s = EventSpool::new().unwrap();
        let mut want = Vec::new();
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut prev = TraceEvent::default();
        let n = (DECODE_AHEAD_BLOCKS + 3) * BLOCK + 17;
        for k in 0..n {
            want.push(add_varied(&mut s, &mut rng, &mut prev, 0, k, k));
        }
        s.finish().unwrap();
        assert_eq!(read_back(&mut s, 0), want);
        let from = 5 * BLOCK + 3;
        let mut suffix = want[from..].to_vec();
        suffix.reverse();
        assert_eq!(read_back_from(&mut s, 0, from), suffix);
        // an error stops the walk where it came, and is the one the walk returns
        let mut seen = 0;
        let stopped = s.visit(0, &mut |i, _, _, _| {
            seen += 1;
            match i {
                20_000 => Err(io::Error::other("stop here")),
                _ => Ok(()),
            }
        });
        assert_eq!(stopped.unwrap_err().to_string(), "stop here");
        assert_eq!(seen, 20_001);
    }

    /// The integers as written: every length of field, and zigzag at the ends of i64.
    #[test]
    fn fields_and_zigzag_round_trip() {
        let mut values = vec![0, 1, 255, 256, u64::MAX, u64::MAX - 1];
        values.extend((0..64).map(|b| 1u64 << b));
        values.extend((1..64).map(|b| (1u64 << b) - 1));
        let mut bytes = Vec::new();
        let lens: Vec<usize> = (values.iter())
            .map(|&v| put_field(&mut bytes, v) as usize + 1)
            .collect();
        let end = bytes.len();
        bytes.extend([0xff; PADDING]);
        let mut at = 0;
        for (&v, &len) in values.iter().zip(&lens) {
            assert_eq!(len, len_of(v));
            assert_eq!(take_field(&bytes, &mut at, len), Some(v));
        }
        assert_eq!(at, end);
        // (a field is read as 8 bytes: past the padding there are none)
        let mut past = end + 1;
        assert_eq!(take_field(&bytes, &mut past, 1), None);
        for v in [0, 1, -1, i64::MAX, i64::MIN, i64::MIN + 1, 12345, -12345] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
    }

    fn fed(snap: &Snapshot, limit: usize) -> String {
        let mut events = SpillingTraces::keeping(limit);
        crate::model::trace::feed(snap, &mut events);
        let spilled = events.spool.is_some();
        let traces = events.into_traces(snap.traces.len()).unwrap();
        assert_eq!(
            spilled,
            limit < snap.traces.iter().map(|t| t.events.len()).sum()
        );
        format!("{traces:?}")
    }

    /// Past its limit the events go to disk, and come back as they went in:
    /// every field, stream and aux (an OOM's free bytes, unknown actions), on every device.
    #[test]
    fn events_past_the_limit_come_back_from_disk_as_they_went_in() {
        for name in ["h100/oom_default.pickle", "synthetic_flat_events.pickle"] {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("fixtures/snapshots")
                .join(name);
            let snap = crate::formats::load_snapshot_parts(
                &path,
                crate::formats::SnapshotParts::EventsWithoutStacks,
            )
            .unwrap();
            let kept = format!("{:?}", snap.traces);
            for limit in [0, 1, 7, usize::MAX] {
                assert_eq!(fed(&snap, limit), kept, "{name}, limit {limit}");
            }
        }
    }
}
