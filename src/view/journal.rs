//! `memtrack view JOURNAL`: a job still being recorded, on the stats page. The journal is
//! followed (`record::follow`) and its first process's ops appended to a stats file's model as
//! they come, so every route of a stats file answers for the run so far; `/api/live` says where
//! the job is and gives the last finished iteration's module table, which the page's live
//! part (`page_live.js`) polls to grow the chart and show the badge.
//!
//! What is kept is what `view` keeps of the same file once written (the ops' names and three
//! series), growing with the run: the browser shows every op at any zoom.

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::model::{IterationModules, ModState, RecordInfo, TrackerStats};
use crate::record::follow::Follower;
use crate::record::replay::live::Now;

/// Looks at the journal at most this often (requests come faster while the page zooms).
const LOOK_EVERY: Duration = Duration::from_millis(500);

/// A journal followed into stats.
pub struct JournalStats {
    follower: Follower,
    /// The run so far (the program's process: the first that recorded).
    pub stats: TrackerStats,
    last_look: Option<Instant>,
    modules: Option<IterationModules>,
    ended: Option<String>,
}

/// Where the job is, for the page's badge.
#[derive(Debug, Serialize)]
pub struct LiveFacts {
    /// Ops so far.
    pub ops: usize,
    /// The iteration under way.
    pub iteration: usize,
    /// `forward`, `backward`, `optimizer step`, `outside modules`.
    pub phase: &'static str,
    /// The innermost module running.
    pub module: Option<String>,
    /// Bytes in tensors now.
    pub allocated_now: i64,
    /// How the job ended, once it has (else it is running).
    pub ended: Option<String>,
    /// The last finished iteration's modules (to depth 2): name, parameters, peak forward and
    /// backward bytes.
    pub modules: Vec<ModuleRow>,
    /// That iteration.
    pub modules_iteration: Option<usize>,
}

/// One module of the last finished iteration.
#[derive(Debug, Serialize)]
pub struct ModuleRow {
    /// Its name (`GPT2.transformer`).
    pub module: String,
    /// Its parameters' bytes.
    pub parameter_bytes: i64,
    /// The highest total while its forward ran.
    pub peak_forward_bytes: Option<i64>,
    /// The highest total while its backward ran.
    pub peak_backward_bytes: Option<i64>,
}

impl JournalStats {
    /// Follow `follower`'s journal; the first look is taken at once.
    pub fn new(follower: Follower) -> JournalStats {
        let mut j = JournalStats {
            follower,
            stats: TrackerStats {
                record: Some(RecordInfo::default()),
                ..TrackerStats::default()
            },
            last_look: None,
            modules: None,
            ended: None,
        };
        j.refresh();
        j
    }

    /// Take what the job recorded since the last look (if the last was long enough ago).
    pub fn refresh(&mut self) {
        if self.last_look.is_some_and(|t| t.elapsed() < LOOK_EVERY) {
            return;
        }
        self.last_look = Some(Instant::now());
        self.follower.poll();
        let Some(p) = self.follower.processes.first_mut() else {
            return;
        };
        let s = &mut self.stats;
        let record = s.record.get_or_insert_with(RecordInfo::default);
        record
            .iteration_starts
            .extend(p.replay.take_iteration_starts());
        for m in p.replay.take_markers() {
            // `markers` keeps each name's last occurrence, as a stats file has them
            match s.markers.iter_mut().find(|x| x.name == m.name) {
                Some(x) => x.op_index = m.op_index,
                None => s.markers.push(m.clone()),
            }
            record.marker_events.push(m);
        }
        if let Some(last) = p.replay.take_iterations().pop() {
            self.modules = Some(last);
        }
        p.replay.take_ops(|op| {
            s.names.push(op.name);
            s.allocated.push(op.bytes[0]);
            s.active.push(op.bytes[1]);
            s.reserved.push(op.bytes[2]);
        });
        s.op_index = Some(s.names.len() as i64);
        let now = p.replay.now();
        if now.ended.is_some() || self.follower.journal().moved() {
            self.ended = Some(now.ended.unwrap_or_else(|| "written".into()));
        }
    }

    /// Where the job is now.
    pub fn live(&self) -> LiveFacts {
        let now = (self.follower.processes.first())
            .map(|p| p.replay.now())
            .unwrap_or_default();
        let Now {
            ops,
            iteration,
            phase,
            module,
            memory,
            ..
        } = now;
        let modules = (self.modules.iter().flat_map(|it| &it.modules))
            .filter(|m| m.depth() <= 2)
            .map(|m| ModuleRow {
                module: m.fqn.clone(),
                parameter_bytes: m.parameter_bytes,
                peak_forward_bytes: m.max_total(ModState::PeakForward),
                peak_backward_bytes: m.max_total(ModState::PeakBackward),
            })
            .collect();
        LiveFacts {
            ops,
            iteration,
            phase: if phase.is_empty() { "starting" } else { phase },
            module,
            allocated_now: memory.total(),
            ended: self.ended.clone(),
            modules,
            modules_iteration: self.modules.as_ref().map(|m| m.iteration),
        }
    }
}
