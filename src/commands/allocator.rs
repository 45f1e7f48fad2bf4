use crate::analysis::allocator::summarize;
use crate::cli::{AllocatorArgs, StatsMoment};
use crate::error::{Error, Result};
use crate::{formats, output, render};

pub fn run(a: AllocatorArgs) -> Result<()> {
    let stats = formats::load_tracker(&a.file)?;
    let Some(r) = stats.record.as_ref() else {
        return Err(Error::input(
            &a.file,
            format!(
                "MemoryTracker stats keep only one of the allocator's counters (num_alloc_retries = {}); \
                 `memtrack record` on a CUDA machine keeps them all",
                stats.num_alloc_retries
            ),
        ));
    };
    if r.backend != "cuda" {
        return Err(Error::input(
            &a.file,
            format!(
                "recorded on the {} backend: there is no CUDA caching allocator there, so no allocator \
                 counters. Record on a GPU (`memtrack record --backend cuda -- …`) to get them",
                if r.backend.is_empty() { "?" } else { &r.backend }
            ),
        ));
    }
    let (counters, at) = match a.at {
        StatsMoment::Exit => (&r.memory_stats, "exit"),
        StatsMoment::Oom => (&r.memory_stats_oom, "oom"),
    };
    if counters.is_empty() {
        let why = match a.at {
            StatsMoment::Oom if !r.memory_stats.is_empty() => {
                "no counters at an out-of-memory error: the program did not run out of CUDA memory \
                 while recorded (the counters at exit are there: --at exit)"
                    .to_string()
            }
            StatsMoment::Oom => {
                "no counters at an out-of-memory error: the program did not run out of CUDA memory \
                 while recorded"
                    .to_string()
            }
            StatsMoment::Exit if !r.memory_stats_oom.is_empty() => {
                "no counters at exit (the process ended without a word), but some at its \
                 out-of-memory error: --at oom"
                    .to_string()
            }
            StatsMoment::Exit => format!(
                "recorded on CUDA, but the program reported no allocator counters at exit: it \
                 never initialised CUDA, or it ended without a word (ended: {})",
                r.exit
                    .as_ref()
                    .and_then(|e| e.ended.as_deref())
                    .unwrap_or("?")
            ),
        };
        return Err(Error::input(&a.file, why));
    }
    let summary = summarize(counters, at, r.device_index.unwrap_or(0));
    let mut title = format!(
        "{}: CUDA caching allocator counters at {}",
        super::display_name(&a.file),
        if at == "oom" {
            "the out-of-memory error"
        } else {
            "exit"
        }
    );
    if let Some(d) = &r.device_name {
        title.push_str(&format!(" ({d})"));
    }
    let text = render::allocator::allocator(
        &summary,
        &title,
        a.common.format,
        a.common.units,
        a.abbreviated,
    );
    output::emit(&a.common.output, text.as_bytes())
}
