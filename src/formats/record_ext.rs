//! The parts of the `memtrack` key that `memtrack record` added: process facts, the module
//! breakdown, peaks, allocator stats (docs/format.md). Reading takes a decoded document;
//! writing adds entries to the `memtrack` dict that `tracker::to_pickle_bytes` has open.

use std::collections::BTreeMap;

use crate::model::modules::StateSnapshots;
use crate::model::{
    Attached, CompileInfo, CompiledRegion, Cycle, CycleEdge, CycleNode, CycleTensor, DeviceBytes,
    DeviceSample, DeviceSeries, ExitInfo, IterationModules, ModState, ModuleSnapshot, ModuleStats,
    RecordInfo, Retained, RetainedOp, ThreadInfo, Unmeasured, CATEGORIES,
};
use crate::pickle::writer::Writer;
use crate::pickle::{Dict, Document, Value};

use super::error::{LayoutError, Parse};

// ---- reading ----

/// Fill `info` from the record keys beyond the first version's (all optional).
pub fn read(doc: &Document, d: &Dict, info: &mut RecordInfo) -> Parse<()> {
    let s = |key: &str| d.get(key).and_then(|v| doc.as_str(v)).map(str::to_string);
    let strings = |key: &str| string_list(doc, d.get(key));
    info.pid = d.get("pid").and_then(|v| doc.as_int(v));
    info.torch_version = s("torch_version");
    info.observer = s("observer");
    info.agent_errors = strings("agent_errors");
    if let Some(starts) = d.get("iteration_starts").and_then(|v| doc.as_seq(v)) {
        info.iteration_starts = starts
            .iter()
            .map(|v| doc.as_int(*v))
            .collect::<Option<Vec<i64>>>()
            .ok_or("memtrack.iteration_starts: expected a list of ints")?;
    }
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
    info.memory_stats = int_dict(doc, d.get("memory_stats"));
    info.memory_stats_oom = int_dict(doc, d.get("memory_stats_oom"));
    info.device_index = d.get("device_index").and_then(|v| doc.as_int(v));
    info.device_uuid = s("device_uuid");
    if let Some(v) = d.get("device_memory") {
        info.device_memory = device_memory(doc, v)?;
    }
    if let Some(a) = d.get("attached").and_then(|v| doc.as_dict(v)) {
        info.attached = Some(Attached {
            unix_time: a
                .get("unix_time")
                .and_then(|v| doc.as_f64(v))
                .ok_or("memtrack.attached.unix_time: expected a number")?,
            held: int_dict(doc, a.get("held")),
        });
    }
    info.cycles_watched = d
        .get("cycles_watched")
        .and_then(|v| doc.as_bool(v))
        .unwrap_or(false);
    if let Some(v) = d.get("cycles") {
        info.cycles = cycles(doc, v)?;
    }
    if let Some(v) = d.get("unmeasured") {
        info.unmeasured = unmeasured(doc, v)?;
    }
    if let Some(v) = d.get("retained") {
        info.retained = Some(retained(doc, v)?);
    }
    if let Some(v) = d.get("threads") {
        info.threads = threads(doc, v)?;
    }
    if let Some(v) = d.get("estimate").filter(|v| !doc.is_none(*v)) {
        info.estimate = Some(super::estimate_ext::read(doc, v)?);
    }
    if let Some(v) = d.get("thread_runs") {
        info.thread_runs = thread_runs(doc, v)?;
    }
    info.threads_unrecorded = strings("threads_unrecorded");
    if let Some(c) = d.get("compile").and_then(|v| doc.as_dict(v)) {
        let int = |k: &str| c.get(k).and_then(|v| doc.as_int(v)).unwrap_or(0);
        let mut regions = Vec::new();
        if let Some(list) = c.get("regions").and_then(|v| doc.as_seq(v)) {
            for item in list {
                let r = doc
                    .as_dict(*item)
                    .ok_or("memtrack.compile.regions: expected dicts")?;
                regions.push(CompiledRegion {
                    region: r
                        .get("region")
                        .and_then(|v| doc.as_str(v))
                        .unwrap_or("?")
                        .to_string(),
                    graph_calls: r
                        .get("graph_calls")
                        .and_then(|v| doc.as_int(v))
                        .unwrap_or(0),
                });
            }
        }
        info.compile = Some(CompileInfo {
            frames_ok: int("frames_ok"),
            frames_total: int("frames_total"),
            graph_breaks: int("graph_breaks"),
            graph_break_reasons: string_list(doc, c.get("graph_break_reasons")),
            regions,
        });
    }
    Ok(())
}

/// `memtrack.unmeasured`: `[{reason: str, category: str, tensors: int}]`.
fn unmeasured(doc: &Document, v: Value) -> Parse<Vec<Unmeasured>> {
    let list = doc
        .as_seq(v)
        .ok_or("memtrack.unmeasured: expected a list")?;
    let mut out = Vec::with_capacity(list.len());
    for (n, item) in list.iter().enumerate() {
        let bad = || {
            LayoutError(format!(
                "memtrack.unmeasured[{n}]: expected {{reason: str, category: str, tensors: int}}"
            ))
        };
        let d = doc.as_dict(*item).ok_or_else(bad)?;
        let s = |k: &str| d.get(k).and_then(|v| doc.as_str(v)).map(str::to_string);
        out.push(Unmeasured {
            reason: s("reason").ok_or_else(bad)?,
            category: s("category").ok_or_else(bad)?,
            tensors: d
                .get("tensors")
                .and_then(|v| doc.as_int(v))
                .ok_or_else(bad)?,
        });
    }
    Ok(out)
}

/// `memtrack.threads`: `[{id: int, name: str, ops: int, forward_calls: int}]`.
fn threads(doc: &Document, v: Value) -> Parse<Vec<ThreadInfo>> {
    let list = doc.as_seq(v).ok_or("memtrack.threads: expected a list")?;
    let mut out = Vec::with_capacity(list.len());
    for (n, item) in list.iter().enumerate() {
        let bad = || {
            LayoutError(format!(
                "memtrack.threads[{n}]: expected {{id: int, name: str, ops: int, forward_calls: int}}"
            ))
        };
        let d = doc.as_dict(*item).ok_or_else(bad)?;
        let int = |k: &str| d.get(k).and_then(|v| doc.as_int(v)).ok_or_else(bad);
        out.push(ThreadInfo {
            id: int("id")?,
            name: d
                .get("name")
                .and_then(|v| doc.as_str(v))
                .ok_or_else(bad)?
                .to_string(),
            ops: int("ops")?,
            forward_calls: int("forward_calls")?,
        });
    }
    Ok(out)
}

/// `memtrack.thread_runs`: `[(first op, thread id)]`.
fn thread_runs(doc: &Document, v: Value) -> Parse<Vec<(i64, i64)>> {
    let what = "memtrack.thread_runs: expected a list of (int, int)";
    let list = doc.as_seq(v).ok_or(what)?;
    list.iter()
        .map(|item| match doc.as_seq(*item) {
            Some([a, b]) => match (doc.as_int(*a), doc.as_int(*b)) {
                (Some(a), Some(b)) => Ok((a, b)),
                _ => Err(what.into()),
            },
            _ => Err(what.into()),
        })
        .collect()
}

/// `memtrack.retained`: `{iterations: int, ops: [{op: str, module: str, category: str, bytes:
/// int, tensors: int, iterations: int}]}`.
fn retained(doc: &Document, v: Value) -> Parse<Retained> {
    let what = "memtrack.retained: expected {iterations: int, ops: [{op, module, category, \
                bytes, tensors, iterations}]}";
    let d = doc.as_dict(v).ok_or(what)?;
    let iterations = d
        .get("iterations")
        .and_then(|v| doc.as_int(v))
        .ok_or(what)?;
    let list = d.get("ops").and_then(|v| doc.as_seq(v)).ok_or(what)?;
    let mut ops = Vec::with_capacity(list.len());
    for item in list {
        let o = doc.as_dict(*item).ok_or(what)?;
        let s = |k: &str| o.get(k).and_then(|v| doc.as_str(v)).map(str::to_string);
        let i = |k: &str| o.get(k).and_then(|v| doc.as_int(v));
        ops.push(RetainedOp {
            op: s("op").ok_or(what)?,
            module: s("module").ok_or(what)?,
            category: s("category").ok_or(what)?,
            bytes: i("bytes").ok_or(what)?,
            tensors: i("tensors").ok_or(what)?,
            iterations: i("iterations").ok_or(what)?,
        });
    }
    Ok(Retained { iterations, ops })
}

/// `[str]`; items of other types are skipped.
fn string_list(doc: &Document, v: Option<Value>) -> Vec<String> {
    v.and_then(|v| doc.as_seq(v))
        .map(|l| {
            l.iter()
                .filter_map(|x| doc.as_str(*x))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// `{str: int}`; entries of other types are skipped.
fn int_dict(doc: &Document, v: Option<Value>) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    if let Some(ms) = v.and_then(|v| doc.as_dict(v)) {
        for (k, v) in ms.iter() {
            if let (Some(k), Some(v)) = (doc.as_str(k), doc.as_int(v)) {
                out.insert(k.to_string(), v);
            }
        }
    }
    out
}

/// `memtrack.device_memory`: per GPU, the samples as three parallel lists.
fn device_memory(doc: &Document, v: Value) -> Parse<Vec<DeviceSeries>> {
    let list = doc
        .as_seq(v)
        .ok_or("memtrack.device_memory: expected a list")?;
    let mut out = Vec::with_capacity(list.len());
    for (n, item) in list.iter().enumerate() {
        let bad = |what: &str| LayoutError(format!("memtrack.device_memory[{n}]: {what}"));
        let d = doc.as_dict(*item).ok_or_else(|| bad("expected a dict"))?;
        let seq = |k: &str| -> Parse<&[Value]> {
            d.get(k)
                .and_then(|v| doc.as_seq(v))
                .ok_or_else(|| bad(&format!("'{k}' is not a list")))
        };
        let (ops, times, bytes) = (seq("op_index")?, seq("time_s")?, seq("bytes")?);
        if ops.len() != times.len() || ops.len() != bytes.len() {
            return Err(bad("op_index, time_s and bytes differ in length"));
        }
        let mut samples = Vec::with_capacity(ops.len());
        for ((o, t), b) in ops.iter().zip(times).zip(bytes) {
            match (doc.as_int(*o), doc.as_f64(*t), doc.as_int(*b)) {
                (Some(op_index), Some(time_s), Some(bytes)) => samples.push(DeviceSample {
                    op_index,
                    time_s,
                    bytes,
                }),
                _ => return Err(bad("a sample is not (int, float, int)")),
            }
        }
        let s = |k: &str| d.get(k).and_then(|v| doc.as_str(v)).map(str::to_string);
        out.push(DeviceSeries {
            nvml_index: d.get("nvml_index").and_then(|v| doc.as_int(v)).unwrap_or(0),
            name: s("name"),
            uuid: s("uuid"),
            samples,
        });
    }
    Ok(out)
}

/// `memtrack.cycles`: a list of cycles, each its nodes and labelled edges.
fn cycles(doc: &Document, v: Value) -> Parse<Vec<Cycle>> {
    let list = doc.as_seq(v).ok_or("memtrack.cycles: expected a list")?;
    let mut out = Vec::with_capacity(list.len());
    for (n, item) in list.iter().enumerate() {
        let bad = |what: String| LayoutError(format!("memtrack.cycles[{n}]: {what}"));
        let d = doc
            .as_dict(*item)
            .ok_or_else(|| bad("expected a dict".into()))?;
        let int = |k: &str| d.get(k).and_then(|v| doc.as_int(v)).unwrap_or(0);
        let mut c = Cycle {
            op_index: int("op_index"),
            generation: int("generation"),
            omitted_nodes: int("omitted_nodes"),
            ..Cycle::default()
        };
        let nodes = d
            .get("nodes")
            .and_then(|v| doc.as_seq(v))
            .ok_or_else(|| bad("'nodes' is not a list".into()))?;
        for (k, node) in nodes.iter().enumerate() {
            c.nodes
                .push(cycle_node(doc, *node).map_err(|e| bad(format!("nodes[{k}]: {e}")))?);
        }
        let edges = d
            .get("edges")
            .and_then(|v| doc.as_seq(v))
            .ok_or_else(|| bad("'edges' is not a list".into()))?;
        for e in edges {
            let Some([from, to, label]) = doc.as_seq(*e) else {
                return Err(bad("an edge is not (from, to, label)".into()));
            };
            let (Some(from), Some(to), Some(label)) =
                (doc.as_int(*from), doc.as_int(*to), doc.as_str(*label))
            else {
                return Err(bad("an edge is not (int, int, str)".into()));
            };
            let ok = |i: i64| (0..c.nodes.len() as i64).contains(&i);
            if !ok(from) || !ok(to) {
                return Err(bad(format!(
                    "edge {from} -> {to} names a node beyond the {} there are",
                    c.nodes.len()
                )));
            }
            c.edges.push(CycleEdge {
                from: from as usize,
                to: to as usize,
                label: label.to_string(),
            });
        }
        out.push(c);
    }
    Ok(out)
}

fn cycle_node(doc: &Document, v: Value) -> Parse<CycleNode> {
    let d = doc.as_dict(v).ok_or("expected a dict")?;
    let s = |k: &str| {
        d.get(k)
            .and_then(|v| doc.as_str(v))
            .unwrap_or("")
            .to_string()
    };
    let tensor = match d.get("tensor").filter(|t| !doc.is_none(*t)) {
        None => None,
        Some(t) => {
            let t = doc.as_dict(t).ok_or("'tensor' is not a dict")?;
            let int = |k: &str| t.get(k).and_then(|v| doc.as_int(v)).unwrap_or(0);
            let ts = |k: &str| {
                t.get(k)
                    .and_then(|v| doc.as_str(v))
                    .unwrap_or("")
                    .to_string()
            };
            let seq = |k: &str| t.get(k).and_then(|v| doc.as_seq(v)).unwrap_or(&[]);
            Some(CycleTensor {
                bytes: int("bytes"),
                storage: int("storage"),
                shape: seq("shape").iter().filter_map(|x| doc.as_int(*x)).collect(),
                dtype: ts("dtype"),
                device: ts("device"),
                stack: seq("stack")
                    .iter()
                    .filter_map(|x| doc.as_str(*x))
                    .map(str::to_string)
                    .collect(),
            })
        }
    };
    Ok(CycleNode {
        label: s("label"),
        type_name: s("type"),
        tensor,
    })
}

fn read_exit(doc: &Document, exit: &Dict, e: &mut ExitInfo) {
    e.ended = exit
        .get("ended")
        .and_then(|v| doc.as_str(v))
        .map(str::to_string);
    e.exception_at = exit
        .get("exception_at")
        .and_then(|v| doc.as_seq(v))
        .and_then(|t| match t {
            [f, l] => Some((doc.as_str(*f)?.to_string(), doc.as_int(*l)?)),
            _ => None,
        });
    e.oom_op_index = exit.get("oom_op_index").and_then(|v| doc.as_int(v));
}

/// `memtrack.modules`: a list of iterations.
fn modules(doc: &Document, v: Value) -> Parse<Vec<IterationModules>> {
    let iters = doc
        .as_seq(v)
        .ok_or("memtrack.modules: expected a list of iterations")?;
    let mut out = Vec::with_capacity(iters.len());
    for (n, it) in iters.iter().enumerate() {
        let ctx = |e: LayoutError| LayoutError(format!("memtrack.modules[{n}]: {e}"));
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
            return Err(LayoutError(format!(
                "{fqn}: a state is not a (name, calls) pair"
            )));
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
            LayoutError(format!(
                "snapshot['{device}']: expected a list of {} ints",
                CATEGORIES.len() + 1
            ))
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
    w.list(items, |w, s| w.str(s));
}

/// The record keys beyond the first version's, as entries of the open `memtrack` dict.
pub fn write(w: &mut Writer, r: &RecordInfo) {
    w.entry("pid", |w| w.opt_int(r.pid));
    w.entry("torch_version", |w| w.opt_str(r.torch_version.as_deref()));
    w.entry("observer", |w| w.opt_str(r.observer.as_deref()));
    w.entry("iteration_starts", |w| {
        w.list(&r.iteration_starts, |w, &i| w.int(i));
    });
    if let Some(a) = &r.attached {
        w.entry("attached", |w| {
            w.begin_dict();
            w.entry("unix_time", |w| w.float(a.unix_time));
            w.entry("held", |w| int_dict_value(w, &a.held));
            w.end_dict();
        });
    }
    w.entry("categories", |w| {
        w.list(
            CATEGORIES.iter().chain(std::iter::once(&"Total")),
            |w, c| w.str(c),
        );
    });
    w.entry("modules", |w| {
        w.list(&r.modules, iteration);
    });
    w.entry("peak", |w| match &r.peak {
        Some(p) => snapshot_value(w, p),
        None => w.none(),
    });
    w.entry("memory_stats", |w| int_dict_value(w, &r.memory_stats));
    w.entry("agent_errors", |w| str_list(w, &r.agent_errors));
    w.entry("device_index", |w| w.opt_int(r.device_index));
    w.entry("device_uuid", |w| w.opt_str(r.device_uuid.as_deref()));
    w.entry("memory_stats_oom", |w| {
        int_dict_value(w, &r.memory_stats_oom)
    });
    w.entry("device_memory", |w| {
        w.list(&r.device_memory, |w, s| {
            w.begin_dict();
            w.entry("nvml_index", |w| w.int(s.nvml_index));
            w.entry("name", |w| w.opt_str(s.name.as_deref()));
            w.entry("uuid", |w| w.opt_str(s.uuid.as_deref()));
            w.entry("op_index", |w| {
                w.list(&s.samples, |w, x| w.int(x.op_index));
            });
            w.entry("time_s", |w| {
                w.list(&s.samples, |w, x| w.float(x.time_s));
            });
            w.entry("bytes", |w| {
                w.list(&s.samples, |w, x| w.int(x.bytes));
            });
            w.end_dict();
        });
    });
    w.entry("cycles_watched", |w| w.bool(r.cycles_watched));
    w.entry("cycles", |w| {
        w.list(&r.cycles, cycle_value);
    });
    if let Some(f) = &r.estimate {
        w.entry("estimate", |w| super::estimate_ext::write(w, f));
    }
    if let Some(ret) = &r.retained {
        w.entry("retained", |w| {
            w.begin_dict();
            w.entry("iterations", |w| w.int(ret.iterations));
            w.entry("ops", |w| {
                w.list(&ret.ops, |w, o| {
                    w.begin_dict();
                    w.entry("op", |w| w.str(&o.op));
                    w.entry("module", |w| w.str(&o.module));
                    w.entry("category", |w| w.str(&o.category));
                    w.entry("bytes", |w| w.int(o.bytes));
                    w.entry("tensors", |w| w.int(o.tensors));
                    w.entry("iterations", |w| w.int(o.iterations));
                    w.end_dict();
                });
            });
            w.end_dict();
        });
    }
    if !r.threads.is_empty() {
        w.entry("threads", |w| {
            w.list(&r.threads, |w, t| {
                w.begin_dict();
                w.entry("id", |w| w.int(t.id));
                w.entry("name", |w| w.str(&t.name));
                w.entry("ops", |w| w.int(t.ops));
                w.entry("forward_calls", |w| w.int(t.forward_calls));
                w.end_dict();
            });
        });
        w.entry("thread_runs", |w| {
            w.list(&r.thread_runs, |w, &(first, t)| {
                w.int(first);
                w.int(t);
                w.tuple(2);
            });
        });
    }
    if !r.threads_unrecorded.is_empty() {
        w.entry("threads_unrecorded", |w| str_list(w, &r.threads_unrecorded));
    }
    w.entry("unmeasured", |w| {
        w.list(&r.unmeasured, |w, u| {
            w.begin_dict();
            w.entry("reason", |w| w.str(&u.reason));
            w.entry("category", |w| w.str(&u.category));
            w.entry("tensors", |w| w.int(u.tensors));
            w.end_dict();
        });
    });
    if let Some(c) = &r.compile {
        w.entry("compile", |w| {
            w.begin_dict();
            w.entry("frames_ok", |w| w.int(c.frames_ok));
            w.entry("frames_total", |w| w.int(c.frames_total));
            w.entry("graph_breaks", |w| w.int(c.graph_breaks));
            w.entry("graph_break_reasons", |w| {
                str_list(w, &c.graph_break_reasons)
            });
            w.entry("regions", |w| {
                w.list(&c.regions, |w, r| {
                    w.begin_dict();
                    w.entry("region", |w| w.str(&r.region));
                    w.entry("graph_calls", |w| w.int(r.graph_calls));
                    w.end_dict();
                });
            });
            w.end_dict();
        });
    }
}

fn int_dict_value(w: &mut Writer, d: &BTreeMap<String, i64>) {
    w.begin_dict();
    for (k, v) in d {
        w.str(k);
        w.int(*v);
        w.end_entry();
    }
    w.end_dict();
}

fn cycle_value(w: &mut Writer, c: &Cycle) {
    w.begin_dict();
    w.entry("op_index", |w| w.int(c.op_index));
    w.entry("generation", |w| w.int(c.generation));
    w.entry("omitted_nodes", |w| w.int(c.omitted_nodes));
    w.entry("nodes", |w| {
        w.list(&c.nodes, |w, n| {
            w.begin_dict();
            w.entry("label", |w| w.str(&n.label));
            w.entry("type", |w| w.str(&n.type_name));
            w.entry("tensor", |w| match &n.tensor {
                None => w.none(),
                Some(t) => {
                    w.begin_dict();
                    w.entry("bytes", |w| w.int(t.bytes));
                    w.entry("storage", |w| w.int(t.storage));
                    w.entry("shape", |w| {
                        w.list(&t.shape, |w, d| w.int(*d));
                    });
                    w.entry("dtype", |w| w.str(&t.dtype));
                    w.entry("device", |w| w.str(&t.device));
                    w.entry("stack", |w| str_list(w, &t.stack));
                    w.end_dict();
                }
            });
            w.end_dict();
        });
    });
    w.entry("edges", |w| {
        w.list(&c.edges, |w, e| {
            w.int(e.from as i64);
            w.int(e.to as i64);
            w.str(&e.label);
            w.tuple(3);
        });
    });
    w.end_dict();
}

/// The exit keys beyond the first version's, as entries of the open `exit` dict.
pub fn write_exit(w: &mut Writer, e: &ExitInfo) {
    w.entry("ended", |w| w.opt_str(e.ended.as_deref()));
    if let Some((file, line)) = &e.exception_at {
        w.entry("exception_at", |w| {
            w.str(file);
            w.int(*line);
            w.tuple(2);
        });
    }
    w.entry("oom_op_index", |w| w.opt_int(e.oom_op_index));
}

fn iteration(w: &mut Writer, it: &IterationModules) {
    w.begin_dict();
    w.entry("iteration", |w| w.int(it.iteration as i64));
    w.entry("first_op", |w| w.int(it.first_op as i64));
    w.entry("peak", |w| snapshot_value(w, &it.peak));
    w.entry("modules", |w| {
        w.list(&it.modules, |w, m| {
            w.begin_dict();
            w.entry("fqn", |w| w.str(&m.fqn));
            w.entry("parameter_bytes", |w| w.int(m.parameter_bytes));
            w.entry("buffer_bytes", |w| w.int(m.buffer_bytes));
            w.entry("input_bytes", |w| w.int(m.input_bytes));
            w.entry("output_bytes", |w| w.int(m.output_bytes));
            w.entry("states", |w| {
                w.list(&m.states, |w, s| {
                    w.str(s.state.name());
                    w.list(&s.calls, snapshot_value);
                    w.tuple(2);
                });
            });
            w.end_dict();
        });
    });
    w.end_dict();
}

fn snapshot_value(w: &mut Writer, s: &ModuleSnapshot) {
    w.begin_dict();
    for d in &s.0 {
        w.str(&d.device);
        w.list(
            d.by_category.iter().chain(std::iter::once(&d.total)),
            |w, b| w.int(*b),
        );
        w.end_entry();
    }
    w.end_dict();
}
