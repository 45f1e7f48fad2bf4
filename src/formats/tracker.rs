//! MemoryTracker stats (`save_stats()`), and the same with memtrack's `memtrack` key.
//!
//! Layout (docs/format.md): `memories_{allocated,active,reserved}`: {op index: (op name, MiB)},
//! `markers`: {name: op index}, `num_alloc_retries`: int, `op_index`: int (absent in older
//! files), `memtrack`: dict (only in files `memtrack record` wrote).

use std::collections::HashMap;
use std::path::Path;

use crate::error::{Error, Result};
use crate::model::modules::StateSnapshots;
use crate::model::tracker::ExitInfo;
use crate::model::units::MIB;
use crate::model::{
    DeviceBytes, IterationModules, Marker, ModState, ModuleStats, OpNames, RecordInfo, Series,
    Snapshot, TrackerStats, CATEGORIES,
};
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
            ended: exit
                .get("ended")
                .and_then(|v| doc.as_str(v))
                .map(str::to_string),
            oom_op_index: exit.get("oom_op_index").and_then(|v| doc.as_int(v)),
        });
    }
    if let Some(paths) = d.get("snapshot_paths").and_then(|v| doc.as_seq(v)) {
        info.snapshot_paths = paths
            .iter()
            .filter_map(|p| doc.as_str(*p))
            .map(str::to_string)
            .collect();
    }
    info.pid = i("pid");
    info.torch_version = s("torch_version");
    if let Some(m) = d.get("modules") {
        info.modules = modules(doc, m)?;
    }
    if let Some(p) = d.get("peak").filter(|p| !doc.is_none(*p)) {
        info.peak = Some(snapshot(doc, p).map_err(|e| format!("memtrack.peak: {e}"))?);
    }
    if let Some(ms) = d.get("memory_stats").and_then(|v| doc.as_dict(v)) {
        for (k, v) in ms.iter() {
            if let (Some(k), Some(v)) = (doc.as_str(k), doc.as_int(v)) {
                info.memory_stats.insert(k.to_string(), v);
            }
        }
    }
    if let Some(errs) = d.get("agent_errors").and_then(|v| doc.as_seq(v)) {
        info.agent_errors = errs
            .iter()
            .filter_map(|e| doc.as_str(*e))
            .map(str::to_string)
            .collect();
    }
    if let View::Dict(_) = doc.view(v) {
        Ok(info)
    } else {
        Err("memtrack: expected a dict".into())
    }
}

/// `memtrack.modules`: a list of iterations (docs/format.md, "Module breakdown").
fn modules(doc: &Document, v: Value) -> Parse<Vec<IterationModules>> {
    let iters = doc
        .as_seq(v)
        .ok_or("memtrack.modules: expected a list of iterations")?;
    let mut out = Vec::with_capacity(iters.len());
    for (n, it) in iters.iter().enumerate() {
        let ctx = |e: String| format!("memtrack.modules[{n}]: {e}");
        let d = doc
            .as_dict(*it)
            .ok_or_else(|| ctx("expected a dict".into()))?;
        let int = |k: &str| d.get(k).and_then(|v| doc.as_int(v)).unwrap_or(0);
        let mut iteration = IterationModules {
            iteration: int("iteration").max(0) as usize,
            first_op: int("first_op").max(0) as usize,
            modules: Vec::new(),
            peak: match d.get("peak") {
                Some(p) => snapshot(doc, p).map_err(ctx)?,
                None => Snapshot::default(),
            },
        };
        let mods = d
            .get("modules")
            .and_then(|m| doc.as_seq(m))
            .ok_or_else(|| ctx("'modules' is not a list".into()))?;
        for m in mods {
            let md = doc
                .as_dict(*m)
                .ok_or_else(|| ctx("a module is not a dict".into()))?;
            let mint = |k: &str| md.get(k).and_then(|v| doc.as_int(v)).unwrap_or(0);
            let mut stats = ModuleStats {
                fqn: md
                    .get("fqn")
                    .and_then(|v| doc.as_str(v))
                    .unwrap_or("")
                    .to_string(),
                parameter_bytes: mint("parameter_bytes"),
                buffer_bytes: mint("buffer_bytes"),
                input_bytes: mint("input_bytes"),
                output_bytes: mint("output_bytes"),
                states: Vec::new(),
            };
            for st in md.get("states").and_then(|v| doc.as_seq(v)).unwrap_or(&[]) {
                let Some([name, calls]) = doc.as_seq(*st) else {
                    return Err(ctx(format!(
                        "{}: a state is not a (name, calls) pair",
                        stats.fqn
                    )));
                };
                let name = doc.as_str(*name).unwrap_or("");
                let state = ModState::from_name(name)
                    .ok_or_else(|| ctx(format!("{}: unknown state '{name}'", stats.fqn)))?;
                let calls = doc
                    .as_seq(*calls)
                    .ok_or_else(|| ctx(format!("{}: {name}: calls is not a list", stats.fqn)))?
                    .iter()
                    .map(|c| snapshot(doc, *c))
                    .collect::<Parse<Vec<_>>>()
                    .map_err(ctx)?;
                stats.states.push(StateSnapshots { state, calls });
            }
            iteration.modules.push(stats);
        }
        out.push(iteration);
    }
    Ok(out)
}

/// `{device: [Parameter, Buffer, Gradient, Activation, Temp, Optstate, Other, Total]}`.
fn snapshot(doc: &Document, v: Value) -> Parse<Snapshot> {
    let d = doc
        .as_dict(v)
        .ok_or_else(|| format!("snapshot: expected a dict, found {}", doc.type_name(v)))?;
    let mut out = Vec::with_capacity(d.len());
    for (k, v) in d.iter() {
        let device = doc.as_str(k).ok_or("snapshot: a device is not a string")?;
        let bad = || {
            format!(
                "snapshot['{device}']: expected a list of {} ints",
                CATEGORIES.len() + 1
            )
        };
        let vals = doc.as_seq(v).ok_or_else(bad)?;
        if vals.len() != CATEGORIES.len() + 1 {
            return Err(bad());
        }
        let mut by_category = [0i64; 7];
        for (slot, x) in by_category.iter_mut().zip(vals) {
            *slot = doc.as_int(*x).ok_or_else(bad)?;
        }
        let total = doc.as_int(vals[7]).ok_or_else(bad)?;
        out.push(DeviceBytes {
            device: device.to_string(),
            by_category,
            total,
        });
    }
    Ok(Snapshot(out))
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
        x.insert(K::String("ended".into()), opt_s(&e.ended));
        x.insert(K::String("oom_op_index".into()), opt_i(e.oom_op_index));
        put("exit", P::Dict(x));
    }
    put(
        "snapshot_paths",
        P::List(r.snapshot_paths.iter().cloned().map(P::String).collect()),
    );
    put("pid", opt_i(r.pid));
    put("torch_version", opt_s(&r.torch_version));
    put(
        "categories",
        P::List(
            CATEGORIES
                .iter()
                .chain(std::iter::once(&"Total"))
                .map(|c| P::String(c.to_string()))
                .collect(),
        ),
    );
    put(
        "modules",
        P::List(r.modules.iter().map(iteration_value).collect()),
    );
    put("peak", r.peak.as_ref().map_or(P::None, snapshot_value));
    put(
        "memory_stats",
        P::Dict(
            r.memory_stats
                .iter()
                .map(|(k, v)| (K::String(k.clone()), P::I64(*v)))
                .collect(),
        ),
    );
    put(
        "agent_errors",
        P::List(r.agent_errors.iter().cloned().map(P::String).collect()),
    );
    P::Dict(d)
}

fn dict(entries: Vec<(&str, P)>) -> P {
    P::Dict(
        entries
            .into_iter()
            .map(|(k, v)| (K::String(k.to_string()), v))
            .collect(),
    )
}

fn iteration_value(it: &IterationModules) -> P {
    let modules = it
        .modules
        .iter()
        .map(|m| {
            let states = m
                .states
                .iter()
                .map(|s| {
                    P::Tuple(vec![
                        P::String(s.state.name().to_string()),
                        P::List(s.calls.iter().map(snapshot_value).collect()),
                    ])
                })
                .collect();
            dict(vec![
                ("fqn", P::String(m.fqn.clone())),
                ("parameter_bytes", P::I64(m.parameter_bytes)),
                ("buffer_bytes", P::I64(m.buffer_bytes)),
                ("input_bytes", P::I64(m.input_bytes)),
                ("output_bytes", P::I64(m.output_bytes)),
                ("states", P::List(states)),
            ])
        })
        .collect();
    dict(vec![
        ("iteration", P::I64(it.iteration as i64)),
        ("first_op", P::I64(it.first_op as i64)),
        ("peak", snapshot_value(&it.peak)),
        ("modules", P::List(modules)),
    ])
}

fn snapshot_value(s: &Snapshot) -> P {
    P::Dict(
        s.0.iter()
            .map(|d| {
                let mut v: Vec<P> = d.by_category.iter().map(|b| P::I64(*b)).collect();
                v.push(P::I64(d.total));
                (K::String(d.device.clone()), P::List(v))
            })
            .collect(),
    )
}

/// Write stats to `path` through a temporary file and a rename, so no reader sees half a file.
pub fn write(stats: &TrackerStats, path: &Path) -> Result<()> {
    crate::output::write_atomically(path, &to_pickle_bytes(stats))
        .map_err(|e| Error::output(path, e))
}
