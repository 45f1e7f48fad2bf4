//! The common case, fast: one trace event that lies whole in the chunk at hand, parsed from
//! the slice (its kept fields left where they are). Anything else (an event that runs past
//! the chunk, or text that is not JSON) is left to the streaming reader (`scan`), from the
//! same place: at most the rest of one chunk is looked at twice per chunk, so reading stays
//! linear.

use super::build::{Fields, Token};
use super::text::is_ws;

/// Not here: the event runs past the chunk, or is not JSON (the streaming reader says which).
pub struct NotHere;

type P<T> = Result<T, NotHere>;

#[inline]
fn skip_ws(s: &[u8], mut i: usize) -> P<usize> {
    while i < s.len() {
        if !is_ws(s[i]) {
            return Ok(i);
        }
        i += 1;
    }
    Err(NotHere)
}

#[inline]
fn expect(s: &[u8], i: usize, b: u8) -> P<usize> {
    let i = skip_ws(s, i)?;
    if s[i] == b {
        Ok(i + 1)
    } else {
        Err(NotHere)
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
            return Err(NotHere);
        };
        j += k;
        if s[j] == b'"' {
            return Ok((start, j, escaped, j + 1));
        }
        escaped = true;
        j += 2; // the backslash and the character it escapes
        if j > s.len() {
            return Err(NotHere);
        }
    }
}

/// The end of a number starting at `i` (a number at the very end of the text needs more).
#[inline]
fn number_end(s: &[u8], mut i: usize) -> P<usize> {
    while i < s.len() {
        match s[i] {
            b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E' => i += 1,
            _ => return Ok(i),
        }
    }
    Err(NotHere)
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
                return Err(NotHere);
            }
            if &s[i..i + word.len()] == word {
                Ok(i + word.len())
            } else {
                Err(NotHere)
            }
        }
        b'-' | b'0'..=b'9' => Ok(number_end(s, i)?),
        _ => Err(NotHere),
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
    Err(NotHere)
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
            return Err(NotHere);
        }
        let (ks, ke, _, next) = string_raw(s, j)?;
        let colon = expect(s, next, b':')?;
        j = member(&s[ks..ke], colon)?;
        j = skip_ws(s, j)?;
        match s[j] {
            b',' => j = skip_ws(s, j + 1)?,
            b'}' => return Ok(j + 1),
            _ => return Err(NotHere),
        }
    }
}

/// One event at `s[i]` (its `{`): its fields (tokens index `s`) and the index past it.
fn event(s: &[u8], i: usize) -> P<(Fields, usize)> {
    let mut f = Fields::default();
    let end = members(s, i, |key, v| {
        if key == b"args" {
            let a = skip_ws(s, v)?;
            if s[a] != b'{' {
                return skip_value(s, a);
            }
            return members(s, a, |key, v| match f.args_slot(key) {
                Some(slot) => {
                    let (t, next) = token(s, v)?;
                    *slot = t;
                    Ok(next)
                }
                None => skip_value(s, v),
            });
        }
        match f.event_slot(key) {
            Some(slot) => {
                let (t, next) = token(s, v)?;
                *slot = t;
                Ok(next)
            }
            None => skip_value(s, v),
        }
    })?;
    Ok((f, end))
}

/// The next item of `traceEvents` in `s`, whose cursor is after the previous item (or the
/// `[`, when `first`): the separator, then one event that lies whole in `s`. `Ok(None)`: the
/// `]` was reached (past it: the index); else the event's fields, where it starts, and the
/// index past it.
#[inline]
pub fn item(s: &[u8], first: bool) -> P<(Option<Fields>, usize, usize)> {
    let mut i = skip_ws(s, 0)?;
    if s[i] == b']' {
        return Ok((None, i, i + 1));
    }
    if !first {
        if s[i] != b',' {
            return Err(NotHere);
        }
        i = skip_ws(s, i + 1)?;
    }
    if s[i] != b'{' {
        return Err(NotHere);
    }
    let (f, end) = event(s, i)?;
    Ok((Some(f), i, end))
}
