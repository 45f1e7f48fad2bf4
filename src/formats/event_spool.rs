//! Trace events kept in a temporary file instead of memory, as they are read, and read back in
//! order as often as asked: for output that needs the whole trace before its first line (the
//! listing of `trace` starts with its count of entries), memory then stays bounded however long
//! the trace. 32 bytes an event on disk (in the system's temporary directory, `TMPDIR`); what
//! only some events carry stays in memory.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};

use crate::model::snapshot::{Action, DeviceTrace, EventAux, StackId, TraceEvent};
use crate::model::trace::{EventVisitor, KeptTraces, TraceEvents, TraceSink};

const RECORD: usize = 32;

/// One device's events: where they lie in the file, their streams, what some carry.
#[derive(Default)]
struct DeviceEvents {
    /// (first record, records): a device's events come in one run when read from a file.
    runs: Vec<(u64, u64)>,
    count: usize,
    /// The distinct streams, indexed as the events' `stream_index`.
    streams: Vec<i64>,
    /// (event index, what it carries), in event order.
    aux: Vec<(usize, EventAux)>,
}

/// A [`TraceSink`] that writes the events to an unnamed temporary file.
pub struct EventSpool {
    file: BufWriter<File>,
    records: u64,
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
            records: 0,
            devices: Vec::new(),
            stack_ids: None,
            error: None,
        })
    }

    /// Ready to be read back; the first error writing it, if any.
    pub fn finish(&mut self) -> io::Result<()> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        self.file.flush()
    }

    fn encode(e: &TraceEvent) -> [u8; RECORD] {
        let mut r = [0u8; RECORD];
        r[0..8].copy_from_slice(&e.addr.to_le_bytes());
        r[8..16].copy_from_slice(&e.size.to_le_bytes());
        r[16..24].copy_from_slice(&e.time_us.to_le_bytes());
        r[24..28].copy_from_slice(&e.stack.0.to_le_bytes());
        r[28..30].copy_from_slice(&e.stream_index.to_le_bytes());
        r[30] = e.action as u8;
        r
    }

    fn decode(r: &[u8]) -> TraceEvent {
        let u64_at = |i: usize| u64::from_le_bytes(r[i..i + 8].try_into().expect("8 bytes"));
        TraceEvent {
            addr: u64_at(0),
            size: u64_at(8),
            time_us: u64_at(16) as i64,
            stack: StackId(u32::from_le_bytes(r[24..28].try_into().expect("4 bytes"))),
            stream_index: u16::from_le_bytes([r[28], r[29]]),
            // (written by `encode` from an `Action`)
            action: Action::ALL[r[30] as usize],
        }
    }
}

impl TraceSink for EventSpool {
    fn event(&mut self, device: u32, e: &TraceEvent, stream: i64, aux: Option<&EventAux>) {
        let d = device as usize;
        if self.devices.len() <= d {
            self.devices.resize_with(d + 1, DeviceEvents::default);
        }
        let dev = &mut self.devices[d];
        match dev.runs.last_mut() {
            Some((first, n)) if *first + *n == self.records => *n += 1,
            _ => dev.runs.push((self.records, 1)),
        }
        let s = e.stream_index as usize;
        if dev.streams.len() <= s {
            dev.streams.resize(s + 1, 0);
        }
        dev.streams[s] = stream;
        if let Some(a) = aux {
            dev.aux.push((dev.count, a.clone()));
        }
        dev.count += 1;
        self.records += 1;
        if self.error.is_none() {
            if let Err(err) = self.file.write_all(&EventSpool::encode(e)) {
                self.error = Some(err);
            }
        }
    }

    fn restart(&mut self) {
        self.records = 0;
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
        let Some(dev) = self.devices.get(device as usize) else {
            return Ok(());
        };
        let file = self.file.get_ref();
        let mut index = 0;
        let mut aux = dev.aux.iter().peekable();
        let mut record = [0u8; RECORD];
        for &(first, n) in &dev.runs {
            let mut file = file;
            file.seek(SeekFrom::Start(first * RECORD as u64))?;
            let mut r = BufReader::with_capacity(1 << 20, file.take(n * RECORD as u64));
            for _ in 0..n {
                r.read_exact(&mut record)?;
                let mut e = EventSpool::decode(&record);
                if let (Some(ids), false) = (&self.stack_ids, e.stack.is_missing()) {
                    e.stack = ids[e.stack.0 as usize];
                }
                let a = aux.next_if(|(at, _)| *at == index).map(|(_, a)| a);
                f(index, &e, dev.streams[e.stream_index as usize], a)?;
                index += 1;
            }
        }
        Ok(())
    }

    fn visit_back_from(
        &mut self,
        device: u32,
        from: usize,
        f: &mut EventVisitor<'_>,
    ) -> io::Result<()> {
        const CHUNK: u64 = 1 << 15; // records read at a time, from the end backwards
        let Some(dev) = self.devices.get(device as usize) else {
            return Ok(());
        };
        let mut file = self.file.get_ref();
        let mut buf = vec![0u8; CHUNK as usize * RECORD];
        // the index of the first event of each run
        let mut firsts = Vec::with_capacity(dev.runs.len());
        let mut index = 0u64;
        for &(_, n) in &dev.runs {
            firsts.push(index);
            index += n;
        }
        let mut aux = dev.aux.iter().rev().peekable();
        for (&(first_record, n), &first_index) in dev.runs.iter().zip(&firsts).rev() {
            // events of this run from `from` on: [skip, n) of it
            let skip = (from as u64).saturating_sub(first_index).min(n);
            let mut end = n;
            while end > skip {
                let start = end.saturating_sub(CHUNK).max(skip);
                let bytes = &mut buf[..((end - start) as usize) * RECORD];
                file.seek(SeekFrom::Start((first_record + start) * RECORD as u64))?;
                file.read_exact(bytes)?;
                for (k, record) in bytes.chunks_exact(RECORD).enumerate().rev() {
                    let i = (first_index + start) as usize + k;
                    let mut e = EventSpool::decode(record);
                    if let (Some(ids), false) = (&self.stack_ids, e.stack.is_missing()) {
                        e.stack = ids[e.stack.0 as usize];
                    }
                    while aux.next_if(|(at, _)| *at > i).is_some() {}
                    let a = aux.next_if(|(at, _)| *at == i).map(|(_, a)| a);
                    f(i, &e, dev.streams[e.stream_index as usize], a)?;
                }
                end = start;
            }
        }
        Ok(())
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
                let aux = aux.cloned().unwrap_or_default();
                t.push(*e, stream, aux).map_err(std::io::Error::other)
            })?;
            traces.push(t);
        }
        Ok(traces)
    }
}

impl TraceSink for SpillingTraces {
    fn event(&mut self, device: u32, e: &TraceEvent, stream: i64, aux: Option<&EventAux>) {
        match &mut self.spool {
            Some(Ok(spool)) => spool.event(device, e, stream, aux),
            Some(Err(_)) => {}
            None if self.kept.is_full() => {
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
            None => self.kept.event(device, e, stream, aux),
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
