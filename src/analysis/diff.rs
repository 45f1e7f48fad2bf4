//! `diff A B`: what grew between two snapshots, or between two tracker stats files, and the
//! CI gate over it.

use std::collections::BTreeMap;
use std::collections::HashMap;

use serde::Serialize;

use crate::model::snapshot::Snapshot;
use crate::model::{op_module, Series, TrackerStats};

use super::groups::{GroupBy, Grouper};
use super::sites::{LiveAtMoment, LiveSet};
use super::timeline::Timeline;

/// `--fail-over`: growth of the peak past a number of bytes, or past a share of A's peak.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Threshold {
    /// Fail when the peak grows by more than this many bytes.
    Bytes(u64),
    /// Fail when the peak grows by more than this percentage of A's peak (any growth if that is 0).
    Percent(f64),
}

impl std::str::FromStr for Threshold {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        if let Some(p) = t.strip_suffix('%') {
            return p
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .map(Threshold::Percent)
                .ok_or_else(|| format!("'{s}': expected a percentage such as 5%"));
        }
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let num: f64 = num.parse().map_err(|_| {
            format!("'{s}': expected bytes (1048576, 512MiB, 2GiB) or a percentage (5%)")
        })?;
        let mult = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1.0,
            "k" | "kb" | "kib" => 1024.0,
            "m" | "mb" | "mib" => 1024.0 * 1024.0,
            "g" | "gb" | "gib" => 1024.0 * 1024.0 * 1024.0,
            "t" | "tb" | "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
            u => {
                return Err(format!(
                    "'{s}': unknown unit '{u}' (use B, KiB, MiB, GiB or %)"
                ))
            }
        };
        Ok(Threshold::Bytes((num * mult).round() as u64))
    }
}

/// The gate's verdict.
#[derive(Debug, Serialize)]
pub struct Gate {
    /// The `--fail-over` limit the growth was held against.
    pub threshold: Threshold,
    /// What is compared: the peak of allocated bytes.
    pub metric: &'static str,
    /// Peak allocated bytes of A (summed over the compared devices for snapshots).
    pub before_bytes: f64,
    /// Peak allocated bytes of B.
    pub after_bytes: f64,
    /// `after_bytes - before_bytes`; negative when the peak shrank.
    pub growth_bytes: f64,
    /// Growth as a percentage of `before_bytes`; None when A's peak is 0.
    pub growth_percent: Option<f64>,
    /// True when the growth is past the threshold (the command then exits non-zero).
    pub failed: bool,
}

/// Whether the growth from `before` to `after` passes `threshold`, and by how much.
pub fn gate(threshold: Threshold, before: f64, after: f64) -> Gate {
    let growth = after - before;
    let pct = (before > 0.0).then(|| growth / before * 100.0);
    let failed = match threshold {
        Threshold::Bytes(b) => growth > b as f64,
        Threshold::Percent(p) => match pct {
            Some(g) => g > p,
            None => growth > 0.0,
        },
    };
    Gate {
        threshold,
        metric: "peak allocated",
        before_bytes: before,
        after_bytes: after,
        growth_bytes: growth,
        growth_percent: pct,
        failed,
    }
}

// ---- snapshots ----

/// `diff` of two allocator snapshots: totals, segments that came and went, the sites that grew.
#[derive(Debug, Serialize)]
pub struct SnapshotDiff {
    /// JSON tag, always `"snapshot_diff"`.
    pub kind: &'static str,
    /// Device indices compared (a device one file lacks counts as empty there).
    pub devices: Vec<u32>,
    /// Peak allocated, allocated at end, peak reserved, reserved at end, in that order.
    pub metrics: Vec<Metric>,
    /// Segments of A with no segment at the same device, address and size in B, sorted.
    pub segments_only_before: Vec<SegmentKey>,
    /// Segments of B with no segment at the same device, address and size in A, sorted.
    pub segments_only_after: Vec<SegmentKey>,
    /// Total size in bytes of `segments_only_before`.
    pub only_before_bytes: u64,
    /// Total size in bytes of `segments_only_after`.
    pub only_after_bytes: u64,
    /// What a row of `sites` is: `site`, or the `--group-by` asked for.
    pub group_by: &'static str,
    /// Sites (groups) by growth of live bytes at the end (then at the peak), largest first.
    pub sites: Vec<SiteGrowth>,
    /// Sites whose end or peak bytes changed, before truncation to `--top`.
    pub sites_total: usize,
    /// The `--fail-over` verdict on peak allocated; None without `--fail-over`.
    pub gate: Option<Gate>,
}

/// One total compared (bytes before and after).
#[derive(Debug, Serialize)]
pub struct Metric {
    /// Label of the total, e.g. `"peak allocated"` or `"reserved at end"`.
    pub name: &'static str,
    /// Value in A, in bytes.
    pub before_bytes: f64,
    /// Value in B, in bytes.
    pub after_bytes: f64,
    /// `after_bytes - before_bytes`; negative when it shrank.
    pub growth_bytes: f64,
}

/// A segment as the diff matches it between two snapshots.
#[derive(Debug, Serialize, PartialEq, Eq, PartialOrd, Ord, Clone)]
pub struct SegmentKey {
    /// Device index of the segment.
    pub device: u32,
    /// Base address of the segment.
    pub address: u64,
    /// Size of the segment in bytes.
    pub total_size: u64,
}

/// An allocation site's live bytes before and after, at the end and at the peak.
#[derive(Debug, Serialize, Default)]
pub struct SiteGrowth {
    /// `file:line:function` (file name only), or `<non-python>` / `<no-context>`.
    pub site: String,
    /// The same with the full file path; sites are matched between A and B on `site` and this.
    pub location: String,
    /// Requested bytes live at the end of A from this site (0 if absent there).
    pub end_before_bytes: u64,
    /// Requested bytes live at the end of B from this site (0 if absent there).
    pub end_after_bytes: u64,
    /// `end_after_bytes - end_before_bytes`.
    pub end_growth_bytes: i64,
    /// Requested bytes live at A's allocated peak from this site (0 without a trace).
    pub peak_before_bytes: u64,
    /// Requested bytes live at B's allocated peak from this site (0 without a trace).
    pub peak_after_bytes: u64,
    /// `peak_after_bytes - peak_before_bytes`.
    pub peak_growth_bytes: i64,
}

/// Peak allocated of a snapshot's device: the trace's peak, or the final allocated bytes when
/// there is no trace.
fn snapshot_metrics(timelines: &[Timeline]) -> [f64; 4] {
    let (mut peak, mut end, mut reserved, mut peak_res) = (0.0, 0.0, 0.0, 0.0);
    for tl in timelines {
        end += tl.final_allocated_bytes as f64;
        reserved += tl.final_reserved_bytes as f64;
        peak += tl.peak_allocated.map_or(tl.final_allocated_bytes, |p| {
            p.bytes.max(tl.final_allocated_bytes)
        }) as f64;
        peak_res += tl.peak_reserved.map_or(tl.final_reserved_bytes, |p| {
            p.bytes.max(tl.final_reserved_bytes)
        }) as f64;
    }
    [peak, end, peak_res, reserved]
}

type SiteBytes = BTreeMap<(String, String), (u64, u64)>;

/// Bytes by group (label, location) at the end and at the peak of each device.
/// A device's live set at the peak (if it has a trace), at the end, and its `Extra` strings.
type Gathered = (Option<LiveSet>, LiveSet, Vec<String>);

fn site_bytes(s: &Snapshot, devices: &[u32], gathered: Vec<Gathered>, by: &GroupBy) -> SiteBytes {
    let mut out: SiteBytes = BTreeMap::new();
    for (&d, (at_peak, end, strings)) in devices.iter().zip(gathered) {
        let mut grouper = Grouper::new(s, d, by.clone(), strings);
        let mut add = |set: &LiveSet, at_peak: bool| {
            for (&o, &(bytes, _)) in &set.by_origin {
                let (label, site) = grouper.label(o);
                let key = match site {
                    Some(k) => (grouper.site_label(k, false), label),
                    None => (label.clone(), label),
                };
                let e = out.entry(key).or_default();
                if at_peak {
                    e.1 += bytes;
                } else {
                    e.0 += bytes;
                }
            }
        };
        add(&end, false);
        if let Some(p) = &at_peak {
            add(p, true);
        }
    }
    out
}

/// What `diff` compares of one snapshot, on some of its devices: small, so that the snapshot
/// can go before the other file is read (two large snapshots are never held at once).
pub struct SnapshotSide {
    group_by: &'static str,
    metrics: [f64; 4],
    segments: Vec<SegmentKey>,
    sites: SiteBytes,
}

/// What `diff` compares of `s` on `devices`, its bytes grouped `by`; `gathered`: what each
/// device's trace had live at its peak and at the end.
pub fn snapshot_side(
    s: &Snapshot,
    devices: &[u32],
    gathered: Vec<LiveAtMoment>,
    by: &GroupBy,
) -> SnapshotSide {
    let (timelines, gathered): (Vec<Timeline>, Vec<Gathered>) = (gathered.into_iter())
        .map(|g| {
            let LiveAtMoment {
                timeline,
                at,
                end,
                strings,
                ..
            } = g;
            (timeline, (at.map(|(_, set)| set), end, strings))
        })
        .unzip();
    let mut segments: Vec<SegmentKey> = s
        .segments
        .iter()
        .filter(|g| devices.contains(&g.device))
        .map(|g| SegmentKey {
            device: g.device,
            address: g.address,
            total_size: g.total_size,
        })
        .collect();
    segments.sort();
    segments.dedup();
    SnapshotSide {
        group_by: by.name(),
        metrics: snapshot_metrics(&timelines),
        segments,
        sites: site_bytes(s, devices, gathered, by),
    }
}

/// `a` and `b` taken on `devices` (a device one of them lacks counts as empty there).
pub fn snapshot_diff(
    a: SnapshotSide,
    b: SnapshotSide,
    devices: &[u32],
    top: usize,
    threshold: Option<Threshold>,
) -> SnapshotDiff {
    let (ma, mb) = (a.metrics, b.metrics);
    let names = [
        "peak allocated",
        "allocated at end",
        "peak reserved",
        "reserved at end",
    ];
    let metrics = names
        .iter()
        .enumerate()
        .map(|(i, &name)| Metric {
            name,
            before_bytes: ma[i],
            after_bytes: mb[i],
            growth_bytes: mb[i] - ma[i],
        })
        .collect();
    let (ka, kb) = (a.segments, b.segments);
    let only_before: Vec<SegmentKey> = ka
        .iter()
        .filter(|k| kb.binary_search(k).is_err())
        .cloned()
        .collect();
    let only_after: Vec<SegmentKey> = kb
        .iter()
        .filter(|k| ka.binary_search(k).is_err())
        .cloned()
        .collect();
    let (sa, sb) = (a.sites, b.sites);
    let mut all: BTreeMap<(String, String), SiteGrowth> = BTreeMap::new();
    for (k, (end, peak)) in sa {
        let g = all.entry(k.clone()).or_default();
        g.end_before_bytes = end;
        g.peak_before_bytes = peak;
    }
    for (k, (end, peak)) in sb {
        let g = all.entry(k.clone()).or_default();
        g.end_after_bytes = end;
        g.peak_after_bytes = peak;
    }
    let mut sites: Vec<SiteGrowth> = all
        .into_iter()
        .map(|((site, location), mut g)| {
            g.site = site;
            g.location = location;
            g.end_growth_bytes = g.end_after_bytes as i64 - g.end_before_bytes as i64;
            g.peak_growth_bytes = g.peak_after_bytes as i64 - g.peak_before_bytes as i64;
            g
        })
        .filter(|g| g.end_growth_bytes != 0 || g.peak_growth_bytes != 0)
        .collect();
    sites.sort_by(|x, y| {
        (y.end_growth_bytes, y.peak_growth_bytes)
            .cmp(&(x.end_growth_bytes, x.peak_growth_bytes))
            .then_with(|| x.location.cmp(&y.location))
    });
    let sites_total = sites.len();
    sites.truncate(top);
    SnapshotDiff {
        kind: "snapshot_diff",
        group_by: a.group_by,
        devices: devices.to_vec(),
        metrics,
        only_before_bytes: only_before.iter().map(|k| k.total_size).sum(),
        only_after_bytes: only_after.iter().map(|k| k.total_size).sum(),
        segments_only_before: only_before,
        segments_only_after: only_after,
        sites,
        sites_total,
        gate: threshold.map(|t| gate(t, ma[0], mb[0])),
    }
}

// ---- tracker stats ----

/// `diff` of two tracker stats files: peaks, and the modules and ops that grew.
#[derive(Debug, Serialize)]
pub struct StatsDiff {
    /// JSON tag, always `"stats_diff"`.
    pub kind: &'static str,
    /// Number of ops (rows) in A.
    pub ops_before: usize,
    /// Number of ops (rows) in B.
    pub ops_after: usize,
    /// Peak allocated, active and reserved bytes of A and B, in that order.
    pub peaks: Vec<Metric>,
    /// Ops by growth of the memory they generate (allocated after the op minus after the op
    /// before, MemoryTracker.summary's measure), matched by op name.
    pub ops: Vec<OpGrowth>,
    /// Ops whose generated memory changed, before truncation to `--top`.
    pub ops_total: usize,
    /// Distinct op names found only in A.
    pub only_before: usize,
    /// Distinct op names found only in B.
    pub only_after: usize,
    /// Modules (from the op names) by growth of the memory their ops generate.
    pub modules: Vec<ModuleGrowth>,
    /// Modules that changed (generated bytes or peak), before truncation to `--top`.
    pub modules_total: usize,
    /// The `--fail-over` verdict on peak allocated; None without `--fail-over`.
    pub gate: Option<Gate>,
}

/// A module's memory generated before and after.
#[derive(Debug, Serialize)]
pub struct ModuleGrowth {
    /// `(root)` for the root module PyTorch's tracker names "", `(no module)` for ops outside.
    pub module: String,
    /// The sum of what its ops generate (see `OpGrowth`), over the whole file.
    pub generated_before_bytes: Option<f64>,
    /// The same in B; None when no op of B belongs to the module.
    pub generated_after_bytes: Option<f64>,
    /// Generated bytes after minus before (a missing side counts as 0).
    pub growth_bytes: f64,
    /// The highest allocated bytes after any of its ops.
    pub peak_before_bytes: Option<f64>,
    /// The same in B; None when the module is absent from B.
    pub peak_after_bytes: Option<f64>,
}

/// An op's memory generated (the growth of allocated over it) before and after, matched by name.
#[derive(Debug, Serialize)]
pub struct OpGrowth {
    /// Op name as the tracker wrote it (module path and op), the key ops are matched on.
    pub op: String,
    /// Allocated bytes after the op minus after the op before it, in A; None when A lacks the op.
    pub generated_before_bytes: Option<f64>,
    /// The same in B; None when B lacks the op.
    pub generated_after_bytes: Option<f64>,
    /// Generated bytes after minus before (a missing side counts as 0); never 0.
    pub growth_bytes: f64,
    /// Allocated bytes right after the op in A; None when A lacks the op.
    pub allocated_before_bytes: Option<f64>,
    /// Allocated bytes right after the op in B; None when B lacks the op.
    pub allocated_after_bytes: Option<f64>,
}

fn peak(v: &[f64]) -> f64 {
    v.iter()
        .copied()
        .filter(|x| !x.is_nan())
        .fold(f64::NEG_INFINITY, f64::max)
        .max(0.0)
}

/// name → (generated, allocated after), the last occurrence of a repeated name winning, as
/// MemoryTracker's dicts keep it.
fn by_name(t: &TrackerStats) -> HashMap<&str, (f64, f64)> {
    let mut m = HashMap::with_capacity(t.op_count());
    for i in 0..t.op_count() {
        let before = if i == 0 { 0.0 } else { t.allocated[i - 1] };
        m.insert(t.names.get(i), (t.allocated[i] - before, t.allocated[i]));
    }
    m
}

/// module → (generated, peak allocated), in order of first appearance.
fn by_module(t: &TrackerStats) -> Vec<(String, f64, f64)> {
    let mut index: HashMap<&str, usize> = HashMap::new();
    let mut out: Vec<(String, f64, f64)> = Vec::new();
    for i in 0..t.op_count() {
        let name = match op_module(t.names.get(i)) {
            Some("") => "(root)",
            Some(m) => m,
            None => "(no module)",
        };
        let before = if i == 0 { 0.0 } else { t.allocated[i - 1] };
        let k = *index.entry(name).or_insert_with(|| {
            out.push((name.to_string(), 0.0, f64::NEG_INFINITY));
            out.len() - 1
        });
        out[k].1 += t.allocated[i] - before;
        out[k].2 = out[k].2.max(t.allocated[i]);
    }
    out
}

fn module_growth(a: &TrackerStats, b: &TrackerStats) -> Vec<ModuleGrowth> {
    let (ma, mb) = (by_module(a), by_module(b));
    let in_b: HashMap<&str, (f64, f64)> =
        mb.iter().map(|(m, g, p)| (m.as_str(), (*g, *p))).collect();
    let in_a: HashMap<&str, (f64, f64)> =
        ma.iter().map(|(m, g, p)| (m.as_str(), (*g, *p))).collect();
    let names = ma.iter().map(|(m, _, _)| m.as_str()).chain(
        mb.iter()
            .map(|(m, _, _)| m.as_str())
            .filter(|m| !in_a.contains_key(m)),
    );
    let mut out: Vec<ModuleGrowth> = names
        .filter_map(|m| {
            let (x, y) = (in_a.get(m), in_b.get(m));
            let growth = y.map_or(0.0, |v| v.0) - x.map_or(0.0, |v| v.0);
            let peak_moved = x.map(|v| v.1) != y.map(|v| v.1);
            (growth != 0.0 || peak_moved).then(|| ModuleGrowth {
                module: m.to_string(),
                generated_before_bytes: x.map(|v| v.0),
                generated_after_bytes: y.map(|v| v.0),
                growth_bytes: growth,
                peak_before_bytes: x.map(|v| v.1),
                peak_after_bytes: y.map(|v| v.1),
            })
        })
        .collect();
    out.sort_by(|p, q| q.growth_bytes.total_cmp(&p.growth_bytes));
    out
}

/// Compare tracker stats `a` (before) with `b` (after), listing the `top` modules and ops that grew
/// most.
pub fn stats_diff(
    a: &TrackerStats,
    b: &TrackerStats,
    top: usize,
    threshold: Option<Threshold>,
) -> StatsDiff {
    let peaks = Series::ALL
        .iter()
        .map(|&s| {
            let (x, y) = (peak(a.series(s)), peak(b.series(s)));
            Metric {
                name: match s {
                    Series::Allocated => "peak allocated",
                    Series::Active => "peak active",
                    Series::Reserved => "peak reserved",
                },
                before_bytes: x,
                after_bytes: y,
                growth_bytes: y - x,
            }
        })
        .collect();
    let (na, nb) = (by_name(a), by_name(b));
    let mut ops: Vec<OpGrowth> = Vec::new();
    let mut only_before = 0;
    let mut only_after = 0;
    let mut seen: Vec<&str> = Vec::new();
    for i in 0..a.op_count() {
        seen.push(a.names.get(i));
    }
    for i in 0..b.op_count() {
        let n = b.names.get(i);
        if !na.contains_key(n) {
            seen.push(n);
        }
    }
    let mut done = std::collections::HashSet::new();
    for name in seen {
        if !done.insert(name) {
            continue;
        }
        let x = na.get(name);
        let y = nb.get(name);
        match (x, y) {
            (Some(_), None) => only_before += 1,
            (None, Some(_)) => only_after += 1,
            _ => {}
        }
        let growth = y.map_or(0.0, |v| v.0) - x.map_or(0.0, |v| v.0);
        if growth == 0.0 {
            continue;
        }
        ops.push(OpGrowth {
            op: name.to_string(),
            generated_before_bytes: x.map(|v| v.0),
            generated_after_bytes: y.map(|v| v.0),
            growth_bytes: growth,
            allocated_before_bytes: x.map(|v| v.1),
            allocated_after_bytes: y.map(|v| v.1),
        });
    }
    ops.sort_by(|p, q| q.growth_bytes.total_cmp(&p.growth_bytes));
    let ops_total = ops.len();
    ops.truncate(top);
    let mut modules = module_growth(a, b);
    let modules_total = modules.len();
    modules.truncate(top);
    let (pa, pb) = (peak(&a.allocated), peak(&b.allocated));
    StatsDiff {
        kind: "stats_diff",
        ops_before: a.op_count(),
        ops_after: b.op_count(),
        peaks,
        ops,
        ops_total,
        only_before,
        only_after,
        modules,
        modules_total,
        gate: threshold.map(|t| gate(t, pa, pb)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_parse() {
        assert_eq!("5%".parse::<Threshold>(), Ok(Threshold::Percent(5.0)));
        assert_eq!("1024".parse::<Threshold>(), Ok(Threshold::Bytes(1024)));
        assert_eq!("1.5MiB".parse::<Threshold>(), Ok(Threshold::Bytes(3 << 19)));
        assert_eq!("2 GB".parse::<Threshold>(), Ok(Threshold::Bytes(2 << 30)));
        assert!("5 parsecs".parse::<Threshold>().is_err());
        assert!("-1%".parse::<Threshold>().is_err());
    }

    #[test]
    fn gate_fails_only_past_the_threshold() {
        assert!(!gate(Threshold::Bytes(10), 100.0, 110.0).failed);
        assert!(gate(Threshold::Bytes(10), 100.0, 111.0).failed);
        assert!(gate(Threshold::Percent(5.0), 100.0, 106.0).failed);
        assert!(!gate(Threshold::Percent(5.0), 100.0, 90.0).failed);
    }
}
