use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use crate::cli::GpusArgs;
use crate::error::{Error, Result};
use crate::render::{self, Format};
use crate::{device, output};

pub fn run(a: GpusArgs) -> Result<()> {
    let nvml = device::open().map_err(|e| Error::Unavailable(e.to_string()))?;
    let Some(seconds) = a.watch else {
        let text = render::gpus::gpus(&nvml.gpus(), a.format, a.units);
        return output::emit(std::path::Path::new("-"), text.as_bytes());
    };
    if !(seconds.is_finite() && seconds > 0.0) {
        return Err(Error::Usage(format!(
            "--watch {seconds}: give a number of seconds above 0"
        )));
    }
    let period = Duration::from_secs_f64(seconds);
    // redraw in place on a terminal; a pipe or file gets one listing after another
    let redraw = a.format == Format::Text && std::io::stdout().is_terminal();
    let mut n = 0u64;
    loop {
        let started = Instant::now();
        let list = nvml.gpus();
        let mut text = String::new();
        if redraw {
            text.push_str("\x1b[H\x1b[2J"); // home, clear: cursor control, not colour
        }
        if a.format == Format::Json {
            // JSON Lines: one object per listing
            text = serde_json::to_string(&list).expect("gpu lists serialize") + "\n";
        } else {
            if !redraw && n > 0 {
                text.push('\n');
            }
            text.push_str(&format!(
                "{} (every {seconds} s; Ctrl-C stops)\n",
                local_time()
            ));
            text.push_str(&render::gpus::gpus(&list, a.format, a.units));
        }
        let mut out = std::io::stdout().lock();
        if let Err(e) = out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                return Ok(());
            }
            return Err(Error::output(std::path::Path::new("<stdout>"), e));
        }
        n += 1;
        if a.count.is_some_and(|c| n >= c) {
            return Ok(());
        }
        std::thread::sleep(period.saturating_sub(started.elapsed()));
    }
}

/// `HH:MM:SS`, local time.
fn local_time() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as libc::time_t;
    // SAFETY: localtime_r writes only into `tm`, which lives here.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    if unsafe { libc::localtime_r(&now, &mut tm) }.is_null() {
        return String::new();
    }
    format!("{:02}:{:02}:{:02}", tm.tm_hour, tm.tm_min, tm.tm_sec)
}
