//! A streaming reader of Chrome trace JSON, for the traces torch.profiler writes: it walks the
//! text once, item by item of `traceEvents`, keeps only the fields memtrack uses (and only the
//! events it keeps), and never builds the document.
//!
//! The text comes in chunks into one buffer; each value is parsed from a slice of it, and a
//! value that runs past what was read so far is parsed again once more has come (values are
//! small next to a chunk, so that costs one value a chunk). A value longer than the buffer
//! grows it.

use rustc_hash::FxHashMap;

use crate::model::profile::{
    is_step, MemoryEvent, OomEvent, ProfileDevice, ProfileTrace, Range, RangeKind,
};

use super::source::Source;

/// What went wrong, with the byte offset (of the text, inflated) where it did.
#[derive(Debug)]
pub enum ScanError {
    /// The text ends before the JSON does.
    CutShort {
        offset: u64,
        events: u64,
    },
    /// Not JSON at `offset`.
    Syntax {
        offset: u64,
        expected: &'static str,
        found: String,
    },
    /// JSON, but its top-level value has no `traceEvents` (`keys`: the first few it has).
    NoTraceEvents {
        keys: Vec<String>,
    },
    /// JSON whose top-level value is not an object or array.
    NotObject {
        found: String,
    },
    /// A trace event that is not an object.
    EventNotObject {
        index: u64,
        found: String,
    },
    Io(std::io::Error),
}

/// Not enough text read yet for the value at hand.
struct More;

enum Fail {
    More,
    Syntax(usize, &'static str),
}

impl From<More> for Fail {
    fn from(_: More) -> Fail {
        Fail::More
    }
}

type P<T> = Result<T, Fail>;

/// The reader's buffer: `data[pos..]` is text not yet parsed; `base` is the offset of
/// `data[0]` in the text.
struct Buf<'s> {
    data: Vec<u8>,
    pos: usize,
    base: u64,
    eof: bool,
    source: &'s mut Source,
    progress: &'s mut dyn FnMut(u64),
}

impl Buf<'_> {
    /// Reads more text; false at the end.
    fn more(&mut self) -> Result<bool, ScanError> {
        if self.eof {
            return Ok(false);
        }
        // drop what was parsed (only once it is most of the buffer: fewer moves)
        if self.pos > 0 && self.pos >= self.data.len() / 2 {
            self.data.drain(..self.pos);
            self.base += self.pos as u64;
            self.pos = 0;
        }
        let n = self
            .source
            .read_into(&mut self.data)
            .map_err(ScanError::Io)?;
        (self.progress)(self.source.file_bytes_read());
        if n == 0 {
            self.eof = true;
        }
        Ok(n > 0)
    }

    fn offset(&self, at: usize) -> u64 {
        self.base + at as u64
    }

    /// Runs `parse` over the unread text until it has enough; Ok(None) at the end of the text.
    fn parse<T>(
        &mut self,
        parse: impl Fn(&[u8], usize) -> P<(T, usize)>,
    ) -> Result<Result<T, (usize, &'static str)>, ScanError> {
        loop {
            match parse(&self.data, self.pos) {
                Ok((v, end)) => {
                    self.pos = end;
                    return Ok(Ok(v));
                }
                Err(Fail::Syntax(at, what)) => return Ok(Err((at, what))),
                Err(Fail::More) => {
                    if !self.more()? {
                        return Ok(Err((self.data.len(), "")));
                    }
                }
            }
        }
    }
}

#[inline]
fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\n' | b'\r' | b'\t')
}

#[inline]
fn skip_ws(s: &[u8], mut i: usize) -> Result<usize, More> {
    while i < s.len() {
        if !is_ws(s[i]) {
            return Ok(i);
        }
        i += 1;
    }
    Err(More)
}

#[inline]
fn expect(s: &[u8], i: usize, b: u8, what: &'static str) -> P<usize> {
    let i = skip_ws(s, i)?;
    if s[i] == b {
        Ok(i + 1)
    } else {
        Err(Fail::Syntax(i, what))
    }
}

/// A string starting at its opening quote `s[i]`: the raw bytes between the quotes (escapes
/// left as written) and whether it has any, and the index past the closing quote.
#[inline]
fn string_raw(s: &[u8], i: usize) -> P<(usize, usize, bool, usize)> {
    let start = i + 1;
    let mut j = start;
    let mut escaped = false;
    loop {
        let Some(k) = memchr::memchr2(b'"', b'\\', &s[j..]) else {
            return Err(Fail::More);
        };
        j += k;
        if s[j] == b'"' {
            return Ok((start, j, escaped, j + 1));
        }
        escaped = true;
        j += 2; // the backslash and the character it escapes
        if j > s.len() {
            return Err(Fail::More);
        }
    }
}

/// The text of a raw string, escapes decoded (as JSON says; a lone surrogate becomes U+FFFD).
fn unescape(raw: &[u8]) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let b = raw[i];
        if b != b'\\' {
            let run = memchr::memchr(b'\\', &raw[i..]).map_or(raw.len(), |k| i + k);
            out.push_str(&String::from_utf8_lossy(&raw[i..run]));
            i = run;
            continue;
        }
        let Some(&e) = raw.get(i + 1) else { break };
        i += 2;
        match e {
            b'n' => out.push('\n'),
            b't' => out.push('\t'),
            b'r' => out.push('\r'),
            b'b' => out.push('\u{8}'),
            b'f' => out.push('\u{c}'),
            b'u' => {
                let hex = |k: usize| {
                    raw.get(k..k + 4)
                        .and_then(|h| std::str::from_utf8(h).ok())
                        .and_then(|h| u32::from_str_radix(h, 16).ok())
                };
                let Some(hi) = hex(i) else { break };
                i += 4;
                let c = if (0xD800..0xDC00).contains(&hi)
                    && raw.get(i) == Some(&b'\\')
                    && raw.get(i + 1) == Some(&b'u')
                {
                    match hex(i + 2) {
                        Some(lo) if (0xDC00..0xE000).contains(&lo) => {
                            i += 6;
                            char::from_u32(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00))
                        }
                        _ => None,
                    }
                } else {
                    char::from_u32(hi)
                };
                out.push(c.unwrap_or('\u{FFFD}'));
            }
            other => out.push(other as char),
        }
    }
    out
}

/// The end of a number starting at `i` (a number at the very end of the text needs more).
#[inline]
fn number_end(s: &[u8], mut i: usize) -> Result<usize, More> {
    while i < s.len() {
        match s[i] {
            b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E' => i += 1,
            _ => return Ok(i),
        }
    }
    Err(More)
}

/// A number's text as an integer scaled by 10^`scale` (1000 reads microseconds as
/// nanoseconds), exactly for up to `log10(scale)` decimals, through f64 otherwise.
fn scaled_int(t: &[u8], scale: i64) -> Option<i64> {
    let (neg, digits) = match t.first() {
        Some(b'-') => (true, &t[1..]),
        _ => (false, t),
    };
    let mut v: i64 = 0;
    let mut i = 0;
    while i < digits.len() && digits[i].is_ascii_digit() {
        v = v.checked_mul(10)?.checked_add((digits[i] - b'0') as i64)?;
        i += 1;
    }
    if i == 0 {
        return None;
    }
    let mut v = v.checked_mul(scale)?;
    if i < digits.len() && digits[i] == b'.' {
        i += 1;
        let mut unit = scale;
        let frac_start = i;
        while i < digits.len() && digits[i].is_ascii_digit() {
            unit /= 10;
            v += (digits[i] - b'0') as i64 * unit;
            i += 1;
        }
        if i == frac_start {
            return None;
        }
    }
    if i < digits.len() {
        // an exponent (or more decimals than the scale holds, which `unit` dropped): f64
        let f: f64 = std::str::from_utf8(t).ok()?.parse().ok()?;
        let scaled = f * scale as f64;
        return (scaled.is_finite() && scaled.abs() < 9.2e18).then(|| scaled.round() as i64);
    }
    Some(if neg { -v } else { v })
}

/// Skips any value starting at `i` (after whitespace); returns the index past it.
fn skip_value(s: &[u8], i: usize) -> P<usize> {
    let i = skip_ws(s, i)?;
    match s[i] {
        b'"' => Ok(string_raw(s, i)?.3),
        b'{' | b'[' => skip_container(s, i),
        b't' | b'f' | b'n' => {
            let word: &[u8] = match s[i] {
                b't' => b"true",
                b'f' => b"false",
                _ => b"null",
            };
            if s.len() < i + word.len() {
                return Err(Fail::More);
            }
            if &s[i..i + word.len()] == word {
                Ok(i + word.len())
            } else {
                Err(Fail::Syntax(i, "a JSON value"))
            }
        }
        b'-' | b'0'..=b'9' => Ok(number_end(s, i)?),
        _ => Err(Fail::Syntax(i, "a JSON value")),
    }
}

/// Skips an object or array by counting brackets outside strings (the values inside are not
/// checked: memtrack reads none of them).
fn skip_container(s: &[u8], i: usize) -> P<usize> {
    let mut depth = 0usize;
    let mut j = i;
    while j < s.len() {
        match s[j] {
            b'"' => {
                j = string_raw(s, j)?.3;
                continue;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth -= 1;
                if depth == 0 {
                    return Ok(j + 1);
                }
            }
            _ => {}
        }
        j += 1;
    }
    Err(Fail::More)
}

/// A scalar the reader keeps as its text: a number or a string's raw bytes.
#[derive(Clone, Copy, Default)]
struct Token {
    start: usize,
    end: usize,
    escaped: bool,
}

impl Token {
    fn bytes<'a>(&self, s: &'a [u8]) -> &'a [u8] {
        &s[self.start..self.end]
    }
}

fn token(s: &[u8], i: usize) -> P<(Option<Token>, usize)> {
    let i = skip_ws(s, i)?;
    match s[i] {
        b'"' => {
            let (start, end, escaped, next) = string_raw(s, i)?;
            Ok((
                Some(Token {
                    start,
                    end,
                    escaped,
                }),
                next,
            ))
        }
        b'-' | b'0'..=b'9' => {
            let end = number_end(s, i)?;
            Ok((
                Some(Token {
                    start: i,
                    end,
                    escaped: false,
                }),
                end,
            ))
        }
        _ => Ok((None, skip_value(s, i)?)),
    }
}

/// The fields of one trace event memtrack reads.
#[derive(Default)]
struct Fields {
    ph: Option<Token>,
    cat: Option<Token>,
    name: Option<Token>,
    pid: Option<Token>,
    tid: Option<Token>,
    ts: Option<Token>,
    dur: Option<Token>,
    addr: Option<Token>,
    bytes: Option<Token>,
    total_allocated: Option<Token>,
    total_reserved: Option<Token>,
    device_id: Option<Token>,
    device_type: Option<Token>,
}

/// Loops over an object's members starting at `{` (`s[i]`), handing each key's raw bytes and
/// the index of its value to `member`, which returns the index past the value.
#[inline]
fn members(s: &[u8], i: usize, mut member: impl FnMut(&[u8], usize) -> P<usize>) -> P<usize> {
    let mut j = skip_ws(s, i + 1)?;
    if s[j] == b'}' {
        return Ok(j + 1);
    }
    loop {
        if s[j] != b'"' {
            return Err(Fail::Syntax(j, "a member name in quotes"));
        }
        let (ks, ke, _, next) = string_raw(s, j)?;
        let colon = expect(s, next, b':', "`:` after a member name")?;
        j = member(&s[ks..ke], colon)?;
        j = skip_ws(s, j)?;
        match s[j] {
            b',' => j = skip_ws(s, j + 1)?,
            b'}' => return Ok(j + 1),
            _ => return Err(Fail::Syntax(j, "`,` or `}` in an object")),
        }
    }
}

/// One item of `traceEvents` (at `i`, after whitespace): its fields, or None when it is not
/// an object (the caller says so).
fn event(s: &[u8], i: usize) -> P<(Option<Fields>, usize)> {
    let i = skip_ws(s, i)?;
    if s[i] != b'{' {
        return Ok((None, i));
    }
    let mut f = Fields::default();
    let end = members(s, i, |key, v| {
        let slot = match key {
            b"ph" => &mut f.ph,
            b"cat" => &mut f.cat,
            b"name" => &mut f.name,
            b"pid" => &mut f.pid,
            b"tid" => &mut f.tid,
            b"ts" => &mut f.ts,
            b"dur" => &mut f.dur,
            b"args" => {
                let a = skip_ws(s, v)?;
                if s[a] != b'{' {
                    return skip_value(s, a);
                }
                return members(s, a, |key, v| {
                    let slot = match key {
                        b"Addr" => &mut f.addr,
                        b"Bytes" => &mut f.bytes,
                        b"Total Allocated" => &mut f.total_allocated,
                        b"Total Reserved" => &mut f.total_reserved,
                        b"Device Id" => &mut f.device_id,
                        b"Device Type" => &mut f.device_type,
                        _ => return skip_value(s, v),
                    };
                    let (t, next) = token(s, v)?;
                    *slot = t;
                    Ok(next)
                });
            }
            _ => return skip_value(s, v),
        };
        let (t, next) = token(s, v)?;
        *slot = t;
        Ok(next)
    })?;
    Ok((Some(f), end))
}

/// Builds the model as events come: interning names, threads and devices.
struct Builder {
    trace: ProfileTrace,
    names: FxHashMap<Box<[u8]>, u32>,
    threads: FxHashMap<Box<[u8]>, u32>,
    thread_key: Vec<u8>,
    last_thread: Option<(Vec<u8>, u32)>,
}

const MEMORY: &[u8] = b"[memory]";
const OOM: &[u8] = b"[OutOfMemory]";

impl Builder {
    fn new() -> Builder {
        Builder {
            trace: ProfileTrace::default(),
            names: FxHashMap::default(),
            threads: FxHashMap::default(),
            thread_key: Vec::new(),
            last_thread: None,
        }
    }

    fn text(s: &[u8], t: &Token) -> String {
        if t.escaped {
            unescape(t.bytes(s))
        } else {
            String::from_utf8_lossy(t.bytes(s)).into_owned()
        }
    }

    fn thread(&mut self, s: &[u8], f: &Fields) -> u32 {
        let key = &mut self.thread_key;
        key.clear();
        if let Some(p) = &f.pid {
            key.extend_from_slice(p.bytes(s));
        }
        key.push(b'/');
        if let Some(t) = &f.tid {
            key.extend_from_slice(t.bytes(s));
        }
        if let Some((k, id)) = &self.last_thread {
            if k == key {
                return *id;
            }
        }
        let id = match self.threads.get(key.as_slice()) {
            Some(&id) => id,
            None => {
                let id = self.trace.threads.len() as u32;
                let text = String::from_utf8_lossy(key).into_owned();
                self.trace.threads.push(text);
                self.threads.insert(key.clone().into_boxed_slice(), id);
                id
            }
        };
        self.last_thread = Some((key.clone(), id));
        id
    }

    fn name(&mut self, s: &[u8], t: &Token) -> u32 {
        if let Some(&id) = self.names.get(t.bytes(s)) {
            return id;
        }
        let id = self.trace.names.len() as u32;
        self.trace.names.push(Self::text(s, t));
        self.names.insert(t.bytes(s).into(), id);
        id
    }

    fn device(&mut self, device_type: i64, index: i64) -> u16 {
        let d = ProfileDevice { device_type, index };
        match self.trace.devices.iter().position(|&x| x == d) {
            Some(k) => k as u16,
            None => {
                self.trace.devices.push(d);
                (self.trace.devices.len() - 1) as u16
            }
        }
    }

    fn add(&mut self, s: &[u8], f: &Fields) {
        self.trace.events += 1;
        let int = |t: &Option<Token>, scale: i64| {
            t.as_ref()
                .and_then(|t| scaled_int(t.bytes(s), scale))
                .unwrap_or(0)
        };
        let name = f.name.as_ref().map_or(&b""[..], |t| t.bytes(s));
        let ph = f.ph.as_ref().map_or(&b""[..], |t| t.bytes(s));
        if name == MEMORY || name == OOM {
            let device = self.device(int(&f.device_type, 1), int(&f.device_id, 1));
            let thread = self.thread(s, f);
            let ts_ns = int(&f.ts, 1000);
            let (bytes, total_allocated, total_reserved) = (
                int(&f.bytes, 1),
                int(&f.total_allocated, 1),
                int(&f.total_reserved, 1),
            );
            if name == MEMORY {
                self.trace.memory.push(MemoryEvent {
                    ts_ns,
                    bytes,
                    total_allocated,
                    total_reserved,
                    addr: int(&f.addr, 1) as u64,
                    device,
                    thread,
                });
            } else {
                self.trace.ooms.push(OomEvent {
                    ts_ns,
                    bytes,
                    total_allocated,
                    total_reserved,
                    device,
                    thread,
                });
            }
            return;
        }
        if ph != b"X" {
            return;
        }
        self.trace.complete_events += 1;
        let cat = f.cat.as_ref().map_or(&b""[..], |t| t.bytes(s));
        let kind = match cat {
            b"cpu_op" | b"operator" => RangeKind::Op,
            b"python_function" => RangeKind::Python,
            b"user_annotation" => RangeKind::Annotation,
            b"gpu_user_annotation" => RangeKind::GpuAnnotation,
            b"kernel" | b"Kernel" => RangeKind::Kernel,
            _ => return,
        };
        let Some(name_token) = &f.name else { return };
        let id = self.name(s, name_token);
        // torch 1.x wrote ProfilerStep#N as a cpu_op: it is the step annotation whatever it says
        let kind = if kind == RangeKind::Op && is_step(self.trace.name(id)) {
            RangeKind::Annotation
        } else {
            kind
        };
        let thread = self.thread(s, f);
        self.trace.ranges.push(Range {
            start_ns: int(&f.ts, 1000),
            dur_ns: int(&f.dur, 1000).max(0),
            name: id,
            thread,
            kind,
        });
    }
}

/// The error of a reading that stopped at `at`: cut short at the end of the text, else not JSON.
fn syntax(buf: &Buf, (at, expected): (usize, &'static str), events: u64) -> ScanError {
    if at >= buf.data.len() {
        ScanError::CutShort {
            offset: buf.offset(at),
            events,
        }
    } else {
        ScanError::Syntax {
            offset: buf.offset(at),
            expected,
            found: found(&buf.data, at),
        }
    }
}

/// What the text shows at `at`, for messages.
fn found(s: &[u8], at: usize) -> String {
    match s.get(at..(at + 24).min(s.len())) {
        None | Some([]) => "the end of the file".into(),
        Some(t) => format!("`{}`", String::from_utf8_lossy(t).replace('\n', "\\n")),
    }
}

/// Reads a whole trace from `source`. `progress` gets the file bytes read so far.
pub fn read(source: &mut Source, progress: &mut dyn FnMut(u64)) -> Result<ProfileTrace, ScanError> {
    let mut buf = Buf {
        data: Vec::with_capacity(super::source::CHUNK * 2),
        pos: 0,
        base: 0,
        eof: false,
        source,
        progress,
    };
    let mut b = Builder::new();
    // the top-level value: an object with `traceEvents`, or the bare array of events
    let first = match buf.parse(|s, i| {
        // a UTF-8 byte order mark is allowed before the text
        let i = if s[i..].starts_with(b"\xEF\xBB\xBF") {
            i + 3
        } else {
            i
        };
        let i = skip_ws(s, i)?;
        Ok((s[i], i + 1))
    })? {
        Ok(c) => c,
        Err(_) => {
            return Err(ScanError::NotObject {
                found: "nothing (an empty file)".into(),
            })
        }
    };
    match first {
        b'[' => {
            events(&mut buf, &mut b).map_err(|e| e.into_error(&buf, b.trace.events))?;
            return Ok(b.trace);
        }
        b'{' => {}
        _ => {
            return Err(ScanError::NotObject {
                found: found(&buf.data, buf.pos - 1),
            })
        }
    }
    let mut keys = Vec::new();
    let mut saw_events = false;
    let mut after_member = false;
    loop {
        // `,` or `}` after a member, then the next key
        let step = buf.parse(|s, i| {
            let i = skip_ws(s, i)?;
            Ok((s[i], i))
        })?;
        let c = step.map_err(|e| syntax(&buf, e, b.trace.events))?;
        if c == b'}' {
            break;
        }
        if after_member {
            if c != b',' {
                return Err(syntax(
                    &buf,
                    (buf.pos, "`,` or `}` in the top-level object"),
                    b.trace.events,
                ));
            }
            buf.pos += 1;
        }
        let key = buf.parse(|s, i| {
            let i = skip_ws(s, i)?;
            if s[i] != b'"' {
                return Err(Fail::Syntax(i, "a member name in quotes"));
            }
            let (ks, ke, esc, next) = string_raw(s, i)?;
            let colon = expect(s, next, b':', "`:` after a member name")?;
            let raw = &s[ks..ke];
            let key = if esc {
                unescape(raw)
            } else {
                String::from_utf8_lossy(raw).into_owned()
            };
            Ok((key, colon))
        })?;
        let key = key.map_err(|e| syntax(&buf, e, b.trace.events))?;
        after_member = true;
        match key.as_str() {
            "traceEvents" => {
                let open = buf.parse(|s, i| Ok((s[skip_ws(s, i)?], skip_ws(s, i)? + 1)))?;
                match open.map_err(|e| syntax(&buf, e, b.trace.events))? {
                    b'[' => {}
                    _ => {
                        return Err(syntax(
                            &buf,
                            (buf.pos - 1, "`traceEvents` to be an array"),
                            b.trace.events,
                        ))
                    }
                }
                saw_events = true;
                events(&mut buf, &mut b).map_err(|e| e.into_error(&buf, b.trace.events))?;
            }
            "profile_memory" | "baseTimeNanoseconds" => {
                let t = buf.parse(|s, i| {
                    let (t, next) = token(s, i)?;
                    Ok((t.map(|t| t.bytes(s).to_vec()), next))
                })?;
                let t = t.map_err(|e| syntax(&buf, e, b.trace.events))?;
                let v = t.and_then(|t| scaled_int(&t, 1));
                if key == "profile_memory" {
                    b.trace.profile_memory = v.map(|v| v != 0);
                } else {
                    b.trace.base_time_ns = v;
                }
            }
            _ => {
                if keys.len() < 8 {
                    keys.push(key);
                }
                let end = buf.parse(|s, i| Ok(((), skip_value(s, i)?)))?;
                end.map_err(|e| syntax(&buf, e, b.trace.events))?;
            }
        }
    }
    if !saw_events {
        return Err(ScanError::NoTraceEvents { keys });
    }
    Ok(b.trace)
}

enum EventsError {
    Scan(ScanError),
    At(usize, &'static str),
    NotObject(u64, String),
}

impl From<ScanError> for EventsError {
    fn from(e: ScanError) -> Self {
        EventsError::Scan(e)
    }
}

impl EventsError {
    fn into_error(self, buf: &Buf, events: u64) -> ScanError {
        match self {
            EventsError::Scan(e) => e,
            EventsError::At(at, what) => syntax(buf, (at, what), events),
            EventsError::NotObject(index, found) => ScanError::EventNotObject { index, found },
        }
    }
}

/// The items of `traceEvents`, after its `[`, through its `]`.
fn events(buf: &mut Buf, b: &mut Builder) -> Result<(), EventsError> {
    let mut first = true;
    loop {
        // the separator (or the end), then one event, parsed together from one slice
        let item = buf.parse(|s, i| {
            let mut i = skip_ws(s, i)?;
            if s[i] == b']' {
                return Ok((None, i + 1));
            }
            if !first {
                if s[i] != b',' {
                    return Err(Fail::Syntax(i, "`,` or `]` between trace events"));
                }
                i += 1;
            }
            let (fields, end) = event(s, i)?;
            Ok((Some((fields, i, end)), end))
        })?;
        match item {
            Ok(None) => return Ok(()),
            Ok(Some((Some(fields), _, _))) => {
                b.add(&buf.data, &fields);
            }
            Ok(Some((None, at, _))) => {
                let at = skip_ws(&buf.data, at).unwrap_or(at);
                return Err(EventsError::NotObject(b.trace.events, found(&buf.data, at)));
            }
            Err((at, what)) => return Err(EventsError::At(at, what)),
        }
        first = false;
    }
}

#[cfg(test)]
mod tests {
    use super::{scaled_int, skip_value, unescape};

    #[test]
    fn microseconds_read_as_nanoseconds_exactly() {
        assert_eq!(
            scaled_int(b"4733828231732.916", 1000),
            Some(4733828231732916)
        );
        assert_eq!(scaled_int(b"12", 1000), Some(12000));
        assert_eq!(scaled_int(b"-1.5", 1000), Some(-1500));
        assert_eq!(scaled_int(b"1.5e3", 1000), Some(1_500_000));
        assert_eq!(scaled_int(b"-1", 1), Some(-1));
        assert_eq!(scaled_int(b"x", 1), None);
    }

    #[test]
    fn skipping_nested_values_with_brackets_in_strings() {
        let s = br#"{"a": [1, {"b": "]}"}, "\"{"], "c": {}} ,"#;
        assert_eq!(skip_value(s, 0).ok(), Some(s.len() - 2));
        let s = br#"[[], [[]], {"x": "[["}] x"#;
        assert_eq!(skip_value(s, 0).ok(), Some(s.len() - 2));
    }

    #[test]
    fn escapes_are_decoded() {
        assert_eq!(unescape(br#"a\"b\\c\u00e9\ud83d\ude00"#), "a\"b\\cé😀");
    }
}
