//! NVIDIA GPUs as the driver reports them (`memtrack gpus`): memory and the processes using it.

use serde::Serialize;

/// What NVML reports about this machine's NVIDIA GPUs (`memtrack gpus`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct GpuList {
    /// The driver's version (`nvmlSystemGetDriverVersion`).
    pub driver_version: Option<String>,
    /// The CUDA version the driver supports, as `12.4`.
    pub cuda_driver_version: Option<String>,
    /// In NVML's index order.
    pub gpus: Vec<Gpu>,
}

/// One GPU: its memory in bytes and the processes using it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Gpu {
    /// NVML's index: PCI bus order, as nvidia-smi numbers GPUs (CUDA's order may differ:
    /// `CUDA_DEVICE_ORDER`, `CUDA_VISIBLE_DEVICES`).
    pub index: u32,
    /// The product name NVML reports (`NVIDIA H100 80GB HBM3`).
    pub name: String,
    /// The GPU's UUID (`GPU-…`); None when NVML's query failed.
    pub uuid: Option<String>,
    /// `00000000:3B:00.0` form.
    pub pci_bus_id: Option<String>,
    /// The device's memory, in bytes.
    pub total_bytes: u64,
    /// Bytes in use, as NVML counts them.
    pub used_bytes: u64,
    /// Bytes not in use.
    pub free_bytes: u64,
    /// Memory the driver sets aside (NVML's v2 memory info), not counted in used.
    pub reserved_bytes: u64,
    /// The processes with a context on it.
    pub processes: Vec<GpuProcess>,
    /// Queries that failed for this GPU (e.g. processes: "Insufficient Permissions").
    pub errors: Vec<String>,
}

/// A process using a GPU, and the device memory it holds.
#[derive(Clone, Debug, Serialize)]
pub struct GpuProcess {
    /// Process id (in the host's namespace, as NVML sees it).
    pub pid: u32,
    /// `compute` (a CUDA context) or `graphics`.
    pub kind: &'static str,
    /// None where the driver does not say (e.g. under WDDM, or without permission).
    pub used_bytes: Option<u64>,
    /// Its command line from /proc, when this machine's /proc shows it (not across PID
    /// namespaces, e.g. from inside a container).
    pub command: Option<String>,
}
