//! GPU facts from the NVIDIA driver, through NVML (`libnvidia-ml.so.1`, loaded at run time by
//! nvml-wrapper): devices, their memory, and the processes using them. NVML talks to the
//! driver, not to CUDA, so nothing here creates a CUDA context. A machine without the driver
//! gets a message saying so, never a crash: the library is opened only when a command asks.
//!
//! `MEMTRACK_NVML_LIB` names another library file to load (an unusual install; tests use it
//! to stand for a machine without a driver).

use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::device::ProcessInfo;

use crate::model::gpu::{Gpu, GpuList, GpuProcess};

pub const NVML_LIB: &str = "libnvidia-ml.so.1";

/// An open NVML session.
pub struct Nvml {
    nvml: nvml_wrapper::Nvml,
    devices: u32,
}

/// One process's memory on one GPU, as the driver counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessMemory {
    pub device: u32,
    pub pid: u32,
    pub bytes: u64,
}

/// Why NVML cannot be used on this machine, in one line (no driver, no permission, ...).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Unavailable(String);

/// Load NVML and initialise it, or say (in one line) why that is not possible.
pub fn open() -> Result<Nvml, Unavailable> {
    let lib = std::env::var_os("MEMTRACK_NVML_LIB");
    let lib_name = lib.as_deref().map_or_else(
        || NVML_LIB.to_string(),
        |l| l.to_string_lossy().into_owned(),
    );
    let result = match &lib {
        Some(path) => nvml_wrapper::Nvml::builder().lib_path(path).init(),
        None => nvml_wrapper::Nvml::init(),
    };
    let nvml = result.map_err(|e| Unavailable(describe_init_error(&lib_name, e)))?;
    let devices = nvml
        .device_count()
        .map_err(|e| Unavailable(format!("NVML cannot count the GPUs: {e}")))?;
    Ok(Nvml { nvml, devices })
}

fn describe_init_error(lib: &str, e: NvmlError) -> String {
    match e {
        NvmlError::LibloadingError(e) => format!(
            "no NVIDIA driver: cannot load NVML ({lib}): {e}. memtrack reads GPUs through the \
             driver's NVML library, as nvidia-smi does: install the NVIDIA driver, or run this \
             on a machine with an NVIDIA GPU"
        ),
        NvmlError::DriverNotLoaded => format!(
            "the NVIDIA driver is not loaded: NVML ({lib}) is installed but the kernel driver \
             is not running (nvidia-smi would fail the same way)"
        ),
        NvmlError::NoPermission => {
            format!("NVML ({lib}): no permission to talk to the NVIDIA driver")
        }
        e => format!("NVML ({lib}) could not start: {e}"),
    }
}

impl Nvml {
    pub fn device_count(&self) -> u32 {
        self.devices
    }

    /// Every device with its memory and processes. A query that fails for one device is
    /// noted on that device; the others are still listed.
    pub fn gpus(&self) -> GpuList {
        let driver_version = self.nvml.sys_driver_version().ok();
        let cuda_driver_version = self
            .nvml
            .sys_cuda_driver_version()
            .ok()
            .map(|v| format!("{}.{}", v / 1000, (v % 1000) / 10));
        let gpus = (0..self.devices).map(|i| self.gpu(i)).collect();
        GpuList {
            driver_version,
            cuda_driver_version,
            gpus,
        }
    }

    fn gpu(&self, index: u32) -> Gpu {
        let mut g = Gpu {
            index,
            ..Gpu::default()
        };
        let d = match self.nvml.device_by_index(index) {
            Ok(d) => d,
            Err(e) => {
                g.name = "?".into();
                g.errors.push(format!("device: {e}"));
                return g;
            }
        };
        g.name = d.name().unwrap_or_else(|e| {
            g.errors.push(format!("name: {e}"));
            "?".into()
        });
        g.uuid = d.uuid().ok();
        g.pci_bus_id = d.pci_info().ok().map(|p| p.bus_id);
        match d.memory_info() {
            Ok(m) => {
                g.total_bytes = m.total;
                g.used_bytes = m.used;
                g.free_bytes = m.free;
                g.reserved_bytes = m.reserved;
            }
            Err(e) => g.errors.push(format!("memory: {e}")),
        }
        for (kind, list) in [
            ("compute", d.running_compute_processes()),
            ("graphics", d.running_graphics_processes()),
        ] {
            match list {
                Ok(ps) => {
                    for p in ps {
                        if g.processes.iter().any(|q| q.pid == p.pid && q.kind == kind) {
                            continue;
                        }
                        g.processes.push(GpuProcess {
                            pid: p.pid,
                            kind,
                            used_bytes: used(&p),
                            command: command_line(p.pid),
                        });
                    }
                }
                Err(NvmlError::NotSupported) => {}
                Err(e) => g.errors.push(format!("{kind} processes: {e}")),
            }
        }
        g
    }

    /// Every process's memory on every device (compute and graphics contexts), for the
    /// recorder's sampler: only NVML calls, no /proc reads.
    pub fn process_memory(&self) -> Vec<ProcessMemory> {
        let mut out = Vec::new();
        for i in 0..self.devices {
            let Ok(d) = self.nvml.device_by_index(i) else {
                continue;
            };
            for list in [
                d.running_compute_processes(),
                d.running_graphics_processes(),
            ] {
                for p in list.unwrap_or_default() {
                    let bytes = used(&p).unwrap_or(0);
                    // a process with both kinds of context is listed twice with the same memory
                    if !out
                        .iter()
                        .any(|q: &ProcessMemory| q.device == i && q.pid == p.pid)
                    {
                        out.push(ProcessMemory {
                            device: i,
                            pid: p.pid,
                            bytes,
                        });
                    }
                }
            }
        }
        out
    }

    /// (name, uuid) of a device.
    pub fn describe(&self, index: u32) -> (Option<String>, Option<String>) {
        match self.nvml.device_by_index(index) {
            Ok(d) => (d.name().ok(), d.uuid().ok()),
            Err(_) => (None, None),
        }
    }
}

fn used(p: &ProcessInfo) -> Option<u64> {
    match p.used_gpu_memory {
        UsedGpuMemory::Used(b) => Some(b),
        UsedGpuMemory::Unavailable => None,
    }
}

/// A process's command line from /proc, arguments joined by spaces, at most 120 characters.
fn command_line(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let s: Vec<String> = raw
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    if s.is_empty() {
        return None;
    }
    let mut line = s.join(" ");
    if line.chars().count() > 120 {
        line = line.chars().take(119).collect::<String>() + "…";
    }
    Some(line)
}
