//! MemoryTracker stats (`save_stats()`), and the same with memtrack's `memtrack` key.
//!
//! Layout (docs/format.md): `memories_{allocated,active,reserved}`: {op index: (op name, MiB)},
//! `markers`: {name: op index}, `num_alloc_retries`: int, `op_index`: int (absent in older
//! files), `memtrack`: dict (only in files `memtrack record` wrote).

use std::collections::HashMap;
use std::path::Path;

use super::record_ext;
use crate::error::{Error, Result};
use crate::model::tracker::ExitInfo;
use crate::model::units::{MAX_BYTES, MIB};
use crate::model::{Marker, OpNames, RecordInfo, Series, TrackerStats};
use crate::pickle::writer::Writer;
use crate::pickle::{Dict, Document, Value, View};

use super::error::{LayoutError, Parse};

struct SeriesEntries {
    keys: Vec<i64>,
    values: Vec<f64>,
}

/// Tracker stats from a decoded pickle. Takes the document so that op names can keep living in
/// its string buffer instead of being copied (a 1M-op file has ~30 MB of names).
pub fn from_document(doc: Document) -> Parse<TrackerStats> {
    let mut stats = TrackerStats::default();
    let ranges = {
        let doc = &doc;
        let root = doc
            .as_dict(doc.root())
            .ok_or("stats: top-level value is not a dict")?;
        let alloc_dict = series_dict(doc, &root, Series::Allocated)?;
        let n = alloc_dict.len();
        let mut keys = Vec::with_capacity(n);
        let mut values = Vec::with_capacity(n);
        let mut ranges = Vec::with_capacity(n);
        for (k, v) in alloc_dict.iter() {
            let (key, name, mib) = entry(doc, Series::Allocated, k, v)?;
            keys.push(key);
            values.push(mib * MIB);
            ranges.push(doc.str_range(name).expect("entry() checked it is a str"));
        }
        // Python dicts keep insertion order, which MemoryTracker makes the op order; a file
        // written otherwise is put in op-index order.
        if !keys.windows(2).all(|w| w[0] < w[1]) {
            let mut order: Vec<usize> = (0..n).collect();
            order.sort_by_key(|&i| keys[i]);
            ranges = order.iter().map(|&i| ranges[i].clone()).collect();
            values = order.iter().map(|&i| values[i]).collect();
            keys = order.iter().map(|&i| keys[i]).collect();
        }
        stats.allocated = values;
        for series in [Series::Active, Series::Reserved] {
            let d = series_dict(doc, &root, series)?;
            let mut e = SeriesEntries {
                keys: Vec::with_capacity(d.len()),
                values: Vec::with_capacity(d.len()),
            };
            for (k, v) in d.iter() {
                let (key, _, mib) = entry(doc, series, k, v)?;
                e.keys.push(key);
                e.values.push(mib * MIB);
            }
            let aligned = align(&keys, e);
            match series {
                Series::Active => stats.active = aligned,
                _ => stats.reserved = aligned,
            }
        }
        read_rest(doc, &root, &mut stats)?;
        ranges
    };
    stats.names = OpNames::from_ranges(doc.into_text(), &ranges)
        .ok_or("op names: more than 4 GiB of text")?;
    Ok(stats)
}

fn read_rest(doc: &Document, root: &Dict, stats: &mut TrackerStats) -> Parse<()> {
    if let Some(m) = root.get("markers") {
        let d = doc
            .as_dict(m)
            .ok_or_else(|| format!("markers: expected a dict, found {}", doc.type_name(m)))?;
        for (k, v) in d.iter() {
            let name = doc.as_str(k).ok_or("markers: a key is not a string")?;
            let op_index = doc
                .as_int(v)
                .ok_or_else(|| format!("markers['{name}']: expected an int"))?;
            stats.markers.push(Marker {
                name: name.to_string(),
                op_index,
            });
        }
    }
    stats.num_alloc_retries = match root.get("num_alloc_retries") {
        Some(v) => doc.as_int(v).ok_or("num_alloc_retries: expected an int")?,
        None => 0,
    };
    stats.op_index = match root.get("op_index") {
        Some(v) => Some(doc.as_int(v).ok_or("op_index: expected an int")?),
        None => None,
    };
    if let Some(ext) = root.get("memtrack") {
        stats.record = Some(record_info(doc, ext)?);
    }
    Ok(())
}

fn series_dict<'d>(doc: &'d Document, root: &Dict<'d>, s: Series) -> Parse<Dict<'d>> {
    let v = root
        .get(s.stats_key())
        .ok_or_else(|| format!("missing key '{}'", s.stats_key()))?;
    doc.as_dict(v).ok_or_else(|| {
        format!(
            "{}: expected a dict, found {}",
            s.stats_key(),
            doc.type_name(v)
        )
        .into()
    })
}

/// (op index, name as a str value, MiB) of one series entry.
#[inline]
fn entry(doc: &Document, s: Series, k: Value, v: Value) -> Parse<(i64, Value, f64)> {
    if let (Some(key), Some(&[name, mib])) = (doc.as_int(k), doc.as_seq(v)) {
        if let (true, Some(mib)) = (doc.is_str(name), doc.as_f64(mib)) {
            if !plausible_mib(mib) {
                let op = doc.as_str(name).unwrap_or_default();
                return Err(implausible(s, key, op, mib));
            }
            return Ok((key, name, mib));
        }
    }
    Err(entry_error(doc, s, k, v))
}

/// Whether a series' MiB figure is one an allocator can report: a number from 0 to
/// [`MAX_BYTES`] bytes (NaN, infinities and negatives are not). `tracker_stream` leaves a
/// file with any other to this reader, which names it.
#[inline]
pub(super) fn plausible_mib(mib: f64) -> bool {
    (0.0..=MAX_BYTES as f64 / MIB).contains(&mib)
}

#[cold]
fn implausible(s: Series, key: i64, op: &str, mib: f64) -> LayoutError {
    // 1e300 as 1e300, not 301 digits
    let shown = if mib.abs() >= 1e15 {
        format!("{mib:e}")
    } else {
        format!("{mib}")
    };
    let what = if mib.is_nan() {
        "NaN, not a number of MiB".to_string()
    } else {
        format!("{shown} MiB, which no allocator reports")
    };
    LayoutError(format!(
        "{}[{key}] (op {op:?}): {what} (a damaged or hand-made file?)",
        s.stats_key()
    ))
}

#[cold]
fn entry_error(doc: &Document, s: Series, k: Value, v: Value) -> LayoutError {
    LayoutError(match doc.as_int(k) {
        None => format!(
            "{}: op index keys must be ints, found {}",
            s.stats_key(),
            doc.type_name(k)
        ),
        Some(key) => format!(
            "{}[{key}]: expected (op name, MiB) tuple, found {}",
            s.stats_key(),
            doc.type_name(v)
        ),
    })
}

/// Values of `e` in the order of `keys`; ops a series lacks are NaN (never written by PyTorch,
/// but a hand-edited file may).
fn align(keys: &[i64], e: SeriesEntries) -> Vec<f64> {
    if e.keys == keys {
        return e.values;
    }
    let by_key: HashMap<i64, f64> = e.keys.into_iter().zip(e.values).collect();
    keys.iter()
        .map(|k| by_key.get(k).copied().unwrap_or(f64::NAN))
        .collect()
}

fn record_info(doc: &Document, v: Value) -> Parse<RecordInfo> {
    let d = doc.as_dict(v).ok_or("memtrack: expected a dict")?;
    let s = |key: &str| d.get(key).and_then(|v| doc.as_str(v)).map(str::to_string);
    let i = |key: &str| d.get(key).and_then(|v| doc.as_int(v));
    let mut info = RecordInfo {
        version: s("version").unwrap_or_default(),
        backend: s("backend").unwrap_or_default(),
        device_name: s("device_name"),
        device_total_bytes: i("device_total_bytes").map(|b| b.max(0) as u64),
        rank: i("rank"),
        world_size: i("world_size"),
        ..RecordInfo::default()
    };
    if let Some(argv) = d.get("argv").and_then(|v| doc.as_seq(v)) {
        info.argv = argv
            .iter()
            .filter_map(|a| doc.as_str(*a))
            .map(str::to_string)
            .collect();
    }
    if let Some(events) = d.get("marker_events").and_then(|v| doc.as_seq(v)) {
        for e in events {
            if let Some([name, idx]) = doc.as_seq(*e) {
                if let (Some(name), Some(op_index)) = (doc.as_str(*name), doc.as_int(*idx)) {
                    info.marker_events.push(Marker {
                        name: name.to_string(),
                        op_index,
                    });
                }
            }
        }
    }
    if let Some(exit) = d.get("exit").and_then(|v| doc.as_dict(v)) {
        info.exit = Some(ExitInfo {
            code: exit.get("code").and_then(|v| doc.as_int(v)),
            signal: exit.get("signal").and_then(|v| doc.as_int(v)),
            oom: exit
                .get("oom")
                .and_then(|v| doc.as_bool(v))
                .unwrap_or(false),
            exception: exit
                .get("exception")
                .and_then(|v| doc.as_str(v))
                .map(str::to_string),
            ..ExitInfo::default()
        });
    }
    if let Some(paths) = d.get("snapshot_paths").and_then(|v| doc.as_seq(v)) {
        info.snapshot_paths = paths
            .iter()
            .filter_map(|p| doc.as_str(*p))
            .map(str::to_string)
            .collect();
    }
    record_ext::read(doc, &d, &mut info)?;
    if let View::Dict(_) = doc.view(v) {
        Ok(info)
    } else {
        Err("memtrack: expected a dict".into())
    }
}

// ---- writing ----

/// The stats as pickle bytes that PyTorch's `MemoryTracker().load()` and `show_traces()` read,
/// keys in the order `save_stats()` writes them, after the `memtrack` key of a record file:
/// written first, it tells a reader at the first key that this is a record file, which
/// `tracker_stream` leaves to the generic reader, so the file is read once.
pub fn to_pickle_bytes(stats: &TrackerStats) -> Vec<u8> {
    let mut w = Writer::new();
    w.begin_dict();
    if let Some(r) = &stats.record {
        w.str("memtrack");
        write_record(&mut w, r);
        w.end_entry();
    }
    for s in Series::ALL {
        w.str(s.stats_key());
        w.begin_dict();
        let series = stats.series(s);
        for (i, name) in stats.names.iter().enumerate() {
            w.int(i as i64);
            w.str(name);
            w.float(series[i] / MIB);
            w.tuple(2);
            w.end_entry();
        }
        w.end_dict();
        w.end_entry();
    }
    w.str("markers");
    w.begin_dict();
    for m in &stats.markers {
        w.str(&m.name);
        w.int(m.op_index);
        w.end_entry();
    }
    w.end_dict();
    w.end_entry();
    w.str("num_alloc_retries");
    w.int(stats.num_alloc_retries);
    w.end_entry();
    w.str("op_index");
    w.int(stats.op_index.unwrap_or(stats.op_count() as i64));
    w.end_entry();
    w.end_dict();
    w.finish()
}

fn write_record(w: &mut Writer, r: &RecordInfo) {
    w.begin_dict();
    w.entry("version", |w| w.str(&r.version));
    w.entry("backend", |w| w.str(&r.backend));
    w.entry("device_name", |w| w.opt_str(r.device_name.as_deref()));
    w.entry("device_total_bytes", |w| {
        w.opt_int(r.device_total_bytes.map(|b| b as i64))
    });
    w.entry("argv", |w| {
        w.list(&r.argv, |w, a| w.str(a));
    });
    w.entry("rank", |w| w.opt_int(r.rank));
    w.entry("world_size", |w| w.opt_int(r.world_size));
    w.entry("marker_events", |w| {
        w.list(&r.marker_events, |w, m| {
            w.str(&m.name);
            w.int(m.op_index);
            w.tuple(2);
        });
    });
    if let Some(e) = &r.exit {
        w.entry("exit", |w| {
            w.begin_dict();
            w.entry("code", |w| w.opt_int(e.code));
            w.entry("signal", |w| w.opt_int(e.signal));
            w.entry("oom", |w| w.bool(e.oom));
            w.entry("exception", |w| w.opt_str(e.exception.as_deref()));
            record_ext::write_exit(w, e);
            w.end_dict();
        });
    }
    w.entry("snapshot_paths", |w| {
        w.list(&r.snapshot_paths, |w, p| w.str(p));
    });
    record_ext::write(w, r);
    w.end_dict();
}

/// Write stats to `path` through a temporary file and a rename, so no reader sees half a file.
pub fn write(stats: &TrackerStats, path: &Path) -> Result<()> {
    crate::output::write_atomically(path, &to_pickle_bytes(stats))
        .map_err(|e| Error::output(path, e))
}

/// The `memtrack` key's record parts (record_ext.rs) written into a stats file and read back:
/// here, where the whole file is written and read, so record_ext need not import this file.
#[cfg(test)]
mod record_ext_tests {
    use super::{from_document, to_pickle_bytes};
    use crate::model::modules::StateSnapshots;
    use crate::model::{
        Cycle, CycleEdge, CycleNode, CycleTensor, DeviceBytes, DeviceSample, DeviceSeries,
        ExitInfo, IterationModules, ModState, ModuleSnapshot, ModuleStats, OpNames, RecordInfo,
        Retained, RetainedOp, TrackerStats, Unmeasured,
    };

    /// `record` written into a one-op stats file and read back.
    fn round_trip(record: RecordInfo) -> RecordInfo {
        let mut names = OpNames::default();
        names.push("Net.forward.mm.default_0");
        let stats = TrackerStats {
            names,
            allocated: vec![1.0],
            active: vec![1.0],
            reserved: vec![1.0],
            record: Some(record),
            ..TrackerStats::default()
        };
        let bytes = to_pickle_bytes(&stats);
        let back = from_document(crate::pickle::parse(&bytes).unwrap()).unwrap();
        back.record.unwrap()
    }

    #[test]
    fn module_breakdown_survives_a_round_trip() {
        let snap = |t: i64| {
            ModuleSnapshot(vec![DeviceBytes {
                device: "cpu".into(),
                by_category: [t, 0, 0, 1, 0, 0, 0],
                total: t + 1,
            }])
        };
        let record = RecordInfo {
            backend: "cpu".into(),
            pid: Some(42),
            torch_version: Some("2.15.0".into()),
            observer: Some("compiled".into()),
            modules: vec![IterationModules {
                iteration: 1,
                first_op: 0,
                modules: vec![ModuleStats {
                    fqn: "Net".into(),
                    parameter_bytes: 64,
                    buffer_bytes: 0,
                    input_bytes: 8,
                    output_bytes: 4,
                    states: vec![StateSnapshots {
                        state: ModState::PeakBackward,
                        calls: vec![snap(10), snap(20)],
                    }],
                }],
                peak: snap(30),
            }],
            peak: Some(snap(40)),
            memory_stats: [("num_alloc_retries".to_string(), 3)].into(),
            exit: Some(ExitInfo {
                ended: Some("disconnected".into()),
                signal: Some(9),
                ..ExitInfo::default()
            }),
            ..RecordInfo::default()
        };
        let r = round_trip(record);
        assert_eq!(r.pid, Some(42));
        assert_eq!(r.torch_version.as_deref(), Some("2.15.0"));
        assert_eq!(r.observer.as_deref(), Some("compiled"));
        assert_eq!(r.memory_stats["num_alloc_retries"], 3);
        assert_eq!(r.peak, Some(snap(40)));
        let e = r.exit.unwrap();
        assert_eq!(
            (e.ended.as_deref(), e.signal),
            (Some("disconnected"), Some(9))
        );
        let m = &r.modules[0].modules[0];
        assert_eq!(
            (m.fqn.as_str(), m.parameter_bytes, m.output_bytes),
            ("Net", 64, 4)
        );
        let st = m.state(ModState::PeakBackward).unwrap();
        assert_eq!(st.calls, vec![snap(10), snap(20)]);
        assert_eq!(r.modules[0].peak, snap(30));
    }

    #[test]
    fn field_keys_survive_a_round_trip() {
        let cycle = Cycle {
            op_index: 1,
            generation: 2,
            nodes: vec![
                CycleNode {
                    label: "Holder".into(),
                    type_name: "__main__.Holder".into(),
                    tensor: None,
                },
                CycleNode {
                    label: "Tensor float32[4] cuda:0".into(),
                    type_name: "torch.Tensor".into(),
                    tensor: Some(CycleTensor {
                        bytes: 512,
                        storage: 140_000_000_000,
                        shape: vec![4],
                        dtype: "float32".into(),
                        device: "cuda:0".into(),
                        stack: vec!["train.py:3:make".into()],
                    }),
                },
            ],
            edges: vec![
                CycleEdge {
                    from: 0,
                    to: 0,
                    label: ".me".into(),
                },
                CycleEdge {
                    from: 0,
                    to: 1,
                    label: ".t".into(),
                },
            ],
            omitted_nodes: 3,
        };
        let series = DeviceSeries {
            nvml_index: 2,
            name: Some("NVIDIA H100".into()),
            uuid: Some("GPU-1234".into()),
            samples: vec![
                DeviceSample {
                    op_index: 0,
                    time_s: 0.0,
                    bytes: 500 << 20,
                },
                DeviceSample {
                    op_index: 1,
                    time_s: 0.05,
                    bytes: 600 << 20,
                },
            ],
        };
        let record = RecordInfo {
            backend: "cuda".into(),
            device_index: Some(1),
            device_uuid: Some("GPU-1234".into()),
            memory_stats_oom: [("num_ooms".to_string(), 1)].into(),
            device_memory: vec![series.clone()],
            cycles_watched: true,
            cycles: vec![cycle.clone()],
            iteration_starts: vec![12, 40, 77],
            ..RecordInfo::default()
        };
        let r = round_trip(record);
        assert_eq!(r.iteration_starts, vec![12, 40, 77]);
        assert_eq!(r.device_index, Some(1));
        assert_eq!(r.device_uuid.as_deref(), Some("GPU-1234"));
        assert_eq!(r.memory_stats_oom["num_ooms"], 1);
        assert_eq!(r.device_memory, vec![series]);
        assert!(r.cycles_watched);
        assert_eq!(r.cycles, vec![cycle]);
        assert!(r.allocator_device_series().is_some());

        // a file from before these keys reads as having none
        let old = TrackerStats {
            record: Some(RecordInfo::default()),
            ..TrackerStats::default()
        };
        let back = from_document(crate::pickle::parse(&to_pickle_bytes(&old)).unwrap()).unwrap();
        assert!(back.record.unwrap().cycles.is_empty());
    }

    #[test]
    fn unmeasured_counts_survive_a_round_trip() {
        let u = vec![
            Unmeasured {
                reason: "sparse".into(),
                category: "Gradient".into(),
                tensors: 3,
            },
            Unmeasured {
                reason: "meta".into(),
                category: "Activation".into(),
                tensors: 12,
            },
        ];
        let r = round_trip(RecordInfo {
            backend: "cpu".into(),
            unmeasured: u.clone(),
            ..RecordInfo::default()
        });
        assert_eq!(r.unmeasured, u);
        assert_eq!(
            r.unmeasured[0].how(),
            "of sparse layout: sized by their indices and values"
        );
        // a file from before the key has none
        assert!(round_trip(RecordInfo::default()).unmeasured.is_empty());
    }

    #[test]
    fn attached_survives_a_round_trip() {
        let a = crate::model::Attached {
            unix_time: 1_795_860_490.25,
            held: [
                ("parameters".to_string(), 203_304),
                ("gradients".to_string(), 0),
            ]
            .into_iter()
            .collect(),
        };
        let r = round_trip(RecordInfo {
            backend: "cpu".into(),
            attached: Some(a.clone()),
            ..RecordInfo::default()
        });
        assert_eq!(r.attached, Some(a));
        // a file recorded from the start has none
        assert!(round_trip(RecordInfo::default()).attached.is_none());
    }

    #[test]
    fn retained_ops_survive_a_round_trip() {
        let ret = Retained {
            iterations: 3,
            ops: vec![RetainedOp {
                op: "Net.forward.clone.default".into(),
                module: "Net".into(),
                category: "Activation".into(),
                bytes: 196_608,
                tensors: 3,
                iterations: 3,
            }],
        };
        let r = round_trip(RecordInfo {
            retained: Some(ret.clone()),
            ..RecordInfo::default()
        });
        assert_eq!(r.retained, Some(ret));
        // a file from before the key has none
        assert_eq!(round_trip(RecordInfo::default()).retained, None);
    }
}
