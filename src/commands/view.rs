//! `memtrack view FILE`: read the capture once (events put aside on disk as they are read),
//! index one device's allocations, then serve the page until Ctrl-C (`view::server`). A
//! torch.profiler trace is read whole (`formats::profiler_trace`) and indexed the same way.

use std::net::SocketAddr;

use crate::analysis::timeline::Timelines;
use crate::cli::ViewArgs;
use crate::error::{Error, Result};
use crate::formats::{self, event_spool::EventSpool};
use crate::view::profile::ProfileViewError;
use crate::view::server::{Content, Server};

pub fn run(a: ViewArgs) -> Result<()> {
    let addr = SocketAddr::new(a.host, a.port);
    if !a.host.is_loopback() {
        eprintln!(
            "memtrack: warning: listening on {} lets other machines ask for this capture's stack traces (file paths, function names); anyone with the URL's token can read them",
            a.host
        );
    }
    // the port is taken before the (possibly long) load: a clash is said at once
    let server = Server::bind(addr).map_err(|e| Error::Usage(format!("view: {e}")))?;
    if super::profile::any_trace(std::slice::from_ref(&a.file)) {
        if a.file.is_dir() {
            return Err(Error::input(
                &a.file,
                "view shows one trace: name one of the folder's files (one per rank or worker)",
            ));
        }
        let trace = crate::formats::profiler_trace::load(&a.file)?;
        let stage = crate::progress::Stage::new("indexing");
        let ix = crate::analysis::profile_summary::Indexed::new(&trace);
        let view = crate::view::profile::build(ix, a.device).map_err(|e| match e {
            ProfileViewError::Temporary(e) => super::spool_error("view")(e),
            e => Error::input(&a.file, e.to_string()),
        })?;
        drop(stage);
        return serve(&a, server, Content::Profile(Box::new(view)));
    }
    let spool = EventSpool::new().map_err(super::spool_error("view"))?;
    let mut sink = (Timelines::new(true), spool);
    let input = formats::load_streaming(&a.file, formats::SnapshotParts::All, &mut sink)?;
    super::warn_inconsistent_input(&a.file, &input, false);
    let content = match input {
        formats::Input::Tracker(stats) => {
            if stats.op_count() == 0 {
                return Err(Error::input(
                    &a.file,
                    "no ops recorded: nothing to show (the tracker saw no operator run)",
                ));
            }
            Content::Stats(stats)
        }
        formats::Input::Snapshot(snap) => {
            let (mut timelines, mut spool) = sink;
            spool.finish().map_err(super::spool_error("view"))?;
            let devices = super::devices_with_trace_events(&a.file, &snap, a.device)?;
            let Some(&device) = devices.first() else {
                return Err(super::no_trace_events(
                    &a.file,
                    "no trace events to show (`memtrack segments -o map.svg` draws the segments)",
                ));
            };
            let stage = crate::progress::Stage::new("indexing");
            let timeline = timelines.take(device).finish(&snap, device);
            let index = crate::view::index::build(&snap, device, timeline, &mut spool)
                .map_err(super::spool_error("view"))?;
            drop(stage);
            Content::Snapshot {
                snap,
                index: Box::new(index),
                events: Box::new(spool),
                devices,
            }
        }
    };
    serve(&a, server, content)
}

/// Print the URL, open the browser, answer until Ctrl-C.
fn serve(a: &ViewArgs, server: Server, content: Content<'_>) -> Result<()> {
    let url = server.url();
    // the first line on stdout is the URL (scripts and tests read it)
    println!("{url}");
    use std::io::Write;
    let _ = std::io::stdout().flush();
    eprintln!(
        "memtrack: serving {} at {url} (Ctrl-C stops)",
        a.file.display()
    );
    if !a.no_browser {
        open_browser(&url);
    }
    server
        .run(&super::display_name(&a.file), content)
        .map_err(|e| Error::Unavailable(format!("view: serving stopped: {e}")))?;
    eprintln!("memtrack: view stopped");
    Ok(())
}

/// Ask the desktop to open `url`; failing that is a note, not an error (the URL is printed).
fn open_browser(url: &str) {
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    let spawned = std::process::Command::new(opener)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    match spawned {
        // reaped aside, so no zombie is left while serving
        Ok(mut child) => {
            std::thread::spawn(move || child.wait());
        }
        Err(e) => eprintln!(
            "memtrack: note: could not open a browser ({opener}: {e}); open the URL above"
        ),
    }
}
