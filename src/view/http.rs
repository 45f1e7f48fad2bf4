//! The HTTP/1.1 underneath `memtrack view`, over `std::net`, bounded everywhere a client could
//! make it hold memory or threads (the crate used before read a request line or header of any
//! size whole, kept idle connections forever and started a thread per connection):
//!
//! - a request's line and headers are read into one fixed buffer of [`MAX_HEAD`] bytes: a
//!   request line that does not end in it is answered 414, headers that do not 431, as soon as
//!   the buffer is full; the rest is never read (a little is drained so the answer arrives);
//! - a request's line and headers must arrive within [`HEAD_TIMEOUT`] of its first byte, a
//!   connection that sends nothing for [`IDLE_TIMEOUT`] is closed, a write that makes no
//!   progress for [`WRITE_TIMEOUT`] closes its connection;
//! - at most [`MAX_CONNECTIONS`] connections are kept, one small thread each: past the cap the
//!   one idle longest (waiting for its next request) is closed for the new one, and when none is
//!   idle the new one is answered 503 and closed;
//! - the `Host` header must name the address the client connected to (or `localhost` on a
//!   loopback address): a page on another site whose name was rebound to 127.0.0.1 (DNS
//!   rebinding) is refused 403;
//! - GET only (the caller's gate says so); a request that announces a body is answered and its
//!   connection closed, the body never read.
//!
//! A request that passes the gate the caller gives is handed through a channel to the caller's
//! single answering loop ([`Pending`]); its connection's thread waits for the answer and writes
//! it. Keep-alive as HTTP/1.1 says (HTTP/1.0: one request a connection); pipelined requests
//! are read in turn.

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// Most bytes of a request line and its headers together. Node's default: a browser's headers
/// for 127.0.0.1 carry every local server's cookies, often several KiB.
pub const MAX_HEAD: usize = 16 * 1024;
/// A request's line and headers arrive whole within this of its first byte.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// A connection that sends no request for this long is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(10);
/// A write that makes no progress for this long closes its connection.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Most connections kept (one thread each).
pub const MAX_CONNECTIONS: usize = 64;
/// After an answer that closes a connection whose request was not read whole, what the client
/// still sends is read and dropped for this long (or [`LINGER_BYTES`]), so that closing does
/// not reset the connection before the client reads the answer.
const LINGER: Duration = Duration::from_secs(1);
const LINGER_BYTES: usize = 1 << 20;
/// A connection's thread: parses a head, runs the gate, writes an answer.
const STACK: usize = 256 * 1024;

const CSP: &str = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:";
const TEXT: &str = "text/plain; charset=utf-8";

/// A request as the caller sees it: its line, and whether it announced a body.
#[derive(Debug)]
pub struct Request {
    /// As sent (`GET`, `POST`, ...).
    pub method: String,
    /// The request target, as sent (`/api/tile?x0=...`).
    pub target: String,
    /// A `Content-Length` above 0 or a `Transfer-Encoding` (never read).
    pub has_body: bool,
}

/// Status, content type and body; every answer carries the same safety headers.
#[derive(Debug)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// `Content-Type`.
    pub content_type: &'static str,
    /// The body.
    pub body: Vec<u8>,
}

impl Response {
    /// A plain-text answer.
    pub fn text(status: u16, body: &str) -> Response {
        Response {
            status,
            content_type: TEXT,
            body: body.as_bytes().to_vec(),
        }
    }
}

/// A request the gate let through, waiting for the answering loop.
pub struct Pending {
    /// The request.
    pub request: Request,
    reply: mpsc::SyncSender<Response>,
}

impl Pending {
    /// Hand the answer to the connection's thread, which writes it.
    pub fn respond(self, response: Response) {
        // the client may have gone: nothing to do then
        let _ = self.reply.send(response);
    }
}

/// Answers a request at once (`Some`) or lets it through to the answering loop (`None`); runs
/// on the connections' threads, so refusals never wait behind a slow answer.
pub type Gate = dyn Fn(&Request) -> Option<Response> + Send + Sync;

/// Accept connections on `listener` from now on (a thread of its own) and hand the requests the
/// gate lets through to the receiver.
pub fn serve(listener: TcpListener, gate: Arc<Gate>) -> std::io::Result<mpsc::Receiver<Pending>> {
    let (to_answer, requests) = mpsc::channel();
    let slots = Arc::new(Mutex::new(Slots::default()));
    std::thread::Builder::new()
        .name("view-accept".into())
        .spawn(move || accept_loop(listener, gate, to_answer, slots))?;
    Ok(requests)
}

/// The open connections, for the cap and for closing an idle one.
#[derive(Default)]
struct Slots {
    next_id: u64,
    open: Vec<Slot>,
}

struct Slot {
    id: u64,
    /// A handle to shut the connection down with.
    stream: TcpStream,
    /// Since when it waits for its next request, nothing of it read (`None`: busy).
    idle_since: Option<Instant>,
}

fn lock(slots: &Mutex<Slots>) -> std::sync::MutexGuard<'_, Slots> {
    // a connection thread that panicked leaves consistent bookkeeping behind
    slots.lock().unwrap_or_else(|e| e.into_inner())
}

fn accept_loop(
    listener: TcpListener,
    gate: Arc<Gate>,
    to_answer: mpsc::Sender<Pending>,
    slots: Arc<Mutex<Slots>>,
) {
    loop {
        let stream = match listener.accept() {
            Ok((stream, _)) => stream,
            Err(_) => {
                // out of descriptors or a connection reset before accept: try again soon
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        let Ok(handle) = stream.try_clone() else {
            continue;
        };
        let id = {
            let mut s = lock(&slots);
            if s.open.len() >= MAX_CONNECTIONS {
                let idlest = (s.open.iter().enumerate())
                    .filter_map(|(i, slot)| slot.idle_since.map(|t| (t, i)))
                    .min();
                match idlest {
                    Some((_, i)) => {
                        // its thread's read returns at once and the thread ends
                        let _ = s.open.swap_remove(i).stream.shutdown(Shutdown::Both);
                    }
                    None => {
                        drop(s);
                        refuse_busy(stream);
                        continue;
                    }
                }
            }
            s.next_id += 1;
            let id = s.next_id;
            s.open.push(Slot {
                id,
                stream: handle,
                idle_since: Some(Instant::now()),
            });
            id
        };
        let (gate, to_answer, mine) = (gate.clone(), to_answer.clone(), slots.clone());
        let spawned = std::thread::Builder::new()
            .name("view-connection".into())
            .stack_size(STACK)
            .spawn(move || {
                let conn = Connection {
                    stream,
                    id,
                    slots: &mine,
                };
                conn.serve(&*gate, &to_answer);
                lock(&mine).open.retain(|s| s.id != id);
            });
        if spawned.is_err() {
            // the thread never started: its stream was dropped with the closure
            lock(&slots).open.retain(|s| s.id != id);
        }
    }
}

/// Every connection is busy: say so and close.
fn refuse_busy(mut stream: TcpStream) {
    let _ = stream.set_write_timeout(Some(Duration::from_millis(200)));
    let response = Response::text(503, "too many connections: try again");
    let _ = write_response(&mut stream, &response, false);
    let _ = stream.shutdown(Shutdown::Write);
}

struct Connection<'a> {
    stream: TcpStream,
    id: u64,
    slots: &'a Mutex<Slots>,
}

/// Why reading a head stopped.
enum HeadEnd {
    /// The head is `buf[..n]`.
    Whole(usize),
    /// The client closed, or the connection failed: nothing to answer.
    Gone,
    /// Answer this and close.
    Refuse(Response),
}

impl Connection<'_> {
    fn serve(mut self, gate: &Gate, to_answer: &mpsc::Sender<Pending>) {
        let _ = self.stream.set_nodelay(true);
        let _ = self.stream.set_write_timeout(Some(WRITE_TIMEOUT));
        let Ok(local) = self.stream.local_addr() else {
            return;
        };
        let mut buf = vec![0u8; MAX_HEAD];
        let mut filled = 0;
        loop {
            let head_len = match self.read_head(&mut buf, &mut filled) {
                HeadEnd::Whole(n) => n,
                HeadEnd::Gone => return,
                HeadEnd::Refuse(response) => return self.refuse(&response, &mut buf),
            };
            let head = match parse_head(&buf[..head_len]) {
                Ok(head) => head,
                Err(response) => return self.refuse(&response, &mut buf),
            };
            if !head.host.as_deref().is_some_and(|h| host_allowed(h, local)) {
                let why = match &head.host {
                    None => Response::text(400, "a Host header is required"),
                    Some(_) => Response::text(
                        403,
                        "forbidden: the Host header must name the address this server listens on \
                         (a page of another site cannot reach it through a rebound name)",
                    ),
                };
                return self.refuse(&why, &mut buf);
            }
            let keep_alive = head.keep_alive && !head.request.has_body;
            let response = match gate(&head.request) {
                Some(refusal) => refusal,
                None => {
                    let (reply, answer) = mpsc::sync_channel(1);
                    let pending = Pending {
                        request: head.request,
                        reply,
                    };
                    if to_answer.send(pending).is_err() {
                        return; // the server is stopping
                    }
                    match answer.recv() {
                        Ok(response) => response,
                        Err(_) => return,
                    }
                }
            };
            if !keep_alive {
                return self.refuse(&response, &mut buf);
            }
            if write_response(&mut self.stream, &response, true).is_err() {
                return;
            }
            // a pipelined request's first bytes stay for the next turn
            buf.copy_within(head_len..filled, 0);
            filled -= head_len;
        }
    }

    /// Read until `buf[..filled]` holds a whole head: [`IDLE_TIMEOUT`] for its first byte,
    /// [`HEAD_TIMEOUT`] from then for the rest, [`MAX_HEAD`] bytes at most.
    fn read_head(&mut self, buf: &mut [u8], filled: &mut usize) -> HeadEnd {
        if *filled == 0 {
            self.set_idle(true);
            let first = self.read_within(&mut buf[..], IDLE_TIMEOUT);
            self.set_idle(false);
            match first {
                Ok(n) if n > 0 => *filled = n,
                _ => return HeadEnd::Gone,
            }
        }
        let deadline = Instant::now() + HEAD_TIMEOUT;
        loop {
            if let Some(n) = head_end(&buf[..*filled]) {
                return HeadEnd::Whole(n);
            }
            if *filled == buf.len() {
                return HeadEnd::Refuse(if buf.contains(&b'\n') {
                    Response::text(
                        431,
                        &format!("request headers over {} KiB", MAX_HEAD / 1024),
                    )
                } else {
                    Response::text(414, &format!("request line over {} KiB", MAX_HEAD / 1024))
                });
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.read_within(&mut buf[*filled..], left) {
                Ok(0) => return HeadEnd::Gone,
                Ok(n) => *filled += n,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return HeadEnd::Refuse(Response::text(
                        408,
                        &format!(
                            "the request's headers did not arrive within {} s",
                            HEAD_TIMEOUT.as_secs()
                        ),
                    ));
                }
                Err(_) => return HeadEnd::Gone,
            }
        }
    }

    /// One read that waits at most `within` (a zero wait is a timeout, not "no timeout").
    fn read_within(&mut self, buf: &mut [u8], within: Duration) -> std::io::Result<usize> {
        if within.is_zero() {
            return Err(ErrorKind::TimedOut.into());
        }
        self.stream.set_read_timeout(Some(within))?;
        loop {
            match self.stream.read(buf) {
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                r => return r,
            }
        }
    }

    fn set_idle(&self, idle: bool) {
        let mut s = lock(self.slots);
        if let Some(slot) = s.open.iter_mut().find(|s| s.id == self.id) {
            // a fresh connection counts as idle from its accept
            slot.idle_since = idle.then(|| slot.idle_since.unwrap_or_else(Instant::now));
        }
    }

    /// Answer, then close: stop sending, drop what the client still sends for a moment (so
    /// the close does not reset the connection before the answer is read), close.
    fn refuse(mut self, response: &Response, buf: &mut [u8]) {
        if write_response(&mut self.stream, response, false).is_err() {
            return;
        }
        let _ = self.stream.shutdown(Shutdown::Write);
        let until = Instant::now() + LINGER;
        let mut drained = 0;
        while drained < LINGER_BYTES {
            let left = until.saturating_duration_since(Instant::now());
            match self.read_within(buf, left) {
                Ok(n) if n > 0 => drained += n,
                _ => break,
            }
        }
    }
}

/// The length of the head at the start of `bytes` (through its empty line), if it is whole.
/// Lines end in CRLF; a bare LF is accepted, as RFC 9112 allows.
fn head_end(bytes: &[u8]) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = memchr::memchr(b'\n', &bytes[from..]) {
        let nl = from + i;
        let line = &bytes[from..nl];
        if line.is_empty() || line == b"\r" {
            // an empty line before the request line is skipped (RFC 9112 2.2), not an end
            if from > 0 {
                return Some(nl + 1);
            }
        }
        from = nl + 1;
    }
    None
}

/// What the head says.
#[derive(Debug)]
struct Head {
    request: Request,
    host: Option<String>,
    keep_alive: bool,
}

/// Parse a whole head (request line, headers, the empty line).
fn parse_head(bytes: &[u8]) -> Result<Head, Response> {
    let bad = |why: &str| Response::text(400, why);
    let mut lines = bytes
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .skip_while(|l| l.is_empty());
    let line = lines.next().unwrap_or_default();
    let line = std::str::from_utf8(line).map_err(|_| bad("the request line is not UTF-8"))?;
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad("the request line is not METHOD TARGET VERSION"));
    };
    if method.is_empty() || target.is_empty() || !method.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(bad("the request line is not METHOD TARGET VERSION"));
    }
    let http11 = match version {
        "HTTP/1.1" => true,
        "HTTP/1.0" => false,
        v if v.starts_with("HTTP/") => {
            return Err(Response::text(505, "HTTP/1.0 and HTTP/1.1 only"));
        }
        _ => return Err(bad("the request line is not METHOD TARGET VERSION")),
    };
    let mut host = None;
    let mut close = !http11;
    let mut length: Option<u64> = None;
    let mut chunked = false;
    for line in lines.take_while(|l| !l.is_empty()) {
        let text = String::from_utf8_lossy(line);
        let Some((name, value)) = text.split_once(':') else {
            return Err(bad("a header line without a colon"));
        };
        if name.is_empty() || name.bytes().any(|b| b.is_ascii_whitespace()) {
            return Err(bad("a header name with spaces (or a folded header line)"));
        }
        let value = value.trim_matches([' ', '\t']);
        if name.eq_ignore_ascii_case("host") {
            if host.replace(value.to_string()).is_some() {
                return Err(bad("more than one Host header"));
            }
        } else if name.eq_ignore_ascii_case("connection") {
            for option in value.split(',').map(str::trim) {
                if option.eq_ignore_ascii_case("close") {
                    close = true;
                }
            }
        } else if name.eq_ignore_ascii_case("content-length") {
            let n = value
                .parse::<u64>()
                .map_err(|_| bad("Content-Length is not a number"))?;
            if length.replace(n).is_some_and(|m| m != n) {
                return Err(bad("two different Content-Lengths"));
            }
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = true;
        }
    }
    if host.is_none() && !http11 {
        // HTTP/1.0 may leave it out (no browser does: rebinding needs a browser)
        host = Some(String::new());
    } else if http11 && host.as_deref() == Some("") {
        // HTTP/1.1 sends an empty Host only for a target with no authority, never ours
        return Err(bad("an empty Host header"));
    }
    Ok(Head {
        request: Request {
            method: method.to_string(),
            target: target.to_string(),
            has_body: chunked || length.is_some_and(|n| n > 0),
        },
        host,
        keep_alive: !close,
    })
}

/// Whether a `Host` header names the address the connection reached: that address and port,
/// any loopback address or `localhost` when it is a loopback one. An empty one (HTTP/1.0
/// without `Host`) passes.
fn host_allowed(host: &str, local: SocketAddr) -> bool {
    if host.is_empty() {
        return true;
    }
    let (name, port) = match host.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((name, "")) => (name, None),
            Some((name, port)) => match port.strip_prefix(':') {
                Some(port) => (name, Some(port)),
                None => return false,
            },
            None => return false,
        },
        None => match host.rsplit_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (host, None),
        },
    };
    // the port as a browser writes it: digits, no sign, no leading zero (`u16::from_str`
    // would take `+8123` and `08123`)
    let port_matches = match port {
        Some(p) => {
            p.bytes().all(|b| b.is_ascii_digit())
                && !p.starts_with('0')
                && p.parse::<u16>().is_ok_and(|p| p == local.port())
        }
        None => local.port() == 80,
    };
    let ours = local.ip().to_canonical();
    let name_matches = if name.eq_ignore_ascii_case("localhost") {
        ours.is_loopback()
    } else {
        match name.parse::<IpAddr>() {
            Ok(ip) => {
                let ip = ip.to_canonical();
                ip == ours || (ip.is_loopback() && ours.is_loopback())
            }
            Err(_) => false,
        }
    };
    port_matches && name_matches
}

/// Write `response` with its headers; `keep_alive` false says `Connection: close`.
fn write_response(
    stream: &mut TcpStream,
    response: &Response,
    keep_alive: bool,
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {} {}\r\nDate: {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n\
         Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n\
         Referrer-Policy: no-referrer\r\nContent-Security-Policy: {CSP}\r\n{}\r\n",
        response.status,
        reason(response.status),
        http_date(SystemTime::now()),
        response.content_type,
        response.body.len(),
        if keep_alive {
            ""
        } else {
            "Connection: close\r\n"
        },
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(&response.body)?;
    stream.flush()
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Content Too Large",
        414 => "URI Too Long",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "",
    }
}

/// `Sun, 06 Nov 1994 08:49:37 GMT` (RFC 9110's IMF-fixdate).
fn http_date(t: SystemTime) -> String {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // civil date from days since 1970-01-01 (Howard Hinnant's algorithm)
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    const WEEKDAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{}, {day:02} {} {year} {:02}:{:02}:{:02} GMT",
        WEEKDAYS[(days % 7) as usize],
        MONTHS[(month - 1) as usize],
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_end_at_the_empty_line_and_parse() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: a\r\n"), None);
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: a\r\n\r\nGET"), Some(27));
        assert_eq!(head_end(b"\r\nGET / HTTP/1.0\n\n"), Some(18));
        let h = parse_head(
            b"GET /x?y=1 HTTP/1.1\r\nHost: 127.0.0.1:80\r\nConnection: keep-alive, close\r\n\r\n",
        )
        .unwrap();
        assert_eq!(
            (h.request.method.as_str(), h.request.target.as_str()),
            ("GET", "/x?y=1")
        );
        assert_eq!(h.host.as_deref(), Some("127.0.0.1:80"));
        assert!(!h.keep_alive && !h.request.has_body);
        let h = parse_head(b"POST / HTTP/1.1\r\nhost: a\r\ncontent-length: 3\r\n\r\n").unwrap();
        assert!(h.keep_alive && h.request.has_body);
        let h = parse_head(b"GET / HTTP/1.0\r\n\r\n").unwrap();
        assert!(!h.keep_alive && h.host.as_deref() == Some(""));
        assert_eq!(parse_head(b"GET / HTTP/1.1\r\n\r\n").unwrap().host, None);
        for (head, status) in [
            (&b"GET /\r\n\r\n"[..], 400),
            (b"GET / HTTP/2.0\r\n\r\n", 505),
            (b"GET  / HTTP/1.1\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nHost a\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nHost : a\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nHost:\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nHost:  \r\n\r\n", 400),
            (
                b"GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                400,
            ),
            (b"GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400),
        ] {
            let status_of = parse_head(head).map(|_| 200).unwrap_or_else(|r| r.status);
            assert_eq!(status_of, status, "{}", String::from_utf8_lossy(head));
        }
    }

    #[test]
    fn the_host_must_name_the_address_reached() {
        let v4: SocketAddr = "127.0.0.1:8123".parse().unwrap();
        let v6: SocketAddr = "[::1]:8123".parse().unwrap();
        let lan: SocketAddr = "192.168.1.5:8123".parse().unwrap();
        let mapped: SocketAddr = "[::ffff:127.0.0.1]:8123".parse().unwrap();
        for (host, local, ok) in [
            ("127.0.0.1:8123", v4, true),
            ("localhost:8123", v4, true),
            ("LocalHost:8123", v6, true),
            ("[::1]:8123", v4, true),
            ("[::1]:8123", v6, true),
            ("127.0.0.1:8123", mapped, true),
            ("192.168.1.5:8123", lan, true),
            ("", v4, true),
            ("127.0.0.1:8124", v4, false),
            ("127.0.0.1", v4, false),
            ("evil.example:8123", v4, false),
            ("localhost:8123", lan, false),
            ("127.0.0.1:8123", lan, false),
            ("localhost.:8123", v4, false),
            ("[::1]8123", v6, false),
            ("[::1", v6, false),
            ("127.0.0.1:+8123", v4, false),
            ("127.0.0.1:08123", v4, false),
            ("[::1]:+8123", v6, false),
            ("127.0.0.1: 8123", v4, false),
        ] {
            assert_eq!(host_allowed(host, local), ok, "{host} at {local}");
        }
        let web: SocketAddr = "127.0.0.1:80".parse().unwrap();
        assert!(host_allowed("localhost", web));
    }

    #[test]
    fn dates_are_imf_fixdate() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777);
        assert_eq!(http_date(t), "Sun, 06 Nov 1994 08:49:37 GMT");
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(951_782_400);
        assert_eq!(http_date(t), "Tue, 29 Feb 2000 00:00:00 GMT");
    }
}
