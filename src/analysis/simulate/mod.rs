//! Replay a snapshot's trace through the caching-allocator model (`caching_allocator`) under
//! the file's own settings and under others: peak reserved, fragmentation, OOMs per scenario,
//! and a check of the model against the segment events the file recorded.
//!
//! The replay's input is narrow on purpose: the segments and live blocks before the trace's
//! first event (`rewind::Placed`) and the trace events in order. Program actions (`alloc`,
//! `free_requested`, `free_completed`, `oom`) drive the model; the recorded segment events are
//! what the allocator did in answer, and only compared, except a run of `segment_free` /
//! `segment_unmap` that no allocation asked for: that is `torch.cuda.empty_cache()`, and the
//! model empties its cache there too.

mod limit;
mod replay;
mod report;

pub use report::{
    DeviceSimulation, LimitSource, Mismatch, Note, Scenario, SegmentEventRef, SimulatedOom,
    Simulation, Suggestion, Validation,
};

use rustc_hash::FxHashMap;

use crate::model::snapshot::{Snapshot, StackId, TraceEvent};
use crate::model::trace::TraceEvents;

use super::caching_allocator::{SettingError, Settings};
use super::rewind::{place, rewind, Placed};
use super::sites::Sites;
use super::timeline::{timeline, Timeline};
use limit::memory_limit;
use replay::{validate, Replay, TracePlan};

/// `f(0)`, …, `f(n - 1)`, computed on as many cores as there are (up to `n`), in order.
fn each_on_all_cores<T: Send>(n: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let work = || {
        let mut done = Vec::new();
        loop {
            let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if k >= n {
                return done;
            }
            done.push((k, f(k)));
        }
    };
    let mut all: Vec<(usize, T)> = std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..cores.min(n)).map(|_| scope.spawn(work)).collect();
        let mut all = work();
        for h in helpers {
            // a panic in a replay is a bug: let it surface as on one thread
            all.extend(h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
        }
        all
    });
    all.sort_by_key(|&(k, _)| k);
    all.into_iter().map(|(_, t)| t).collect()
}

/// Replay a device's trace under each of `scenarios` (the file's own settings first is the
/// caller's choice; validation compares against the first).
pub fn simulate(
    snap: &Snapshot,
    device: u32,
    scenarios: &[Settings],
    memory: Option<u64>,
) -> DeviceSimulation {
    let recorded = timeline(snap, device, false);
    let mut events = snap;
    simulate_events(snap, device, &recorded, &mut events, scenarios, memory)
        .expect("a kept trace reads without error")
}

/// Events replayed at a time, by every scenario (one a core) before the next are read.
const CHUNK: usize = 1 << 16;

/// [`simulate`] of a trace given by `events` (as often as asked: from a kept snapshot or from
/// where a reading put them aside), `recorded` its timeline; memory does not grow with the
/// trace beyond its segment events and OOMs.
pub fn simulate_events(
    snap: &Snapshot,
    device: u32,
    recorded: &Timeline,
    events: &mut dyn TraceEvents,
    scenarios: &[Settings],
    memory: Option<u64>,
) -> std::io::Result<DeviceSimulation> {
    let initial_reserved = recorded.initial_reserved_bytes;
    let forward = |events: &mut dyn TraceEvents| -> std::io::Result<_> {
        let plan = TracePlan::new(snap, device, events, initial_reserved)?;
        let limit = memory_limit(snap, device, events, initial_reserved, &plan.runs, memory)?;
        Ok((plan, limit))
    };
    // the walk back to the state before the trace needs nothing of the walks forward: where
    // the events can be walked twice at once, it goes on another core meanwhile
    let at_once = events.two_readers()?.map(|[mut ahead, mut back]| {
        std::thread::scope(|scope| {
            let rewinding = scope.spawn(move || rewind(snap, device, &mut *back, 0));
            let planned = forward(&mut *ahead);
            // a panic in the walk back is a bug: let it surface as on one thread
            let rewound = (rewinding.join()).unwrap_or_else(|p| std::panic::resume_unwind(p));
            (planned, rewound)
        })
    });
    let (planned, rewound) = match at_once {
        Some(walked) => walked,
        None => (forward(events), rewind(snap, device, events, 0)),
    };
    let (plan, (limit, source, mut notes)) = planned?;
    let rewound = rewound?;
    let inits: Vec<Placed> = each_on_all_cores(scenarios.len(), |k| place(&rewound, &scenarios[k]));
    drop(rewound);
    let replays: Vec<std::sync::Mutex<Replay>> = inits
        .iter()
        .enumerate()
        .map(|(k, init)| {
            std::sync::Mutex::new(Replay::new(
                scenarios[k].clone(),
                limit,
                init,
                &plan,
                k == 0,
            ))
        })
        .collect();
    // the scenarios are independent replays of one trace: one a core, a chunk of events at a
    // time
    let replay_chunk = |first: usize, chunk: &[(TraceEvent, i64)]| {
        each_on_all_cores(replays.len(), |k| {
            let mut run = replays[k].lock().unwrap_or_else(|p| p.into_inner());
            for (j, (e, stream)) in chunk.iter().enumerate() {
                run.prefetch(chunk.get(j + 16), chunk.get(j + 8), chunk.get(j + 4));
                run.event(first + j, e, *stream);
            }
        });
    };
    // the trace is read (on this thread) while the chunk before is replayed (on another)
    let (full_tx, full_rx) = std::sync::mpsc::sync_channel::<(usize, Vec<(TraceEvent, i64)>)>(1);
    let (empty_tx, empty_rx) = std::sync::mpsc::channel::<Vec<(TraceEvent, i64)>>();
    std::thread::scope(|scope| {
        let replay_chunk = &replay_chunk;
        let replayer = scope.spawn(move || {
            for (first, chunk) in full_rx {
                replay_chunk(first, &chunk);
                // (its room used again for a later chunk; none wants it after the last)
                let _ = empty_tx.send(chunk);
            }
        });
        let mut chunk: Vec<(TraceEvent, i64)> = Vec::with_capacity(CHUNK.min(plan.events));
        let read = events.visit(device, &mut |i, e, stream, _| {
            chunk.push((*e, stream));
            if chunk.len() == CHUNK {
                let room = empty_rx
                    .try_recv()
                    .unwrap_or_else(|_| Vec::with_capacity(CHUNK));
                let full = std::mem::replace(&mut chunk, room);
                // (the replayer stops only by a panic, which its join passes on)
                let _ = full_tx.send((i + 1 - CHUNK, full));
                chunk.clear();
            }
            Ok(())
        });
        if read.is_ok() {
            let _ = full_tx.send((plan.events - chunk.len(), chunk));
        }
        drop(full_tx);
        // a panic in a replay is a bug: let it surface as on one thread
        replayer
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        read
    })?;
    let mut out_scenarios = Vec::with_capacity(scenarios.len());
    let mut validation = Validation::default();
    for (k, (run, init)) in replays.into_iter().zip(&inits).enumerate() {
        let run = run.into_inner().unwrap_or_else(|p| p.into_inner());
        let (scenario, log) = run.finish(plan.events);
        if k == 0 {
            validation = validate(snap, device, recorded, &plan.recorded, &log);
            notes.extend(Note::start_state(init).filter(|_| plan.events > 0));
            if init.unplaced_blocks > 0 {
                notes.push(Note::UnplacedBlocks(init.unplaced_blocks));
            }
        }
        out_scenarios.push(scenario);
    }
    if limit.is_none()
        && scenarios
            .iter()
            .any(|s| s.garbage_collection_threshold > 0.0)
    {
        notes.push(Note::GcWithoutLimit);
    }
    if snap
        .segments_on(device)
        .any(|s| s.pool_id.is_some_and(|p| p != (0, 0)))
    {
        notes.push(Note::PrivatePools);
    }
    Ok(DeviceSimulation {
        device,
        trace_events: plan.events,
        first_time_us: plan.first_time_us,
        memory_limit_bytes: limit,
        memory_limit_source: source,
        notes,
        scenarios: out_scenarios,
        validation,
    })
}

/// Name where each simulated OOM's request came from, from a snapshot read with its stacks
/// and its trace given by `events` (the replay itself needs no stacks, so a command reads them
/// only when there is an OOM to name).
pub fn label_oom_sites(
    sim: &mut Simulation,
    snap: &Snapshot,
    events: &mut dyn TraceEvents,
) -> std::io::Result<()> {
    let mut sites = Sites::new(snap);
    for d in &mut sim.devices {
        let mut wanted: Vec<usize> = d
            .scenarios
            .iter()
            .flat_map(|sc| sc.ooms.iter().map(|o| o.index))
            .collect();
        if wanted.is_empty() {
            continue;
        }
        wanted.sort_unstable();
        wanted.dedup();
        let mut stacks: FxHashMap<usize, StackId> = FxHashMap::default();
        events.visit(d.device, &mut |i, e, _, _| {
            if wanted.binary_search(&i).is_ok() {
                stacks.insert(i, e.stack);
            }
            Ok(())
        })?;
        for sc in &mut d.scenarios {
            for o in &mut sc.ooms {
                let stack = stacks.get(&o.index).copied().unwrap_or(StackId::MISSING);
                if !stack.is_missing() {
                    let k = sites.site(stack);
                    o.site = Some(sites.label(k, false));
                }
            }
        }
    }
    Ok(())
}

/// The scenarios: the file's own settings, then each `--set` (a comma-separated list of
/// `KEY:VALUE` applied to the file's settings).
pub fn scenarios(snap: &Snapshot, sets: &[String]) -> Result<Vec<Settings>, SettingError> {
    let own = snap
        .allocator_settings
        .as_deref()
        .map(Settings::from_recorded)
        .unwrap_or_default();
    let mut out = vec![own.clone()];
    for set in sets {
        let mut s = own.clone();
        s.apply_all(set)?;
        out.push(s);
    }
    Ok(out)
}

/// Replay the traces of `devices` (given by `events`; `timelines` the recorded timeline of
/// each, in the same order) under each of `scenarios`, with the memory limit `memory` (bytes)
/// or one inferred from the file.
pub fn simulation(
    snap: &Snapshot,
    devices: &[u32],
    timelines: &[Timeline],
    events: &mut dyn TraceEvents,
    scenarios: &[Settings],
    memory: Option<u64>,
) -> std::io::Result<Simulation> {
    Ok(Simulation {
        kind: "allocator_simulation",
        own_settings_from: if snap.allocator_settings.is_some() {
            "file"
        } else {
            "defaults"
        },
        devices: devices
            .iter()
            .zip(timelines)
            .map(|(&d, tl)| simulate_events(snap, d, tl, events, scenarios, memory))
            .collect::<std::io::Result<_>>()?,
    })
}

/// Settings `summary` tries when a snapshot had an OOM or a fragmented cache.
pub const CANDIDATES: [&str; 4] = [
    "expandable_segments:True",
    "max_split_size_mb:128",
    "max_split_size_mb:512",
    "roundup_power2_divisions:4",
];

/// The scenario (after the first) that helps most: fewest OOMs, then the lowest peak reserved;
/// `None` when none has fewer OOMs or a peak at least 5% lower than the file's own settings.
pub fn best_alternative(sim: &DeviceSimulation) -> Option<&Scenario> {
    let own = sim.scenarios.first()?;
    let best = sim.scenarios[1..]
        .iter()
        .min_by_key(|s| (s.ooms.len(), s.peak_reserved_bytes))?;
    let fewer_ooms = best.ooms.len() < own.ooms.len();
    let lower_peak = best.ooms.len() == own.ooms.len()
        && (best.peak_reserved_bytes as f64) <= 0.95 * own.peak_reserved_bytes as f64;
    (fewer_ooms || lower_peak).then_some(best)
}

/// For a device with OOMs or a fragmented cache: replay the `CANDIDATES` and suggest the one
/// that helps most, when one does.
pub fn suggest(snap: &Snapshot, device: u32) -> Option<Suggestion> {
    if snap.trace(device).is_none_or(|t| t.events.is_empty()) {
        return None;
    }
    let candidates: Vec<String> = CANDIDATES.iter().map(|c| c.to_string()).collect();
    let settings = scenarios(snap, &candidates).ok()?;
    let sim = simulate(snap, device, &settings, None);
    let own = sim.scenarios.first()?;
    let best = best_alternative(&sim)?;
    // a candidate equal to the file's own settings is no suggestion
    if best.settings_detail == own.settings_detail {
        return None;
    }
    let k = sim.scenarios.iter().position(|s| std::ptr::eq(s, best))?;
    Some(Suggestion {
        device,
        settings: candidates[k - 1].clone(),
        own_peak_reserved_bytes: own.peak_reserved_bytes,
        peak_reserved_bytes: best.peak_reserved_bytes,
        own_ooms: own.ooms.len(),
        ooms: best.ooms.len(),
    })
}
