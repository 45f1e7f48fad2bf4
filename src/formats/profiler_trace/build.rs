//! One trace event's kept fields into the model: names, threads and devices interned, the
//! numbers read exactly, and what no allocator can report refused.

use rustc_hash::FxHashMap;

use crate::model::profile::{
    is_step, MemoryEvent, OomEvent, ProfileDevice, ProfileTrace, Range, RangeKind,
};

/// The text of a raw string, escapes decoded (as JSON says; a lone surrogate becomes U+FFFD).
pub fn unescape(raw: &[u8]) -> String {
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

/// A number's text as an integer scaled by 10^`scale` (1000 reads microseconds as
/// nanoseconds), exactly for up to `log10(scale)` decimals, through f64 otherwise.
pub fn scaled_int(t: &[u8], scale: i64) -> Option<i64> {
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

/// A scalar the reader keeps as its text: a number or a string's raw bytes.
#[derive(Clone, Copy, Default)]
pub struct Token {
    pub start: usize,
    pub end: usize,
    pub escaped: bool,
}

impl Token {
    pub fn bytes<'a>(&self, s: &'a [u8]) -> &'a [u8] {
        &s[self.start..self.end]
    }
}

/// The fields of one trace event memtrack reads.
#[derive(Default)]
pub struct Fields {
    pub ph: Option<Token>,
    pub cat: Option<Token>,
    pub name: Option<Token>,
    pub pid: Option<Token>,
    pub tid: Option<Token>,
    pub ts: Option<Token>,
    pub dur: Option<Token>,
    pub addr: Option<Token>,
    pub bytes: Option<Token>,
    pub total_allocated: Option<Token>,
    pub total_reserved: Option<Token>,
    pub device_id: Option<Token>,
    pub device_type: Option<Token>,
}

impl Fields {
    /// Where a member of the event goes, if memtrack reads it.
    #[inline]
    pub fn event_slot(&mut self, key: &[u8]) -> Option<&mut Option<Token>> {
        Some(match key {
            b"ph" => &mut self.ph,
            b"cat" => &mut self.cat,
            b"name" => &mut self.name,
            b"pid" => &mut self.pid,
            b"tid" => &mut self.tid,
            b"ts" => &mut self.ts,
            b"dur" => &mut self.dur,
            _ => return None,
        })
    }

    /// Where a member of the event's `args` goes, if memtrack reads it.
    #[inline]
    pub fn args_slot(&mut self, key: &[u8]) -> Option<&mut Option<Token>> {
        Some(match key {
            b"Addr" => &mut self.addr,
            b"Bytes" => &mut self.bytes,
            b"Total Allocated" => &mut self.total_allocated,
            b"Total Reserved" => &mut self.total_reserved,
            b"Device Id" => &mut self.device_id,
            b"Device Type" => &mut self.device_type,
            _ => return None,
        })
    }
}

/// Builds the model as events come: interning names, threads and devices.
pub struct Builder {
    pub trace: ProfileTrace,
    names: FxHashMap<Box<[u8]>, u32>,
    threads: FxHashMap<Box<[u8]>, u32>,
    thread_key: Vec<u8>,
    last_thread: Option<(Vec<u8>, u32)>,
}

const MEMORY: &[u8] = b"[memory]";
const OOM: &[u8] = b"[OutOfMemory]";

impl Builder {
    pub fn new() -> Builder {
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

    /// Adds one event: whether the trace keeps it, or what no allocator can have reported.
    pub fn add(&mut self, s: &[u8], f: &Fields) -> Result<bool, String> {
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
            let what = if name == MEMORY {
                "a memory event"
            } else {
                "an out-of-memory event"
            };
            let ts_ns = time_ns(s, &f.ts, "ts", true)
                .map_err(|e| format!("{what} memtrack cannot place in time: {e}"))?;
            let counted = |t: &Option<Token>, field: &str, signed: bool| {
                byte_count(s, t, field, signed)
                    .map_err(|e| format!("{what} memtrack cannot count: {e}"))
            };
            let (bytes, total_allocated, total_reserved) = (
                counted(&f.bytes, "Bytes", true)?,
                counted(&f.total_allocated, "Total Allocated", false)?,
                counted(&f.total_reserved, "Total Reserved", false)?,
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
            return Ok(true);
        }
        if ph != b"X" {
            return Ok(false);
        }
        self.trace.complete_events += 1;
        let cat = f.cat.as_ref().map_or(&b""[..], |t| t.bytes(s));
        let kind = match cat {
            b"cpu_op" | b"operator" => RangeKind::Op,
            b"python_function" => RangeKind::Python,
            b"user_annotation" => RangeKind::Annotation,
            b"gpu_user_annotation" => RangeKind::GpuAnnotation,
            b"kernel" | b"Kernel" => RangeKind::Kernel,
            _ => return Ok(false),
        };
        let Some(name_token) = &f.name else {
            return Ok(false);
        };
        let id = self.name(s, name_token);
        // torch 1.x wrote ProfilerStep#N as a cpu_op: it is the step annotation whatever it says
        let kind = if kind == RangeKind::Op && is_step(self.trace.name(id)) {
            RangeKind::Annotation
        } else {
            kind
        };
        let thread = self.thread(s, f);
        let place = |t: &Option<Token>, field: &str, required: bool| {
            time_ns(s, t, field, required).map_err(|e| {
                let cat = String::from_utf8_lossy(&cat[..cat.len().min(40)]);
                format!("a `{cat}` range memtrack cannot place in time: {e}")
            })
        };
        self.trace.ranges.push(Range {
            start_ns: place(&f.ts, "ts", true)?,
            dur_ns: place(&f.dur, "dur", false)?.max(0),
            name: id,
            thread,
            kind,
        });
        Ok(true)
    }
}

/// The most bytes one allocator figure may be ([`crate::model::units::MAX_BYTES`]).
const MAX_BYTES: i64 = crate::model::units::MAX_BYTES as i64;

/// A byte count of a memory event (0 when absent, as older traces lack some): an integer
/// (written as one, or as a float with no fraction), at most `MAX_BYTES` in size, and not
/// negative unless `signed` (`Bytes` is negative for a free).
fn byte_count(s: &[u8], t: &Option<Token>, what: &str, signed: bool) -> Result<i64, String> {
    let Some(t) = t else { return Ok(0) };
    let text = t.bytes(s);
    let shown = String::from_utf8_lossy(&text[..text.len().min(40)]).into_owned();
    let no_allocator = || {
        format!(
            "its `{what}` is {shown} bytes, which no allocator reports (a damaged or hand-made trace?)"
        )
    };
    // `scaled_int` drops decimals a scale of 1 cannot hold: only whole numbers pass
    let whole = !text.contains(&b'.') || text_is_integral(text);
    let value = match scaled_int(text, 1) {
        Some(v) if whole => v,
        _ => {
            let parsed = std::str::from_utf8(text)
                .ok()
                .and_then(|t| t.parse::<f64>().ok());
            return Err(match parsed {
                Some(f) if !f.is_finite() || f.abs() > MAX_BYTES as f64 => no_allocator(),
                Some(_) => format!("its `{what}` is {shown}, not a whole number of bytes"),
                None => format!("its `{what}` is `{shown}`, not a number of bytes"),
            });
        }
    };
    if value.abs() > MAX_BYTES || (!signed && value < 0) {
        return Err(no_allocator());
    }
    Ok(value)
}

/// A time field (`ts`, `dur`: microseconds) in nanoseconds: a number within ±292 years of
/// nanoseconds (i64), read exactly to the nanosecond. Absent (or null, or not a scalar) is an
/// error where `required`, else 0.
fn time_ns(s: &[u8], t: &Option<Token>, what: &str, required: bool) -> Result<i64, String> {
    let Some(t) = t else {
        if required {
            return Err(format!(
                "it has no `{what}` (its time in microseconds, a number)"
            ));
        }
        return Ok(0);
    };
    let text = t.bytes(s);
    if let Some(ns) = scaled_int(text, 1000) {
        return Ok(ns);
    }
    let shown = String::from_utf8_lossy(&text[..text.len().min(40)]).into_owned();
    let parsed = std::str::from_utf8(text)
        .ok()
        .and_then(|t| t.parse::<f64>().ok());
    Err(match parsed {
        Some(_) => format!(
            "its `{what}` is {shown} microseconds, which no clock gives (a damaged or hand-made trace?)"
        ),
        None => format!("its `{what}` is `{shown}`, not a time in microseconds"),
    })
}

/// Whether a number's text with a decimal point is a whole number (`1024.0`, `1.5e3`).
fn text_is_integral(text: &[u8]) -> bool {
    std::str::from_utf8(text)
        .ok()
        .and_then(|t| t.parse::<f64>().ok())
        .is_some_and(|f| f.is_finite() && f.fract() == 0.0)
}

#[cfg(test)]
mod tests {
    use super::{scaled_int, unescape};

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
    fn escapes_are_decoded() {
        assert_eq!(unescape(br#"a\"b\\c\u00e9\ud83d\ude00"#), "a\"b\\cé😀");
    }
}
