//! The HTTP side of `memtrack view`: a listener, a random token every request must carry, and
//! the routes (the page, then JSON), answered one at a time until Ctrl-C.
//!
//! Safe by default: the command binds 127.0.0.1; stack traces name local paths, so even there a
//! request without the URL's token is refused (403). Only GET; no request body; the URL and
//! every parameter bounded (a wider tile than [`MAX_WIDTH`], a longer search than
//! [`MAX_QUERY`] are refused). The connections, their sizes, timeouts and `Host` are
//! [`super::http`]'s; the refusals that need no capture ([`admit`]) run on the connections'
//! threads, the routes on the one loop that holds the capture.

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::model::trace::TraceEvents;
use crate::model::{Snapshot, TrackerStats};

use super::http::{self, Request, Response};
use super::index::{AllocIndex, Axis, BandBy, MAX_WIDTH};
use super::profile::ProfileView;
use super::segment_index::SegmentIndex;
use super::{details, page, series};

/// Longest URL answered.
pub const MAX_URL: usize = 4096;
/// Longest search.
pub const MAX_QUERY: usize = 200;

/// What is served.
pub enum Content<'a> {
    /// An allocator snapshot: its model (no trace events), one device's allocation index, and
    /// the events where the reading put them aside.
    Snapshot {
        /// Segments, blocks, stacks and annotations.
        snap: Box<Snapshot>,
        /// Every allocation of the device shown.
        index: Box<AllocIndex>,
        /// Its segments over time (reserved bytes by segment).
        segments: Box<SegmentIndex>,
        /// The trace's events, replayed for moments.
        events: Box<dyn TraceEvents>,
        /// Devices with trace events (the one shown is `index.device`).
        devices: Vec<u32>,
    },
    /// A stats file: series per op, and for an `estimate` file its verdict (the estimate's
    /// own, `estimate::Verdict`, as JSON).
    Stats {
        /// The file.
        stats: Box<TrackerStats>,
        /// Fits or not, where it runs out: `analysis::estimate_verdict`'s answer, whatever its fields.
        verdict: Option<serde_json::Value>,
    },
    /// A torch.profiler trace: its memory events and ranges, one device's allocations indexed.
    Profile(Box<ProfileView<'a>>),
}

/// A listening server and its token.
pub struct Server {
    listener: TcpListener,
    token: Arc<str>,
    addr: SocketAddr,
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Binding the address failed (in use, not ours).
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// Where.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// No random token could be made.
    #[error("cannot read random bytes for the access token: {0}")]
    Random(std::io::Error),
}

impl Server {
    /// Listen on `addr` (port 0: a free one) with a fresh random token.
    pub fn bind(addr: SocketAddr) -> Result<Server, StartError> {
        let listener =
            TcpListener::bind(addr).map_err(|source| StartError::Bind { addr, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| StartError::Bind { addr, source })?;
        let mut bytes = [0u8; 16];
        std::io::Read::read_exact(
            &mut std::fs::File::open("/dev/urandom").map_err(StartError::Random)?,
            &mut bytes,
        )
        .map_err(StartError::Random)?;
        let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        Ok(Server {
            listener,
            token: token.into(),
            addr,
        })
    }

    /// The URL of the page, token included.
    pub fn url(&self) -> String {
        let host = match self.addr {
            SocketAddr::V6(a) => format!("[{}]", a.ip()),
            SocketAddr::V4(a) => a.ip().to_string(),
        };
        format!("http://{host}:{}/?token={}", self.addr.port(), self.token)
    }

    /// Answer requests until SIGINT or SIGTERM; `title` names the capture on the page.
    pub fn run(self, title: &str, mut content: Content<'_>) -> std::io::Result<()> {
        let stop = stop_on_signals();
        let token = self.token.clone();
        let requests = http::serve(self.listener, Arc::new(move |r: &Request| admit(&token, r)))?;
        while !stop.load(Ordering::SeqCst) {
            let pending = match requests.recv_timeout(Duration::from_millis(200)) {
                Ok(pending) => pending,
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(std::io::Error::other("the listener stopped"));
                }
            };
            let response = answer(&pending.request, title, &mut content);
            pending.respond(response);
        }
        Ok(())
    }
}

const TEXT: &str = "text/plain; charset=utf-8";

/// The refusals that need no capture: a URL too long, not GET, a body, no token. `None`: the
/// request goes on to [`answer`].
fn admit(token: &str, request: &Request) -> Option<Response> {
    let url = &request.target;
    if url.len() > MAX_URL {
        return Some(Response::text(414, "URL too long"));
    }
    if request.method != "GET" {
        return Some(Response::text(405, "read only: GET only"));
    }
    if request.has_body {
        return Some(Response::text(413, "no request body is read"));
    }
    let query = url.split_once('?').map_or("", |(_, q)| q);
    if !Params::parse(query)
        .get("token")
        .is_some_and(|t| same(t.as_bytes(), token.as_bytes()))
    {
        return Some(Response::text(
            403,
            "forbidden: the URL's token is required",
        ));
    }
    None
}

/// The answer to a request [`admit`] let through.
fn answer(request: &Request, title: &str, content: &mut Content<'_>) -> Response {
    let url = request.target.as_str();
    let (path, query) = url.split_once('?').unwrap_or((url, ""));
    let params = Params::parse(query);
    let answer = match path {
        "/" => {
            let kind = match content {
                Content::Snapshot { .. } => "snapshot",
                Content::Stats { .. } => "stats",
                Content::Profile(_) => "profile",
            };
            return Response {
                status: 200,
                content_type: "text/html; charset=utf-8",
                body: page::html(title, kind).into_bytes(),
            };
        }
        _ => route(path, &params, content),
    };
    match answer {
        Ok(body) => Response {
            status: 200,
            content_type: "application/json",
            body,
        },
        Err(Failure(status, why)) => Response {
            status,
            content_type: TEXT,
            body: why.into_bytes(),
        },
    }
}

/// An API answer that is not 200: status and why.
struct Failure(u16, String);

fn bad(why: impl Into<String>) -> Failure {
    Failure(400, why.into())
}

fn json(value: &impl Serialize) -> Result<Vec<u8>, Failure> {
    serde_json::to_vec(value).map_err(|e| Failure(500, e.to_string()))
}

fn io(e: std::io::Error) -> Failure {
    Failure(500, format!("reading the trace events back: {e}"))
}

/// The JSON routes.
fn route(path: &str, p: &Params, content: &mut Content<'_>) -> Result<Vec<u8>, Failure> {
    match (path, content) {
        (
            "/api/overview",
            Content::Snapshot {
                snap,
                index,
                segments,
                devices,
                ..
            },
        ) => json(&serde_json::json!({
            "kind": "snapshot",
            "devices": devices,
            // a capture recorded without history holds the allocator's state at the dump only
            "trace": !index.allocs.is_empty(),
            "timeline": index.overview(),
            "stacks": snap.stacks.stack_count(),
            "segments": {
                "count": segments.index.allocs.len(),
                "peak_reserved": segments.index.marks.peak_allocated,
            },
        })),
        ("/api/tile", Content::Snapshot { index, .. }) => tile(index, p),
        ("/api/segment_tile", Content::Snapshot { segments, .. }) => {
            let (x0, x1, width, height, axis) = window(p)?;
            json(&segments.tile(x0, x1, width, height, axis))
        }
        ("/api/event", Content::Snapshot { index, .. }) => event_x(index, p),
        ("/api/alloc", Content::Snapshot { snap, index, .. }) => {
            let id = p.count("id", usize::MAX)?;
            match details::alloc(snap, index, id) {
                Some(d) => json(&d),
                None => Err(Failure(404, format!("no allocation {id}"))),
            }
        }
        (
            "/api/live",
            Content::Snapshot {
                snap,
                index,
                events,
                ..
            },
        ) => {
            let event = p.event(index)?;
            json(&details::live_at(snap, index.device, events.as_mut(), event).map_err(io)?)
        }
        (
            "/api/segments",
            Content::Snapshot {
                snap,
                index,
                events,
                ..
            },
        ) => {
            if p.get("event") == Some("end") {
                return json(&details::state_at_end(snap, index.device));
            }
            let event = p.event(index)?;
            json(&details::state_at(snap, index.device, events.as_mut(), event).map_err(io)?)
        }
        ("/api/events", Content::Snapshot { index, .. }) => event_list(index, p),
        ("/api/events", Content::Profile(view)) => event_list(&view.index, p),
        ("/api/search", Content::Snapshot { snap, index, .. }) => {
            let q = p.get("q").unwrap_or("");
            if q.is_empty() || q.len() > MAX_QUERY {
                return Err(bad(format!("q: 1 to {MAX_QUERY} characters")));
            }
            json(&details::search(snap, index, q))
        }
        ("/api/overview", Content::Profile(view)) => json(&serde_json::json!({
            "kind": "profile",
            "devices": view.devices,
            "timeline": view.index.overview(),
        })),
        ("/api/tile", Content::Profile(view)) => tile(&view.index, p),
        ("/api/event", Content::Profile(view)) => event_x(&view.index, p),
        ("/api/alloc", Content::Profile(view)) => {
            let id = p.count("id", usize::MAX)?;
            match view.alloc(id) {
                Some(d) => json(&d),
                None => Err(Failure(404, format!("no allocation {id}"))),
            }
        }
        ("/api/live", Content::Profile(view)) => {
            let event = p.event(&view.index)?;
            json(&view.live_at(event, details::MOMENT_ROWS))
        }
        ("/api/search", Content::Profile(view)) => {
            let q = p.get("q").unwrap_or("");
            if q.is_empty() || q.len() > MAX_QUERY {
                return Err(bad(format!("q: 1 to {MAX_QUERY} characters")));
            }
            json(&view.search(q))
        }
        ("/api/segments" | "/api/segment_tile", Content::Profile(_)) => Err(Failure(
            404,
            "a profiler trace has no segments: it records the allocator's totals only".into(),
        )),
        ("/api/overview", Content::Stats { stats, verdict }) => json(&serde_json::json!({
            "kind": "stats",
            "series": series::overview(stats),
            "record": series::record_facts(stats),
            "verdict": verdict,
        })),
        ("/api/modules", Content::Stats { stats, .. }) => {
            let iteration = match p.get("iteration") {
                None => None,
                Some(_) => Some(p.count("iteration", usize::MAX)?),
            };
            match series::modules(stats, iteration) {
                Some(m) => json(&m),
                None => Err(Failure(
                    404,
                    "no module breakdown: a MemoryTracker file has none (`memtrack record` writes one)"
                        .into(),
                )),
            }
        }
        ("/api/series", Content::Stats { stats, .. }) => {
            let (x0, x1) = (p.number("x0")?, p.number("x1")?);
            json(&series::tile(stats, x0, x1, p.count("width", MAX_WIDTH)?))
        }
        ("/api/search", Content::Stats { stats, .. }) => {
            let q = p.get("q").unwrap_or("");
            if q.is_empty() || q.len() > MAX_QUERY {
                return Err(bad(format!("q: 1 to {MAX_QUERY} characters")));
            }
            json(&series::search(stats, q))
        }
        ("/api/op", Content::Stats { stats, .. }) => {
            let i = p.count("i", usize::MAX)?;
            if i >= stats.op_count() {
                return Err(Failure(404, format!("no op {i}")));
            }
            json(&serde_json::json!({
                "op": i,
                "name": stats.names.get(i),
                "allocated": stats.allocated.get(i),
                "active": stats.active.get(i),
                "reserved": stats.reserved.get(i),
            }))
        }
        _ => Err(Failure(404, format!("no such path: {path}"))),
    }
}

/// `/api/tile`: the window `x0..x1` on `axis` (`event`, the default, or `time`: the
/// timeline's own x), small allocations banded `by` `site` (the default) or `category`.
fn tile(index: &AllocIndex, p: &Params) -> Result<Vec<u8>, Failure> {
    let (x0, x1, width, height, axis) = window(p)?;
    let by = match p.get("by") {
        None | Some("site") => BandBy::Site,
        Some("category") => BandBy::Category,
        Some(other) => return Err(bad(format!("by: `site` or `category`, not {other:?}"))),
    };
    json(&index.tile_on(x0, x1, width, height, axis, by))
}

/// A tile's window: `x0`, `x1`, `width`, `height` (bounded) and `axis`.
fn window(p: &Params) -> Result<(f64, f64, usize, usize, Axis), Failure> {
    let (x0, x1) = (p.number("x0")?, p.number("x1")?);
    let width = p.count("width", MAX_WIDTH)?;
    let height = p.count("height", MAX_WIDTH)?;
    let axis = match p.get("axis") {
        None | Some("time") => Axis::Own,
        Some("event") => Axis::Event,
        Some(other) => return Err(bad(format!("axis: `event` or `time`, not {other:?}"))),
    };
    Ok((x0, x1, width, height, axis))
}

/// `/api/events?from=N&count=K`: the allocs and frees among K events from N.
fn event_list(index: &AllocIndex, p: &Params) -> Result<Vec<u8>, Failure> {
    let from = p.count("from", usize::MAX)?;
    let count = p.count("count", details::MAX_EVENT_ROWS)?;
    json(&details::events(index, from, count))
}

/// `/api/event?event=N`: the event's x on the timeline's own axis (seconds, or the index), and
/// the allocated bytes after it (a link or an arrow key names a moment by its event).
fn event_x(index: &AllocIndex, p: &Params) -> Result<Vec<u8>, Failure> {
    let event = p.event(index)?;
    let x = index.series.x(event);
    let allocated = index.series.allocated(event);
    index.series.release_all();
    json(&serde_json::json!({ "event": event, "x": x, "allocated": allocated }))
}

/// A query string's parameters, percent-decoded.
struct Params(Vec<(String, String)>);

impl Params {
    fn parse(query: &str) -> Params {
        Params(
            query
                .split('&')
                .filter(|kv| !kv.is_empty())
                .map(|kv| {
                    let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                    (decode(k), decode(v))
                })
                .collect(),
        )
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    fn number(&self, key: &str) -> Result<f64, Failure> {
        let v = self.get(key).ok_or_else(|| bad(format!("{key} missing")))?;
        v.parse::<f64>()
            .ok()
            .filter(|n| n.is_finite())
            .ok_or_else(|| bad(format!("{key}: not a finite number")))
    }

    fn count(&self, key: &str, most: usize) -> Result<usize, Failure> {
        let v = self.get(key).ok_or_else(|| bad(format!("{key} missing")))?;
        v.parse::<usize>()
            .ok()
            .filter(|&n| n <= most)
            .ok_or_else(|| bad(format!("{key}: a whole number up to {most}")))
    }

    fn event(&self, index: &AllocIndex) -> Result<usize, Failure> {
        let n = index.events();
        let e = self.count("event", usize::MAX)?;
        if e >= n {
            return Err(Failure(404, format!("no event {e}: the trace has {n}")));
        }
        Ok(e)
    }
}

/// `%XX` and `+` decoded; invalid sequences kept as they are.
fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                let hex = |c: u8| (c as char).to_digit(16);
                match (hex(b[i + 1]), hex(b[i + 2])) {
                    (Some(h), Some(l)) => {
                        out.push((h * 16 + l) as u8);
                        i += 2;
                    }
                    _ => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Equal, in time independent of where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// A flag SIGINT and SIGTERM raise (the serving loop checks it between requests); from the first
/// call on, those signals no longer end the process at once, so what the command made is
/// cleaned up on its way out.
pub fn stop_on_signals() -> &'static AtomicBool {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: a plain sigaction whose handler only stores an atomic
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_stop as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
    &STOP
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_strings_decode_and_tokens_compare() {
        let p = Params::parse("token=ab&q=model.py%3A12+fwd&x0=1.5&bad=%zz&end=%4");
        assert_eq!(p.get("q"), Some("model.py:12 fwd"));
        assert_eq!(p.get("bad"), Some("%zz"));
        assert_eq!(p.get("end"), Some("%4"));
        assert_eq!(p.number("x0").ok(), Some(1.5));
        assert!(p.count("x0", 10).is_err());
        assert!(same(b"ab", b"ab") && !same(b"ab", b"ac") && !same(b"ab", b"abc"));
    }
}
