//! The devices `estimate --gpu` knows by name, and what the allocator may use of one.

use crate::model::units::parse_size;

/// A device as the estimated program sees it (`torch.cuda.get_device_properties`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gpu {
    /// As `get_device_name()` says it.
    pub name: String,
    /// `total_memory`.
    pub total_bytes: u64,
    /// Compute capability (`major`, `minor`).
    pub capability: (u32, u32),
}

/// Memory outside the caching allocator on a device in use: the CUDA context, cuBLAS and
/// cuDNN handles and their own workspaces (the H100 recording in `fixtures/record/`: the driver
/// counted 742 MiB more than the allocator had reserved).
pub const CONTEXT_BYTES: u64 = 742 << 20;

const MIB: u64 = 1 << 20;

/// Names accepted, name, total memory in MiB as the card reports it, capability.
type Row = (&'static [&'static str], &'static str, u64, (u32, u32));

const TABLE: &[Row] = &[
    (
        &["H100", "H100-80GB", "H100-SXM"],
        "NVIDIA H100 80GB HBM3",
        81_079,
        (9, 0),
    ),
    (&["H100-PCIE"], "NVIDIA H100 PCIe", 81_079, (9, 0)),
    (&["H200", "H200-141GB"], "NVIDIA H200", 143_771, (9, 0)),
    (
        &["A100-80GB", "A100"],
        "NVIDIA A100-SXM4-80GB",
        81_050,
        (8, 0),
    ),
    (&["A100-40GB"], "NVIDIA A100-SXM4-40GB", 40_339, (8, 0)),
    (&["L40S"], "NVIDIA L40S", 45_596, (8, 9)),
    (&["L4"], "NVIDIA L4", 22_478, (8, 9)),
    (&["A10G"], "NVIDIA A10G", 22_599, (8, 6)),
    (
        &["RTX4090", "4090"],
        "NVIDIA GeForce RTX 4090",
        24_210,
        (8, 9),
    ),
    (&["V100-32GB"], "Tesla V100-SXM2-32GB", 32_501, (7, 0)),
    (
        &["V100-16GB", "V100"],
        "Tesla V100-SXM2-16GB",
        16_151,
        (7, 0),
    ),
    (&["T4"], "Tesla T4", 15_102, (7, 5)),
];

/// The names `--gpu` accepts, for messages and docs.
pub fn names() -> Vec<&'static str> {
    TABLE.iter().map(|(n, ..)| n[0]).collect()
}

/// `--gpu`: a device name from the table (any case), or a size (`80GiB`): a device of that
/// much memory, all of it for the allocator. Err: what was wrong, for a usage error.
pub fn resolve(spec: &str) -> Result<(Gpu, bool), String> {
    let want = spec.trim().to_ascii_uppercase().replace(['_', ' '], "-");
    if let Some((_, name, mib, cap)) = TABLE
        .iter()
        .find(|(names, ..)| names.iter().any(|n| *n == want))
    {
        return Ok((
            Gpu {
                name: (*name).into(),
                total_bytes: mib * MIB,
                capability: *cap,
            },
            true,
        ));
    }
    match parse_size(spec) {
        Ok(bytes) => Ok((
            Gpu {
                name: format!("a GPU of {spec}"),
                total_bytes: bytes,
                capability: (9, 0),
            },
            false,
        )),
        Err(_) => Err(format!(
            "--gpu {spec}: not a device memtrack knows ({}) nor a size such as 80GiB",
            names().join(", ")
        )),
    }
}

/// What the allocator may use of `gpu`: all of a size given as such, a named device's memory
/// less [`CONTEXT_BYTES`].
pub fn usable_bytes(gpu: &Gpu, named: bool) -> u64 {
    if named {
        gpu.total_bytes.saturating_sub(CONTEXT_BYTES)
    } else {
        gpu.total_bytes
    }
}
