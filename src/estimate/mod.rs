//! `memtrack estimate`: a program's CUDA memory without a GPU (docs/estimate.md). The program
//! runs under `record`'s agent with backend `estimate` (the agent's fake_cuda.py: CUDA tensors
//! are meta tensors, counted as device 0); record hands each estimated process's device
//! allocations to [`ALLOCATOR_MODEL`] (a `record::DeviceModel`), which runs them through the
//! caching-allocator model ([`device_model`]); `analysis::estimate_verdict` then reads the file
//! written, as every command does.
//!
//! - [`gpus`]: the devices `--gpu` names, and sizes.
//! - [`device_model`]: allocations → allocated and reserved per op, and where a device runs out.
//! - [`live`]: the same model beside the running program, for its questions about memory.
//! - [`launch`]: the job: torchrun's world and each rank's command and environment.
//! - [`program`]: running the program so, once per rank estimated.

pub mod device_model;
pub mod gpus;
pub mod launch;
pub mod live;
pub mod program;

use crate::analysis::caching_allocator::Settings;
use crate::model::estimate::{NCCL_BYTES, OOM_OP_INDEX, OOM_REQUESTED, USABLE_BYTES};
use crate::model::TrackerStats;

use crate::record::{DeviceLog, DeviceModel};

/// The caching allocator's model as record's `DeviceModel`: what `estimate` hands record.
pub struct AllocatorModel;

pub static ALLOCATOR_MODEL: AllocatorModel = AllocatorModel;

impl DeviceModel for AllocatorModel {
    fn fill(&self, stats: &mut TrackerStats, log: &DeviceLog) {
        fill_device_memory(stats, log);
    }
}

/// Replace an estimated run's series by the allocator model's: allocated (block sizes, as
/// CUDA counts them) and reserved after each op, on a device of the file's usable size; the
/// peaks and where it runs out go to `memory_stats` and `memory_stats_oom`.
pub fn fill_device_memory(stats: &mut TrackerStats, log: &DeviceLog) {
    let (events, alloc_conf, usable) = (&log.events, log.alloc_conf.as_str(), log.usable_bytes);
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
    // NCCL's buffers are the device's too, not the allocator's: what is left is its limit
    let limit = usable.map(|u| u.saturating_sub(log.nccl_bytes));
    let m = device_model::replay(events, stats.names.len(), settings, limit);
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
    if log.nccl_bytes > 0 {
        s.insert(NCCL_BYTES.into(), log.nccl_bytes as i64);
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
