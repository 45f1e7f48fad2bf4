//! The parts of the `memtrack` key that `memtrack record` added: process facts, the module
//! breakdown, peaks, allocator stats (docs/format.md). Reading takes a decoded document;
//! writing adds entries to the `memtrack` dict that `tracker::to_pickle_bytes` has open.

use crate::model::modules::StateSnapshots;
use crate::model::{
    DeviceBytes, ExitInfo, IterationModules, ModState, ModuleSnapshot, ModuleStats, RecordInfo,
    CATEGORIES,
};
use crate::pickle::writer::Writer;
use crate::pickle::{Dict, Document, Value};

type Parse<T> = std::result::Result<T, String>;

// ---- reading ----

/// Fill `info` from the record keys beyond the first version's (all optional).
pub fn read(doc: &Document, d: &Dict, info: &mut RecordInfo) -> Parse<()> {
    let s = |key: &str| d.get(key).and_then(|v| doc.as_str(v)).map(str::to_string);
    let strings = |key: &str| -> Vec<String> {
        d.get(key)
            .and_then(|v| doc.as_seq(v))
            .map(|l| {
                l.iter()
                    .filter_map(|x| doc.as_str(*x))
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    info.pid = d.get("pid").and_then(|v| doc.as_int(v));
    info.torch_version = s("torch_version");
    info.agent_errors = strings("agent_errors");
    if let (Some(exit), Some(e)) = (
        d.get("exit").and_then(|v| doc.as_dict(v)),
        info.exit.as_mut(),
    ) {
        read_exit(doc, &exit, e);
    }
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
    Ok(())
}

fn read_exit(doc: &Document, exit: &Dict, e: &mut ExitInfo) {
    e.ended = exit
        .get("ended")
        .and_then(|v| doc.as_str(v))
        .map(str::to_string);
    e.oom_op_index = exit.get("oom_op_index").and_then(|v| doc.as_int(v));
}

/// `memtrack.modules`: a list of iterations.
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
                None => ModuleSnapshot::default(),
            },
        };
        let mods = d
            .get("modules")
            .and_then(|m| doc.as_seq(m))
            .ok_or_else(|| ctx("'modules' is not a list".into()))?;
        for m in mods {
            iteration.modules.push(module(doc, *m).map_err(ctx)?);
        }
        out.push(iteration);
    }
    Ok(out)
}

fn module(doc: &Document, m: Value) -> Parse<ModuleStats> {
    let md = doc.as_dict(m).ok_or("a module is not a dict")?;
    let int = |k: &str| md.get(k).and_then(|v| doc.as_int(v)).unwrap_or(0);
    let mut stats = ModuleStats {
        fqn: md
            .get("fqn")
            .and_then(|v| doc.as_str(v))
            .unwrap_or("")
            .to_string(),
        parameter_bytes: int("parameter_bytes"),
        buffer_bytes: int("buffer_bytes"),
        input_bytes: int("input_bytes"),
        output_bytes: int("output_bytes"),
        states: Vec::new(),
    };
    let states = md.get("states").and_then(|v| doc.as_seq(v)).unwrap_or(&[]);
    for st in states {
        let fqn = &stats.fqn;
        let Some([name, calls]) = doc.as_seq(*st) else {
            return Err(format!("{fqn}: a state is not a (name, calls) pair"));
        };
        let name = doc.as_str(*name).unwrap_or("");
        let state =
            ModState::from_name(name).ok_or_else(|| format!("{fqn}: unknown state '{name}'"))?;
        let calls = doc
            .as_seq(*calls)
            .ok_or_else(|| format!("{fqn}: {name}: calls is not a list"))?
            .iter()
            .map(|c| snapshot(doc, *c))
            .collect::<Parse<Vec<_>>>()?;
        stats.states.push(StateSnapshots { state, calls });
    }
    Ok(stats)
}

/// `{device: [Parameter, Buffer, Gradient, Activation, Temp, Optstate, Other, Total]}`.
fn snapshot(doc: &Document, v: Value) -> Parse<ModuleSnapshot> {
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
    Ok(ModuleSnapshot(out))
}

// ---- writing ----

fn str_list(w: &mut Writer, items: &[String]) {
    w.begin_list();
    for s in items {
        w.str(s);
        w.end_element();
    }
    w.end_list();
}

/// The record keys beyond the first version's, as entries of the open `memtrack` dict.
pub fn write(w: &mut Writer, r: &RecordInfo) {
    w.entry("pid", |w| w.opt_int(r.pid));
    w.entry("torch_version", |w| w.opt_str(r.torch_version.as_deref()));
    w.entry("categories", |w| {
        w.begin_list();
        for c in CATEGORIES.iter().chain(std::iter::once(&"Total")) {
            w.str(c);
            w.end_element();
        }
        w.end_list();
    });
    w.entry("modules", |w| {
        w.begin_list();
        for it in &r.modules {
            iteration(w, it);
            w.end_element();
        }
        w.end_list();
    });
    w.entry("peak", |w| match &r.peak {
        Some(p) => snapshot_value(w, p),
        None => w.none(),
    });
    w.entry("memory_stats", |w| {
        w.begin_dict();
        for (k, v) in &r.memory_stats {
            w.str(k);
            w.int(*v);
            w.end_entry();
        }
        w.end_dict();
    });
    w.entry("agent_errors", |w| str_list(w, &r.agent_errors));
}

/// The exit keys beyond the first version's, as entries of the open `exit` dict.
pub fn write_exit(w: &mut Writer, e: &ExitInfo) {
    w.entry("ended", |w| w.opt_str(e.ended.as_deref()));
    w.entry("oom_op_index", |w| w.opt_int(e.oom_op_index));
}

fn iteration(w: &mut Writer, it: &IterationModules) {
    w.begin_dict();
    w.entry("iteration", |w| w.int(it.iteration as i64));
    w.entry("first_op", |w| w.int(it.first_op as i64));
    w.entry("peak", |w| snapshot_value(w, &it.peak));
    w.entry("modules", |w| {
        w.begin_list();
        for m in &it.modules {
            w.begin_dict();
            w.entry("fqn", |w| w.str(&m.fqn));
            w.entry("parameter_bytes", |w| w.int(m.parameter_bytes));
            w.entry("buffer_bytes", |w| w.int(m.buffer_bytes));
            w.entry("input_bytes", |w| w.int(m.input_bytes));
            w.entry("output_bytes", |w| w.int(m.output_bytes));
            w.entry("states", |w| {
                w.begin_list();
                for s in &m.states {
                    w.str(s.state.name());
                    w.begin_list();
                    for c in &s.calls {
                        snapshot_value(w, c);
                        w.end_element();
                    }
                    w.end_list();
                    w.tuple(2);
                    w.end_element();
                }
                w.end_list();
            });
            w.end_dict();
            w.end_element();
        }
        w.end_list();
    });
    w.end_dict();
}

fn snapshot_value(w: &mut Writer, s: &ModuleSnapshot) {
    w.begin_dict();
    for d in &s.0 {
        w.str(&d.device);
        w.begin_list();
        for b in d.by_category.iter().chain(std::iter::once(&d.total)) {
            w.int(*b);
            w.end_element();
        }
        w.end_list();
        w.end_entry();
    }
    w.end_dict();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::tracker;
    use crate::model::{OpNames, TrackerStats};

    #[test]
    fn module_breakdown_survives_a_round_trip() {
        let snap = |t: i64| {
            ModuleSnapshot(vec![DeviceBytes {
                device: "cpu".into(),
                by_category: [t, 0, 0, 1, 0, 0, 0],
                total: t + 1,
            }])
        };
        let mut names = OpNames::default();
        names.push("Net.forward.mm.default_0");
        let record = RecordInfo {
            backend: "cpu".into(),
            pid: Some(42),
            torch_version: Some("2.15.0".into()),
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
        let stats = TrackerStats {
            names,
            allocated: vec![1.0],
            active: vec![1.0],
            reserved: vec![1.0],
            record: Some(record),
            ..TrackerStats::default()
        };
        let bytes = tracker::to_pickle_bytes(&stats);
        let doc = crate::pickle::parse(&bytes).unwrap();
        let back = tracker::from_document(doc).unwrap();
        let r = back.record.unwrap();
        assert_eq!(r.pid, Some(42));
        assert_eq!(r.torch_version.as_deref(), Some("2.15.0"));
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
}
