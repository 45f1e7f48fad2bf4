//! Driver-level memory while the program runs: every `interval`, the GPU memory NVML reports
//! for each process of the program (the child and its descendants), with the time of
//! CLOCK_MONOTONIC. At the end each recorded process's samples are placed among its ops by
//! the time marks its agent sent (the op count at a moment of the same clock).
//!
//! Memory PyTorch's caching allocator cannot see shows up here: the CUDA context, NCCL
//! buffers, cuBLAS workspaces, other libraries' allocations.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::device::ProcessMemory;
use crate::model::{DeviceSample, DeviceSeries};

/// What the sampler saw.
#[derive(Debug, Default)]
pub struct Samples {
    /// (NVML index, name, uuid) of every device.
    pub devices: Vec<(u32, Option<String>, Option<String>)>,
    /// One per sampling round: (CLOCK_MONOTONIC ns, where its entries start in `entries`).
    pub rounds: Vec<(u64, usize)>,
    /// The program's processes' memory, round after round.
    pub entries: Vec<ProcessMemory>,
}

pub struct Sampler {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Samples>>,
}

pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl Sampler {
    /// Start sampling the processes under `root`; None when NVML is not there (no driver:
    /// nothing to sample, and nothing to say) or the interval is 0.
    pub fn start(root: u32, interval: Duration) -> Option<Sampler> {
        if interval.is_zero() {
            return None;
        }
        let nvml = crate::device::open().ok()?;
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let handle = std::thread::Builder::new()
            .name("memtrack-nvml".into())
            .spawn(move || {
                let mut out = Samples {
                    devices: (0..nvml.device_count())
                        .map(|i| {
                            let (name, uuid) = nvml.describe(i);
                            (i, name, uuid)
                        })
                        .collect(),
                    ..Samples::default()
                };
                let mut family = Family::new(root);
                while !s.load(Ordering::SeqCst) {
                    let started = Instant::now();
                    let t = monotonic_ns();
                    let all = nvml.process_memory();
                    out.rounds.push((t, out.entries.len()));
                    out.entries
                        .extend(all.into_iter().filter(|p| family.contains(p.pid)));
                    let wait = interval.saturating_sub(started.elapsed());
                    // sleep in short steps so stopping is prompt
                    let until = Instant::now() + wait;
                    while !s.load(Ordering::SeqCst) && Instant::now() < until {
                        std::thread::sleep((until - Instant::now()).min(Duration::from_millis(10)));
                    }
                }
                out
            })
            .ok()?;
        Some(Sampler {
            stop,
            handle: Some(handle),
        })
    }

    pub fn finish(mut self) -> Samples {
        self.stop.store(true, Ordering::SeqCst);
        self.handle
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default()
    }
}

/// Whether a pid is the root process or one of its descendants (parents from /proc, cached:
/// each pid is looked up once).
struct Family {
    root: u32,
    known: HashMap<u32, bool>,
}

impl Family {
    fn new(root: u32) -> Family {
        Family {
            root,
            known: HashMap::new(),
        }
    }

    fn contains(&mut self, pid: u32) -> bool {
        if let Some(&k) = self.known.get(&pid) {
            return k;
        }
        let mut at = pid;
        let mut answer = false;
        for _ in 0..64 {
            if at == self.root {
                answer = true;
                break;
            }
            match parent(at) {
                Some(p) if p > 1 => at = p,
                _ => break,
            }
        }
        self.known.insert(pid, answer);
        answer
    }
}

/// The parent pid from `/proc/PID/stat` (the field after the parenthesised command name).
fn parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(1)?.parse().ok()
}

/// The driver-level series of one recorded process: for each device it appeared on, a sample
/// per round between its first and last time mark (0 where the driver did not list it), at
/// the op index its time marks put that moment at.
pub fn series_for(samples: &Samples, pid: i64, marks: &[(u64, usize)]) -> Vec<DeviceSeries> {
    let (Some(&(t0, _)), Some(&(t1, _))) = (marks.first(), marks.last()) else {
        return Vec::new();
    };
    let mine = |e: &ProcessMemory| i64::from(e.pid) == pid;
    let mut devices: Vec<u32> = samples
        .entries
        .iter()
        .filter(|e| mine(e))
        .map(|e| e.device)
        .collect();
    devices.sort_unstable();
    devices.dedup();
    let mut out = Vec::new();
    for dev in devices {
        let mut s = Vec::new();
        for (k, &(t, start)) in samples.rounds.iter().enumerate() {
            if t < t0 || t > t1 {
                continue;
            }
            let end = samples
                .rounds
                .get(k + 1)
                .map_or(samples.entries.len(), |r| r.1);
            let bytes = samples.entries[start..end]
                .iter()
                .find(|e| mine(e) && e.device == dev)
                .map_or(0, |e| e.bytes as i64);
            s.push(DeviceSample {
                op_index: op_at(marks, t),
                time_s: (t - t0) as f64 / 1e9,
                bytes,
            });
        }
        let (name, uuid) = samples
            .devices
            .iter()
            .find(|d| d.0 == dev)
            .map_or((None, None), |d| (d.1.clone(), d.2.clone()));
        out.push(DeviceSeries {
            nvml_index: i64::from(dev),
            name,
            uuid,
            samples: s,
        });
    }
    out
}

/// The op count at time `t`, interpolated between the time marks around it (ops run
/// steadily between two marks 50 ms apart, near enough for a sample taken as often).
fn op_at(marks: &[(u64, usize)], t: u64) -> i64 {
    let k = marks.partition_point(|m| m.0 <= t);
    if k == 0 {
        return marks[0].1 as i64;
    }
    let (ta, oa) = marks[k - 1];
    match marks.get(k) {
        None => oa as i64,
        Some(&(tb, ob)) if tb > ta => {
            let f = (t - ta) as f64 / (tb - ta) as f64;
            (oa as f64 + f * (ob as f64 - oa as f64)).floor() as i64
        }
        Some(_) => oa as i64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_land_among_the_ops_by_time() {
        let marks = [(1_000, 0), (2_000, 100), (3_000, 100), (4_000, 300)];
        assert_eq!(op_at(&marks, 1_500), 50);
        assert_eq!(op_at(&marks, 2_500), 100, "no ops between two marks");
        assert_eq!(op_at(&marks, 3_500), 200);
        assert_eq!(op_at(&marks, 9_000), 300);
        let pm = |pid, device, bytes| ProcessMemory { pid, device, bytes };
        let samples = Samples {
            devices: vec![
                (0, Some("GPU".into()), Some("GPU-1".into())),
                (1, None, None),
            ],
            rounds: vec![(500, 0), (1_500, 0), (2_500, 1), (3_500, 3)],
            entries: vec![pm(7, 0, 100), pm(7, 0, 300), pm(8, 1, 5), pm(7, 1, 50)],
        };
        let s = series_for(&samples, 7, &marks);
        assert_eq!(s.len(), 2, "{s:?}");
        let d0: Vec<(i64, i64)> = s[0].samples.iter().map(|x| (x.op_index, x.bytes)).collect();
        // the round before the first mark is left out; the last lists pid 7 on GPU 1 only
        assert_eq!(d0, vec![(50, 100), (100, 300), (200, 0)]);
        assert_eq!(s[0].uuid.as_deref(), Some("GPU-1"));
        let d1: Vec<i64> = s[1].samples.iter().map(|x| x.bytes).collect();
        assert_eq!(d1, vec![0, 0, 50]);
        assert!((s[0].samples[1].time_s - 1.5e-6).abs() < 1e-12);
    }
}
