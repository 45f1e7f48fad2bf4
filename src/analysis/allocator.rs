//! The CUDA caching allocator's counters (`torch.cuda.memory_stats()`, flattened) arranged as
//! `torch.cuda.memory_summary()` arranges them.

use std::collections::BTreeMap;

use serde::Serialize;

/// (stats key, the name memory_summary prints, counts bytes)
pub const METRICS: [(&str, &str, bool); 9] = [
    ("allocated_bytes", "Allocated memory", true),
    ("active_bytes", "Active memory", true),
    ("requested_bytes", "Requested memory", true),
    ("reserved_bytes", "GPU reserved memory", true),
    ("inactive_split_bytes", "Non-releasable memory", true),
    ("allocation", "Allocations", false),
    ("active", "Active allocs", false),
    ("segment", "GPU reserved segments", false),
    ("inactive_split", "Non-releasable allocs", false),
];

/// Counters without pools, printed after the others.
pub const OVERSIZE: [(&str, &str); 2] = [
    ("oversize_allocations", "Oversize allocations"),
    ("oversize_segments", "Oversize GPU segments"),
];

/// The pools `memory_stats()` counts, in `memory_summary()`'s order.
pub const POOLS: [&str; 3] = ["all", "large_pool", "small_pool"];

/// A device's allocator counters (`memory_stats()`) arranged as `torch.cuda.memory_summary()`
/// prints them.
#[derive(Debug, Serialize)]
pub struct AllocatorSummary {
    /// `exit` or `oom`.
    pub at: &'static str,
    /// The CUDA device index the counters are for (0 when the recording did not say).
    pub device: i64,
    /// `num_ooms`: times the allocator reported running out of memory (0 if absent).
    pub num_ooms: i64,
    /// `num_alloc_retries`: cudaMalloc calls retried after freeing the cache (0 if absent).
    pub num_alloc_retries: i64,
    /// The [`METRICS`] then the [`OVERSIZE`] counters, in that order.
    pub metrics: Vec<Metric>,
    /// Other counters in the file (`num_device_alloc`, `max_split_size`, …), as recorded.
    pub other: BTreeMap<String, i64>,
}

/// One counter of the summary (e.g. allocated memory), a row per pool.
#[derive(Debug, Serialize)]
pub struct Metric {
    /// The `memory_stats()` key prefix (`allocated_bytes`, `segment`, …).
    pub key: &'static str,
    /// The row label `memory_summary()` prints (`Allocated memory`, …).
    pub name: &'static str,
    /// Whether the counter is in bytes (else it counts allocations or segments).
    pub bytes: bool,
    /// One row per pool in [`POOLS`] order; a single row for the oversize counters.
    pub rows: Vec<MetricRow>,
}

/// One pool's counters; None where the file lacks the key (older PyTorch).
#[derive(Debug, Serialize)]
pub struct MetricRow {
    /// `all`, `large_pool`, `small_pool`; empty for the oversize counters.
    pub pool: &'static str,
    /// `.current`: the value when the stats were taken.
    pub current: Option<i64>,
    /// `.peak`: the highest value since the counters were last reset.
    pub peak: Option<i64>,
    /// `.allocated`: the total ever added.
    pub allocated: Option<i64>,
    /// `.freed`: the total ever taken away.
    pub freed: Option<i64>,
}

/// Arrange the flat `memory_stats()` counters `stats` (as recorded `at` exit or OOM) of `device`
/// into the summary's metrics.
pub fn summarize(stats: &BTreeMap<String, i64>, at: &'static str, device: i64) -> AllocatorSummary {
    let get = |k: String| stats.get(&k).copied();
    let row = |prefix: String, pool: &'static str| MetricRow {
        pool,
        current: get(format!("{prefix}current")),
        peak: get(format!("{prefix}peak")),
        allocated: get(format!("{prefix}allocated")),
        freed: get(format!("{prefix}freed")),
    };
    let mut metrics: Vec<Metric> = METRICS
        .iter()
        .map(|&(key, name, bytes)| Metric {
            key,
            name,
            bytes,
            rows: POOLS
                .iter()
                .map(|&pool| row(format!("{key}.{pool}."), pool))
                .collect(),
        })
        .collect();
    metrics.extend(OVERSIZE.iter().map(|&(key, name)| Metric {
        key,
        name,
        bytes: false,
        rows: vec![row(format!("{key}."), "")],
    }));
    let shown = |k: &str| {
        METRICS
            .iter()
            .any(|(m, _, _)| k.starts_with(&format!("{m}.")))
            || OVERSIZE
                .iter()
                .any(|(m, _)| k.starts_with(&format!("{m}.")))
            || k == "num_ooms"
            || k == "num_alloc_retries"
    };
    AllocatorSummary {
        at,
        device,
        num_ooms: stats.get("num_ooms").copied().unwrap_or(0),
        num_alloc_retries: stats.get("num_alloc_retries").copied().unwrap_or(0),
        metrics,
        other: stats
            .iter()
            .filter(|(k, _)| !shown(k))
            .map(|(k, v)| (k.clone(), *v))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arranges_counters_by_metric_and_pool() {
        let mut s = BTreeMap::new();
        s.insert("allocated_bytes.all.current".to_string(), 1024);
        s.insert("allocated_bytes.small_pool.peak".to_string(), 512);
        s.insert("oversize_segments.freed".to_string(), 3);
        s.insert("num_ooms".to_string(), 2);
        s.insert("num_device_alloc".to_string(), 9);
        let a = summarize(&s, "exit", 0);
        assert_eq!(a.num_ooms, 2);
        assert_eq!(a.metrics[0].rows[0].current, Some(1024));
        assert_eq!(a.metrics[0].rows[2].peak, Some(512));
        assert_eq!(a.metrics[0].rows[1].current, None);
        assert_eq!(a.metrics[10].rows[0].freed, Some(3));
        assert_eq!(a.other.len(), 1);
    }
}
