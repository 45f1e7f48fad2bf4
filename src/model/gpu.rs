//! NVIDIA GPUs as the driver reports them (`memtrack gpus`): memory and the processes using it.

use serde::Serialize;

#[derive(Clone, Debug, Default, Serialize)]
pub struct GpuList {
    /// The driver's version (`nvmlSystemGetDriverVersion`).
    pub driver_version: Option<String>,
    /// The CUDA version the driver supports, as `12.4`.
    pub cuda_driver_version: Option<String>,
    pub gpus: Vec<Gpu>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Gpu {
    /// NVML's index: PCI bus order, as nvidia-smi numbers GPUs (CUDA's order may differ:
    /// `CUDA_DEVICE_ORDER`, `CUDA_VISIBLE_DEVICES`).
    pub index: u32,
    pub name: String,
    pub uuid: Option<String>,
    pub pci_bus_id: Option<String>,
    pub total_bytes: u64,
    pub used_bytes: u64,
    pub free_bytes: u64,
    /// Memory the driver sets aside (NVML's v2 memory info), not counted in used.
    pub reserved_bytes: u64,
    pub processes: Vec<GpuProcess>,
    /// Queries that failed for this GPU (e.g. processes: "Insufficient Permissions").
    pub errors: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct GpuProcess {
    pub pid: u32,
    /// `compute` (a CUDA context) or `graphics`.
    pub kind: &'static str,
    /// None where the driver does not say (e.g. under WDDM, or without permission).
    pub used_bytes: Option<u64>,
    /// Its command line from /proc, when this machine's /proc shows it (not across PID
    /// namespaces, e.g. from inside a container).
    pub command: Option<String>,
}
