//! The text of a trace as a cursor over one chunk at a time: each byte is looked at once, a
//! chunk is let go of when the cursor leaves it, and nothing is parsed twice. What the reader
//! keeps of a value (a name, a number) is copied out as it passes; what it skips costs no
//! memory, however long (a 4 GB string, a 400 MB array).

use super::error::ScanError;
use super::source::Source;

/// What may be read of a gzip trace: inflated bytes and kept events in proportion to the
/// compressed bytes read (real traces inflate about 9 to 13 times and keep an event for every
/// 20 or more compressed bytes; see docs/profiler.md, "Limits"), with a floor for small files.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    pub ratio: u64,
    pub floor: u64,
    pub compressed_per_event: u64,
    pub event_floor: u64,
}

impl Budget {
    pub const GZIP: Budget = Budget {
        ratio: 100,
        floor: 64 << 20,
        compressed_per_event: 2,
        event_floor: 1 << 20,
    };

    pub fn text_allowed(&self, compressed: u64) -> u64 {
        self.floor
            .saturating_add(compressed.saturating_mul(self.ratio))
    }

    pub fn events_allowed(&self, compressed: u64) -> u64 {
        self.event_floor
            .saturating_add(compressed / self.compressed_per_event.max(1))
    }
}

/// The most one event may make the reader keep (its name, category, thread and numbers):
/// real events keep under 64 KiB (a C++ kernel name with its templates).
pub const MAX_KEPT_PER_EVENT: usize = 4 << 20;

pub struct Text<'s> {
    buf: Vec<u8>,
    pub pos: usize,
    /// Offset in the text of `buf[0]`.
    base: u64,
    eof: bool,
    source: &'s mut Source,
    progress: &'s mut dyn FnMut(u64),
    budget: Option<Budget>,
    /// Trace events read so far (for messages).
    pub events: u64,
    /// Trace events kept so far (the budget's second bound).
    pub kept: u64,
}

#[inline]
pub fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\n' | b'\r' | b'\t')
}

impl<'s> Text<'s> {
    pub fn new(
        source: &'s mut Source,
        progress: &'s mut dyn FnMut(u64),
        budget: Option<Budget>,
    ) -> Text<'s> {
        Text {
            buf: Vec::new(),
            pos: 0,
            base: 0,
            eof: false,
            source,
            progress,
            budget,
            events: 0,
            kept: 0,
        }
    }

    /// The unread part of the chunk at hand.
    #[inline]
    pub fn rest(&self) -> &[u8] {
        &self.buf[self.pos..]
    }

    /// The next chunk, once the one at hand is read to its end; false at the end of the text.
    pub fn refill(&mut self) -> Result<bool, ScanError> {
        debug_assert!(self.pos >= self.buf.len());
        if self.eof {
            return Ok(false);
        }
        self.base += self.buf.len() as u64;
        self.pos = 0;
        self.source
            .next_chunk(&mut self.buf)
            .map_err(ScanError::Io)?;
        let compressed = self.source.file_bytes_read();
        (self.progress)(compressed);
        if self.buf.is_empty() {
            self.eof = true;
            return Ok(false);
        }
        if let Some(b) = &self.budget {
            let text = self.base + self.buf.len() as u64;
            if text > b.text_allowed(compressed) {
                return Err(ScanError::Expansion {
                    text,
                    compressed,
                    what: "bytes",
                });
            }
        }
        Ok(true)
    }

    /// Counts a kept event against the budget.
    #[inline]
    pub fn keep_one(&mut self) -> Result<(), ScanError> {
        self.kept += 1;
        if let Some(b) = &self.budget {
            if self.kept & 0xfff == 0 {
                let compressed = self.source.file_bytes_read();
                if self.kept > b.events_allowed(compressed) {
                    return Err(ScanError::Expansion {
                        text: self.kept,
                        compressed,
                        what: "events",
                    });
                }
            }
        }
        Ok(())
    }

    pub fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// The next byte, not consumed; None at the end of the text.
    #[inline]
    pub fn peek(&mut self) -> Result<Option<u8>, ScanError> {
        if self.pos < self.buf.len() {
            return Ok(Some(self.buf[self.pos]));
        }
        if self.refill()? {
            Ok(Some(self.buf[0]))
        } else {
            Ok(None)
        }
    }

    /// The next byte that is not white space, not consumed; None at the end of the text.
    #[inline]
    pub fn skip_ws(&mut self) -> Result<Option<u8>, ScanError> {
        loop {
            if let Some(k) = self.rest().iter().position(|&b| !is_ws(b)) {
                self.pos += k;
                return Ok(Some(self.buf[self.pos]));
            }
            self.pos = self.buf.len();
            if !self.refill()? {
                return Ok(None);
            }
        }
    }

    /// Like `skip_ws`, where the text must go on.
    #[inline]
    pub fn next_nonws(&mut self) -> Result<u8, ScanError> {
        match self.skip_ws()? {
            Some(b) => Ok(b),
            None => Err(self.cut_short()),
        }
    }

    pub fn cut_short(&self) -> ScanError {
        ScanError::CutShort {
            offset: self.offset(),
            events: self.events,
        }
    }

    /// "not JSON here": what was expected and what the text shows at the cursor.
    pub fn syntax(&self, expected: &'static str) -> ScanError {
        let shown = &self.buf[self.pos.min(self.buf.len())..];
        let shown = &shown[..shown.len().min(24)];
        let found = if shown.is_empty() {
            "the end of the file".into()
        } else {
            format!("`{}`", String::from_utf8_lossy(shown).replace('\n', "\\n"))
        };
        ScanError::Syntax {
            offset: self.offset(),
            expected,
            found,
        }
    }

    /// A string's bytes after its opening quote, through its closing quote, kept nowhere.
    pub fn skip_string(&mut self) -> Result<(), ScanError> {
        loop {
            match memchr::memchr2(b'"', b'\\', self.rest()) {
                Some(k) => {
                    let j = self.pos + k;
                    self.pos = j + 1;
                    if self.buf[j] == b'"' {
                        return Ok(());
                    }
                    // the escaped character, maybe in the next chunk
                    if self.peek()?.is_none() {
                        return Err(self.cut_short());
                    }
                    self.pos += 1;
                }
                None => {
                    self.pos = self.buf.len();
                    if !self.refill()? {
                        return Err(self.cut_short());
                    }
                }
            }
        }
    }

    /// A string's raw bytes (escapes as written) after its opening quote, appended to `out`,
    /// through its closing quote; whether it has escapes. Past `limit` bytes in `out`: refused.
    pub fn keep_string(&mut self, out: &mut Vec<u8>, limit: usize) -> Result<bool, ScanError> {
        let mut escaped = false;
        loop {
            let rest = self.rest();
            let found = memchr::memchr2(b'"', b'\\', rest);
            let take = found.unwrap_or(rest.len());
            if out.len() + take > limit {
                return Err(self.too_large(limit));
            }
            out.extend_from_slice(&rest[..take]);
            match found {
                Some(k) => {
                    let j = self.pos + k;
                    self.pos = j + 1;
                    if self.buf[j] == b'"' {
                        return Ok(escaped);
                    }
                    escaped = true;
                    let Some(e) = self.peek()? else {
                        return Err(self.cut_short());
                    };
                    out.extend_from_slice(&[b'\\', e]);
                    self.pos += 1;
                }
                None => {
                    self.pos = self.buf.len();
                    if !self.refill()? {
                        return Err(self.cut_short());
                    }
                }
            }
        }
    }

    /// A number's text from the cursor, appended to `out`.
    pub fn keep_number(&mut self, out: &mut Vec<u8>, limit: usize) -> Result<(), ScanError> {
        loop {
            let rest = self.rest();
            let n = rest
                .iter()
                .position(|&b| !is_number_byte(b))
                .unwrap_or(rest.len());
            if out.len() + n > limit {
                return Err(self.too_large(limit));
            }
            out.extend_from_slice(&rest[..n]);
            self.pos += n;
            if self.pos < self.buf.len() || !self.refill()? {
                return Ok(());
            }
        }
    }

    fn skip_number(&mut self) -> Result<(), ScanError> {
        loop {
            let rest = self.rest();
            let n = rest
                .iter()
                .position(|&b| !is_number_byte(b))
                .unwrap_or(rest.len());
            self.pos += n;
            if self.pos < self.buf.len() || !self.refill()? {
                return Ok(());
            }
        }
    }

    fn too_large(&self, limit: usize) -> ScanError {
        ScanError::ItemTooLarge {
            offset: self.offset(),
            index: self.events,
            limit: limit as u64,
        }
    }

    /// `true`, `false` or `null` at the cursor.
    fn skip_word(&mut self) -> Result<(), ScanError> {
        let word: &[u8] = match self.peek()? {
            Some(b't') => b"true",
            Some(b'f') => b"false",
            _ => b"null",
        };
        for &w in word {
            match self.peek()? {
                Some(b) if b == w => self.pos += 1,
                Some(_) => return Err(self.syntax("a JSON value")),
                None => return Err(self.cut_short()),
            }
        }
        Ok(())
    }

    /// Skips any value (after white space), keeping nothing: an object or array by counting
    /// brackets outside strings, in constant memory whatever its depth (the values inside are
    /// not checked: memtrack reads none of them).
    pub fn skip_value(&mut self) -> Result<(), ScanError> {
        match self.next_nonws()? {
            b'"' => {
                self.pos += 1;
                self.skip_string()
            }
            b'{' | b'[' => self.skip_container(),
            b't' | b'f' | b'n' => self.skip_word(),
            b'-' | b'0'..=b'9' => self.skip_number(),
            _ => Err(self.syntax("a JSON value")),
        }
    }

    fn skip_container(&mut self) -> Result<(), ScanError> {
        let mut depth = 0u64;
        loop {
            let rest = self.rest();
            let found = rest
                .iter()
                .position(|&b| matches!(b, b'"' | b'{' | b'[' | b'}' | b']'));
            let Some(k) = found else {
                self.pos = self.buf.len();
                if !self.refill()? {
                    return Err(self.cut_short());
                }
                continue;
            };
            let b = rest[k];
            self.pos += k + 1;
            match b {
                b'"' => self.skip_string()?,
                b'{' | b'[' => depth += 1,
                _ => {
                    depth -= 1;
                    if depth == 0 {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// A member name after its opening quote, through its closing quote and the `:` after
    /// it: its raw bytes in `key` when it is short (longer names are none memtrack reads, and
    /// are skipped), else `key` is left empty.
    pub fn member_name(&mut self, key: &mut Vec<u8>) -> Result<(), ScanError> {
        key.clear();
        // most names lie whole in the chunk at hand, without escapes
        let rest = self.rest();
        match memchr::memchr2(b'"', b'\\', rest) {
            Some(k) if rest[k] == b'"' => {
                if k <= MAX_NAME {
                    key.extend_from_slice(&rest[..k]);
                }
                self.pos += k + 1;
            }
            _ => {
                let mut long = Vec::new();
                match self.keep_string(&mut long, MAX_NAME + 8) {
                    Ok(_) => key.extend_from_slice(&long),
                    Err(ScanError::ItemTooLarge { .. }) => self.skip_string()?,
                    Err(e) => return Err(e),
                }
            }
        }
        if self.next_nonws()? != b':' {
            return Err(self.syntax("`:` after a member name"));
        }
        self.pos += 1;
        Ok(())
    }
}

/// Longer member names than this are none memtrack reads.
const MAX_NAME: usize = 32;

#[inline]
fn is_number_byte(b: u8) -> bool {
    matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
}
