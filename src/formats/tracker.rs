//! MemoryTracker stats (`save_stats()`), and the same with memtrack's `memtrack` key.
//!
//! Layout (docs/format.md): `memories_{allocated,active,reserved}`: {op index: (op name, MiB)},
//! `markers`: {name: op index}, `num_alloc_retries`: int, `op_index`: int (absent in older
//! files), `memtrack`: dict (only in files `memtrack record` wrote).

use std::collections::HashMap;
use std::path::Path;

use crate::error::{Error, Result};
use crate::model::tracker::ExitInfo;
use crate::model::units::MIB;
use crate::model::{Marker, OpNames, RecordInfo, Series, TrackerStats};
use crate::pickle::{Dict, Document, Value, View};

type Parse<T> = std::result::Result<T, String>;

struct SeriesEntries {
    keys: Vec<i64>,
    values: Vec<f64>,
}

pub fn from_document(doc: &Document) -> Parse<TrackerStats> {
    let root = doc
        .as_dict(doc.root())
        .ok_or("stats: top-level value is not a dict")?;
    let mut stats = TrackerStats::default();

    let alloc_dict = series_dict(doc, &root, Series::Allocated)?;
    let n = alloc_dict.len();
    let mut keys = Vec::with_capacity(n);
    let mut values = Vec::with_capacity(n);
    let mut names = OpNames::with_capacity(n, n * 32);
    for (k, v) in alloc_dict.iter() {
        let (key, name, mib) = entry(doc, Series::Allocated, k, v)?;
        keys.push(key);
        values.push(mib * MIB);
        names.push(name);
    }
    // Python dicts keep insertion order, which MemoryTracker makes the op order; a file
    // written otherwise is put in op-index order.
    if !keys.windows(2).all(|w| w[0] < w[1]) {
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by_key(|&i| keys[i]);
        let mut sorted = OpNames::with_capacity(n, n * 32);
        for &i in &order {
            sorted.push(names.get(i));
        }
        names = sorted;
        values = order.iter().map(|&i| values[i]).collect();
        keys = order.iter().map(|&i| keys[i]).collect();
    }
    stats.names = names;
    stats.allocated = values;
    let allocated = SeriesEntries {
        keys,
        values: Vec::new(),
    };
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
        let aligned = align(&allocated.keys, e);
        match series {
            Series::Active => stats.active = aligned,
            _ => stats.reserved = aligned,
        }
    }

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
    Ok(stats)
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
    })
}

fn entry<'d>(doc: &'d Document, s: Series, k: Value, v: Value) -> Parse<(i64, &'d str, f64)> {
    let key = doc.as_int(k).ok_or_else(|| {
        format!(
            "{}: op index keys must be ints, found {}",
            s.stats_key(),
            doc.type_name(k)
        )
    })?;
    let bad = || {
        format!(
            "{}[{key}]: expected (op name, MiB) tuple, found {}",
            s.stats_key(),
            doc.type_name(v)
        )
    };
    let pair = doc.as_seq(v).ok_or_else(bad)?;
    let [name, mib] = pair else { return Err(bad()) };
    let name = doc.as_str(*name).ok_or_else(bad)?;
    let mib = doc.as_f64(*mib).ok_or_else(bad)?;
    Ok((key, name, mib))
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
        });
    }
    if let Some(paths) = d.get("snapshot_paths").and_then(|v| doc.as_seq(v)) {
        info.snapshot_paths = paths
            .iter()
            .filter_map(|p| doc.as_str(*p))
            .map(str::to_string)
            .collect();
    }
    if let View::Dict(_) = doc.view(v) {
        Ok(info)
    } else {
        Err("memtrack: expected a dict".into())
    }
}

// ---- writing ----

use serde_pickle::value::{HashableValue as K, Value as P};
use std::collections::BTreeMap;

/// The stats as pickle bytes that PyTorch's `MemoryTracker().load()` and `show_traces()` read.
pub fn to_pickle_bytes(stats: &TrackerStats) -> Vec<u8> {
    let mut root = BTreeMap::new();
    for s in Series::ALL {
        let series = stats.series(s);
        let dict: BTreeMap<K, P> = (0..stats.op_count())
            .map(|i| {
                let name = P::String(stats.names.get(i).to_string());
                (
                    K::I64(i as i64),
                    P::Tuple(vec![name, P::F64(series[i] / MIB)]),
                )
            })
            .collect();
        root.insert(K::String(s.stats_key().into()), P::Dict(dict));
    }
    let markers = stats
        .markers
        .iter()
        .map(|m| (K::String(m.name.clone()), P::I64(m.op_index)))
        .collect();
    root.insert(K::String("markers".into()), P::Dict(markers));
    root.insert(
        K::String("num_alloc_retries".into()),
        P::I64(stats.num_alloc_retries),
    );
    root.insert(
        K::String("op_index".into()),
        P::I64(stats.op_index.unwrap_or(stats.op_count() as i64)),
    );
    if let Some(r) = &stats.record {
        root.insert(K::String("memtrack".into()), record_value(r));
    }
    serde_pickle::value_to_vec(&P::Dict(root), serde_pickle::SerOptions::new())
        .expect("serializing plain pickle values cannot fail")
}

fn record_value(r: &RecordInfo) -> P {
    let mut d = BTreeMap::new();
    let mut put = |k: &str, v: P| {
        d.insert(K::String(k.into()), v);
    };
    let opt_s = |s: &Option<String>| s.clone().map_or(P::None, P::String);
    let opt_i = |i: Option<i64>| i.map_or(P::None, P::I64);
    put("version", P::String(r.version.clone()));
    put("backend", P::String(r.backend.clone()));
    put("device_name", opt_s(&r.device_name));
    put(
        "device_total_bytes",
        opt_i(r.device_total_bytes.map(|b| b as i64)),
    );
    put(
        "argv",
        P::List(r.argv.iter().cloned().map(P::String).collect()),
    );
    put("rank", opt_i(r.rank));
    put("world_size", opt_i(r.world_size));
    put(
        "marker_events",
        P::List(
            r.marker_events
                .iter()
                .map(|m| P::Tuple(vec![P::String(m.name.clone()), P::I64(m.op_index)]))
                .collect(),
        ),
    );
    if let Some(e) = &r.exit {
        let mut x = BTreeMap::new();
        x.insert(K::String("code".into()), opt_i(e.code));
        x.insert(K::String("signal".into()), opt_i(e.signal));
        x.insert(K::String("oom".into()), P::Bool(e.oom));
        x.insert(K::String("exception".into()), opt_s(&e.exception));
        put("exit", P::Dict(x));
    }
    put(
        "snapshot_paths",
        P::List(r.snapshot_paths.iter().cloned().map(P::String).collect()),
    );
    P::Dict(d)
}

/// Write stats to `path` through a temporary file and a rename, so no reader sees half a file.
pub fn write(stats: &TrackerStats, path: &Path) -> Result<()> {
    crate::output::write_atomically(path, &to_pickle_bytes(stats))
        .map_err(|e| Error::output(path, e))
}
