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
            // an estimate's verdict is the estimate's own (fits, where it runs out)
            let verdict = crate::analysis::estimate_verdict::verdict(&stats)
                .and_then(|v| serde_json::to_value(v).ok());
            Content::Stats { stats, verdict }
        }
        formats::Input::Snapshot(snap) => {
            let (mut timelines, mut spool) = sink;
            spool.finish().map_err(super::spool_error("view"))?;
            let devices = super::devices_with_trace_events(&a.file, &snap, a.device)?;
            // without a trace (history off, or an older PyTorch) the page says so and shows
            // the allocator's state at the dump
            let device = match devices.first() {
                Some(&d) => d,
                None => super::snapshot_devices(&a.file, &snap, a.device)?
                    .first()
                    .copied()
                    .unwrap_or(0),
            };
            let stage = crate::progress::Stage::new("indexing");
            let timeline = timelines.take(device).finish(&snap, device);
            let (index, segments) =
                crate::view::snapshot_index::build(&snap, device, timeline, &mut spool)
                    .map_err(super::spool_error("view"))?;
            drop(stage);
            Content::Snapshot {
                snap,
                index: Box::new(index),
                segments: Box::new(segments),
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
    // Ctrl-C from here on ends the serving loop, so the browser's start file is removed
    crate::view::server::stop_on_signals();
    // the first line on stdout is the URL (scripts and tests read it)
    println!("{url}");
    use std::io::Write;
    let _ = std::io::stdout().flush();
    eprintln!(
        "memtrack: serving {} at {url} (Ctrl-C stops)",
        crate::quote::path(&a.file)
    );
    // held until the server stops: dropping it removes the file
    let _start_file = if a.no_browser {
        None
    } else {
        open_browser(&url)
    };
    server
        .run(&super::display_name(&a.file), content)
        .map_err(|e| Error::Unavailable(format!("view: serving stopped: {e}")))?;
    eprintln!("memtrack: view stopped");
    Ok(())
}

/// Ask the desktop to open the page. The opener gets a file that redirects to `url`, never the
/// URL: a command line is readable by every user (`ps`), the file by its owner only (Jupyter
/// does the same). Failing is a note, not an error (the URL is printed). The folder returned
/// holds the file; dropping it removes both.
fn open_browser(url: &str) -> Option<tempfile::TempDir> {
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    let (folder, file) = match start_file(url) {
        Ok(made) => made,
        Err(e) => {
            eprintln!(
                "memtrack: note: could not write the browser's start file ({e}); open the URL above"
            );
            return None;
        }
    };
    let spawned = std::process::Command::new(opener)
        .arg(&file)
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
    Some(folder)
}

/// A fresh folder only the user may enter (0700) holding `open.html` (0600, created
/// exclusively, never through a link) that sends the browser on to `url`. In
/// `$XDG_RUNTIME_DIR` when it is a private folder of ours, else in the temporary folder.
fn start_file(url: &str) -> std::io::Result<(tempfile::TempDir, std::path::PathBuf)> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let private = |dir: &std::path::Path| {
        use std::os::unix::fs::MetadataExt;
        // SAFETY: geteuid has no preconditions
        let me = unsafe { libc::geteuid() };
        std::fs::symlink_metadata(dir)
            .is_ok_and(|m| m.is_dir() && m.uid() == me && m.mode() & 0o077 == 0)
    };
    let base = std::env::var_os("XDG_RUNTIME_DIR")
        .map(std::path::PathBuf::from)
        .filter(|d| d.is_absolute() && private(d))
        .unwrap_or_else(std::env::temp_dir);
    // made with mkdir's exclusive create; its mode set outright, whatever the umask
    let folder = tempfile::Builder::new()
        .prefix("memtrack-view-")
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir_in(&base)?;
    std::fs::set_permissions(folder.path(), std::fs::Permissions::from_mode(0o700))?;
    let path = folder.path().join("open.html");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    use std::io::Write;
    // the URL is ours (address, port, hex token): nothing in it needs escaping
    write!(
        file,
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">\n\
         <meta http-equiv=\"refresh\" content=\"0;url={url}\">\n\
         <title>memtrack view</title></head>\n\
         <body><p>Opening <a href=\"{url}\">memtrack view</a>.</p></body></html>\n"
    )?;
    Ok((folder, path))
}
