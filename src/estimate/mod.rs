//! `memtrack estimate`: a program's CUDA memory without a GPU (docs/estimate.md). The program
//! runs under `record`'s agent with backend `estimate` (the agent's fake_cuda.py: CUDA tensors
//! are meta tensors, counted as device 0); the collector's replay hands the device
//! allocations to [`fill_device_memory`], which runs them through the caching-allocator
//! model ([`device_model`]); [`verdict`] then reads the file written, as every command does.
//!
//! - [`gpus`]: the devices `--gpu` names, and sizes.
//! - [`device_model`]: allocations → allocated and reserved per op, and where a device runs out.

pub mod device_model;
pub mod gpus;
pub mod program;

use serde::Serialize;

use crate::analysis::caching_allocator::Settings;
use crate::model::{op_module, TrackerStats};

use device_model::DeviceEvent;

/// Keys of `memory_stats_oom` in an estimated file: where the device would have run out.
pub const OOM_OP_INDEX: &str = "estimate.oom_op_index";
pub const OOM_REQUESTED: &str = "estimate.oom_requested_bytes";
/// `memory_stats` key: the bytes the allocator could use (the device less its CUDA context).
pub const USABLE_BYTES: &str = "estimate.usable_bytes";

/// Replace an estimated run's series by the allocator model's: allocated (block sizes, as
/// CUDA counts them) and reserved after each op, on a device of the file's usable size; the
/// peaks and where it runs out go to `memory_stats` and `memory_stats_oom`.
pub fn fill_device_memory(
    stats: &mut TrackerStats,
    events: &[DeviceEvent],
    alloc_conf: &str,
    usable: Option<u64>,
) {
    let mut settings = Settings::default();
    let mut bad_conf = None;
    if let Err(e) = settings.apply_all(alloc_conf) {
        bad_conf = Some(format!(
            "PYTORCH_CUDA_ALLOC_CONF `{alloc_conf}`: {e}; estimated with the default settings"
        ));
        settings = Settings::default();
    }
    let Some(record) = stats.record.as_mut() else {
        return;
    };
    let usable = usable.or(record.device_total_bytes);
    let m = device_model::replay(events, stats.names.len(), settings, usable);
    stats.active = m.allocated.clone();
    stats.allocated = m.allocated;
    stats.reserved = m.reserved;
    stats.num_alloc_retries = m.num_alloc_retries as i64;
    let s = &mut record.memory_stats;
    s.insert("allocated_bytes.all.peak".into(), m.peak_allocated as i64);
    s.insert("reserved_bytes.all.peak".into(), m.peak_reserved as i64);
    s.insert("num_alloc_retries".into(), m.num_alloc_retries as i64);
    s.insert("num_ooms".into(), i64::from(m.oom.is_some()));
    if let Some(u) = usable {
        s.insert(USABLE_BYTES.into(), u as i64);
    }
    if let Some(o) = m.oom {
        let s = &mut record.memory_stats_oom;
        s.insert(OOM_OP_INDEX.into(), o.op as i64);
        s.insert(OOM_REQUESTED.into(), o.requested_bytes as i64);
        s.insert(
            "allocated_bytes.all.current".into(),
            o.allocated_bytes as i64,
        );
        s.insert("reserved_bytes.all.current".into(), o.reserved_bytes as i64);
    }
    if let Some(b) = bad_conf {
        record.agent_errors.push(b);
    }
}

/// Whether the estimated run fits the device, and if not where it runs out.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Verdict {
    pub device: String,
    pub device_bytes: u64,
    /// What the allocator may use: the device less its CUDA context (named devices).
    pub usable_bytes: u64,
    pub peak_allocated_bytes: u64,
    pub peak_allocated_op: Option<String>,
    pub peak_reserved_bytes: u64,
    pub fits: bool,
    /// usable − peak reserved, when it fits.
    pub spare_bytes: Option<u64>,
    pub alloc_retries: i64,
    pub oom: Option<OomPlace>,
}

/// Where the device would run out.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OomPlace {
    pub op_index: usize,
    pub op: String,
    pub module: Option<String>,
    /// 1-based iteration; None before the first forward.
    pub iteration: Option<usize>,
    pub requested_bytes: u64,
    pub allocated_bytes: u64,
    pub reserved_bytes: u64,
}

/// The verdict of an estimated file (None for a file that is not one).
pub fn verdict(stats: &TrackerStats) -> Option<Verdict> {
    let r = stats.record.as_ref()?;
    if r.backend != "estimate" {
        return None;
    }
    let stat = |k: &str| r.memory_stats.get(k).map_or(0, |&v| v.max(0) as u64);
    let device_bytes = r.device_total_bytes.unwrap_or(0);
    let usable_bytes = r
        .memory_stats
        .get(USABLE_BYTES)
        .map_or(device_bytes, |&v| v as u64);
    let peak_reserved_bytes = stat("reserved_bytes.all.peak");
    let peak_at = stats
        .allocated
        .iter()
        .enumerate()
        .fold(None, |best: Option<(usize, f64)>, (i, &v)| match best {
            Some((_, b)) if b >= v => best,
            _ => Some((i, v)),
        })
        .map(|(i, _)| stats.names.get(i).to_string());
    let oom = r.memory_stats_oom.get(OOM_OP_INDEX).map(|&i| {
        let i = i.max(0) as usize;
        let name = if i < stats.names.len() {
            stats.names.get(i).to_string()
        } else {
            "?".into()
        };
        let o = |k: &str| r.memory_stats_oom.get(k).map_or(0, |&v| v.max(0) as u64);
        OomPlace {
            op_index: i,
            module: op_module(&name)
                .filter(|m| !m.is_empty() && *m != "Global")
                .map(str::to_string),
            op: name,
            iteration: r
                .iteration_starts
                .iter()
                .rposition(|&s| s as usize <= i)
                .map(|k| k + 1),
            requested_bytes: o(OOM_REQUESTED),
            allocated_bytes: o("allocated_bytes.all.current"),
            reserved_bytes: o("reserved_bytes.all.current"),
        }
    });
    let fits = oom.is_none();
    Some(Verdict {
        device: r.device_name.clone().unwrap_or_default(),
        device_bytes,
        usable_bytes,
        peak_allocated_bytes: stat("allocated_bytes.all.peak"),
        peak_allocated_op: peak_at,
        peak_reserved_bytes,
        fits,
        spare_bytes: fits.then(|| usable_bytes.saturating_sub(peak_reserved_bytes)),
        alloc_retries: stats.num_alloc_retries,
        oom,
    })
}
