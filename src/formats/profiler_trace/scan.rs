//! A streaming reader of Chrome trace JSON, for the traces torch.profiler writes: it walks the
//! text once, byte by byte through `text::Text`, item by item of `traceEvents`, keeps only the
//! fields memtrack uses (and only the events it keeps), and never builds the document.
//!
//! Time is linear in the text; memory is what the trace keeps plus one event's kept fields
//! (bounded by `MAX_KEPT_PER_EVENT`): values memtrack does not read are skipped as they pass,
//! whatever their size. A gzip trace is read within a `Budget` of its compressed size.

use super::build::{Builder, Fields, Token};
use super::error::ScanError;
use super::source::Source;
use super::text::{Budget, Text, MAX_KEPT_PER_EVENT};
use crate::model::profile::ProfileTrace;

/// Reads a whole trace from `source`. `progress` gets the file bytes read so far; `budget`
/// bounds what a compressed file may expand to.
pub fn read(
    source: &mut Source,
    progress: &mut dyn FnMut(u64),
    budget: Option<Budget>,
) -> Result<ProfileTrace, ScanError> {
    let mut text = Text::new(source, progress, budget);
    let mut b = Builder::new();
    // a UTF-8 byte order mark is allowed before the text
    for (k, &m) in b"\xEF\xBB\xBF".iter().enumerate() {
        if text.peek()? != Some(m) {
            if k > 0 {
                return Err(text.syntax("a JSON value after a byte order mark"));
            }
            break;
        }
        text.pos += 1;
    }
    // the top-level value: an object with `traceEvents`, or the bare array of events
    match text.skip_ws()? {
        None => {
            let found = match text.offset() {
                0 => "nothing (an empty file)".to_string(),
                n => format!("nothing but {n} bytes of white space"),
            };
            return Err(ScanError::NotObject { found });
        }
        Some(b'[') => {
            text.pos += 1;
            events(&mut text, &mut b)?;
            end_of_text(&mut text)?;
            return Ok(b.trace);
        }
        Some(b'{') => text.pos += 1,
        Some(_) => {
            let ScanError::Syntax { found, .. } = text.syntax("") else {
                unreachable!("syntax() gives a syntax error")
            };
            return Err(ScanError::NotObject { found });
        }
    }
    let mut keys = Vec::new();
    let mut saw_events = false;
    let mut first = true;
    let mut key = Vec::new();
    loop {
        // `,` or `}` after a member, then the next key
        let c = text.next_nonws()?;
        if c == b'}' {
            text.pos += 1;
            break;
        }
        if !first {
            if c != b',' {
                return Err(text.syntax("`,` or `}` in the top-level object"));
            }
            text.pos += 1;
        }
        first = false;
        if text.next_nonws()? != b'"' {
            return Err(text.syntax("a member name in quotes"));
        }
        text.pos += 1;
        // a top-level key is shown in messages: kept whole (within reason), escapes decoded
        key.clear();
        let escaped = text.keep_string(&mut key, 4096)?;
        if text.next_nonws()? != b':' {
            return Err(text.syntax("`:` after a member name"));
        }
        text.pos += 1;
        let name = if escaped {
            super::build::unescape(&key)
        } else {
            String::from_utf8_lossy(&key).into_owned()
        };
        match name.as_str() {
            "traceEvents" => {
                if text.next_nonws()? != b'[' {
                    return Err(text.syntax("`traceEvents` to be an array"));
                }
                text.pos += 1;
                saw_events = true;
                events(&mut text, &mut b)?;
            }
            "profile_memory" | "baseTimeNanoseconds" => {
                let mut kept = Vec::new();
                let t = keep_token(&mut text, &mut kept)?;
                let v = t.and_then(|t| super::build::scaled_int(&kept[t.start..t.end], 1));
                if name == "profile_memory" {
                    b.trace.profile_memory = v.map(|v| v != 0);
                } else {
                    b.trace.base_time_ns = v;
                }
            }
            _ => {
                if keys.len() < 8 {
                    keys.push(name);
                }
                text.skip_value()?;
            }
        }
    }
    end_of_text(&mut text)?;
    if !saw_events {
        return Err(ScanError::NoTraceEvents { keys });
    }
    Ok(b.trace)
}

/// Only white space may follow the trace's JSON (as JSON parsers require: a file with more
/// after it is two files run together, or damaged).
fn end_of_text(text: &mut Text) -> Result<(), ScanError> {
    match text.skip_ws()? {
        None => Ok(()),
        Some(_) => Err(text.syntax("the end of the file after the trace's JSON")),
    }
}

/// The items of `traceEvents`, after its `[`, through its `]`.
fn events(text: &mut Text, b: &mut Builder) -> Result<(), ScanError> {
    let mut kept = Vec::with_capacity(4096);
    let mut keys = (Vec::with_capacity(64), Vec::with_capacity(64));
    let mut first = true;
    loop {
        // most events lie whole in the chunk at hand
        if let Ok((fields, at, end)) = super::fast::item(text.rest(), first) {
            let Some(fields) = fields else {
                text.pos += end;
                return Ok(());
            };
            let start = text.offset() + at as u64;
            let added = b.add(text.rest(), &fields);
            text.pos += end;
            counted(text, added, start)?;
            first = false;
            continue;
        }
        let mut c = text.next_nonws()?;
        if c == b']' {
            text.pos += 1;
            return Ok(());
        }
        if !first {
            if c != b',' {
                return Err(text.syntax("`,` or `]` between trace events"));
            }
            text.pos += 1;
            c = text.next_nonws()?;
        }
        first = false;
        if c != b'{' {
            let ScanError::Syntax { found, .. } = text.syntax("") else {
                unreachable!("syntax() gives a syntax error")
            };
            return Err(ScanError::EventNotObject {
                index: text.events,
                found,
            });
        }
        let start = text.offset();
        text.pos += 1;
        kept.clear();
        let fields = event(text, &mut kept, &mut keys)?;
        let added = b.add(&kept, &fields);
        counted(text, added, start)?;
    }
}

/// An event added (`added`: whether the trace keeps it), counted; or refused (`start`: where
/// it starts in the text).
#[inline]
fn counted(text: &mut Text, added: Result<bool, String>, start: u64) -> Result<(), ScanError> {
    match added {
        Ok(true) => text.keep_one()?,
        Ok(false) => {}
        Err(message) => {
            return Err(ScanError::BadEvent {
                offset: start,
                index: text.events,
                message,
            })
        }
    }
    text.events += 1;
    Ok(())
}

/// One event's members, after its `{`, through its `}`: the fields memtrack reads, their text
/// in `kept`.
fn event(
    text: &mut Text,
    kept: &mut Vec<u8>,
    (key, inner): &mut (Vec<u8>, Vec<u8>),
) -> Result<Fields, ScanError> {
    let mut f = Fields::default();
    members(text, key, |text, key| {
        if key == b"args" {
            if text.next_nonws()? != b'{' {
                return text.skip_value();
            }
            text.pos += 1;
            return members(text, inner, |text, key| match f.args_slot(key) {
                Some(slot) => {
                    *slot = keep_token(text, kept)?;
                    Ok(())
                }
                None => text.skip_value(),
            });
        }
        match f.event_slot(key) {
            Some(slot) => {
                *slot = keep_token(text, kept)?;
                Ok(())
            }
            None => text.skip_value(),
        }
    })?;
    Ok(f)
}

/// An object's members after its `{`, through its `}`: `member` gets each name (empty when
/// too long to be one memtrack reads) with the cursor at its value, and reads the value.
#[inline]
fn members(
    text: &mut Text,
    key: &mut Vec<u8>,
    mut member: impl FnMut(&mut Text, &[u8]) -> Result<(), ScanError>,
) -> Result<(), ScanError> {
    let mut c = text.next_nonws()?;
    if c == b'}' {
        text.pos += 1;
        return Ok(());
    }
    loop {
        if c != b'"' {
            return Err(text.syntax("a member name in quotes"));
        }
        text.pos += 1;
        text.member_name(key)?;
        member(text, key)?;
        match text.next_nonws()? {
            b',' => {
                text.pos += 1;
                c = text.next_nonws()?;
            }
            b'}' => {
                text.pos += 1;
                return Ok(());
            }
            _ => return Err(text.syntax("`,` or `}` in an object")),
        }
    }
}

/// A scalar memtrack keeps, as its text in `kept`: a number, or a string's raw bytes; any
/// other value is skipped (None).
fn keep_token(text: &mut Text, kept: &mut Vec<u8>) -> Result<Option<Token>, ScanError> {
    let start = kept.len();
    let room = MAX_KEPT_PER_EVENT;
    match text.next_nonws()? {
        b'"' => {
            text.pos += 1;
            let escaped = text.keep_string(kept, room)?;
            Ok(Some(Token {
                start,
                end: kept.len(),
                escaped,
            }))
        }
        b'-' | b'0'..=b'9' => {
            text.keep_number(kept, room)?;
            Ok(Some(Token {
                start,
                end: kept.len(),
                escaped: false,
            }))
        }
        _ => {
            text.skip_value()?;
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{read, ScanError};
    use crate::formats::profiler_trace::source::Source;
    use crate::formats::profiler_trace::text::Budget;
    use crate::model::profile::ProfileTrace;

    fn read_in_chunks(text: &[u8], chunk: usize) -> Result<ProfileTrace, ScanError> {
        let mut source =
            Source::plain_in_chunks(Box::new(std::io::Cursor::new(text.to_vec())), chunk);
        read(&mut source, &mut |_| {}, None)
    }

    /// Every kind of value the reader keeps or skips, with escapes, nesting and white space.
    const TRACE: &[u8] = br#"{"schemaVersion": 1, "deviceProperties": [{"name": "x\"]}"}],
      "traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm\u00e9", "pid": 1, "tid": 2,
         "ts": 10.5, "dur": 2.25, "args": {"Input Dims": [[1, 2], []], "flag": true, "n": null}},
        {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 2,
         "ts": 11, "args": {"Addr": 4096, "Bytes": 512, "Total Allocated": 512,
         "Total Reserved": 2048, "Device Id": 0, "Device Type": 1, "extra": {"a": "}"}}},
        {"ph": "i", "name": "[memory]", "ts": 12, "args": {"Bytes": -512.0, "Total Allocated": 0}},
        {"ph": "X", "cat": "python_function", "name": "f", "ts": 1e1, "dur": 0},
        {"ph": "M", "name": "thread_name", "args": {"name": "a \\ b"}}
      ],
      "profile_memory": 1, "baseTimeNanoseconds": 1700000000000000000}
    "#;

    #[test]
    fn values_across_chunk_ends_read_as_in_one_chunk() {
        let whole = format!("{:?}", read_in_chunks(TRACE, 1 << 20).unwrap());
        assert!(whole.contains("aten::mmé"), "{whole}");
        for chunk in 1..80 {
            let t = read_in_chunks(TRACE, chunk).unwrap();
            assert_eq!(format!("{t:?}"), whole, "chunks of {chunk} bytes");
            assert_eq!((t.events, t.memory.len(), t.ranges.len()), (5, 2, 2));
            assert_eq!(t.memory[1].bytes, -512);
        }
    }

    /// The fuzz target's property on a few thousand mutations of `TRACE`: reading in chunks of
    /// any size gives what one chunk gives, the same trace or the same error at the same place.
    #[test]
    fn chunks_agree_on_mutated_traces() {
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        const BYTES: &[u8] = b"{}[]\",:0-.e \\u\n";
        for _ in 0..3000 {
            let mut t = TRACE.to_vec();
            for _ in 0..1 + next() % 3 {
                let at = (next() % t.len() as u64) as usize;
                match next() % 3 {
                    0 => t[at] = BYTES[(next() % BYTES.len() as u64) as usize],
                    1 => drop(t.remove(at)),
                    _ => t.insert(at, BYTES[(next() % BYTES.len() as u64) as usize]),
                }
            }
            let whole = read_in_chunks(&t, 1 << 20);
            for chunk in [1, 2, 5, 64] {
                let part = read_in_chunks(&t, chunk);
                match (&whole, &part) {
                    (Ok(a), Ok(b)) => assert_eq!(format!("{a:?}"), format!("{b:?}")),
                    (Err(a), Err(b)) => assert_eq!(
                        (std::mem::discriminant(a), a.offset()),
                        (std::mem::discriminant(b), b.offset()),
                        "{} in chunks of {chunk}: {a:?} / {b:?}",
                        String::from_utf8_lossy(&t)
                    ),
                    _ => panic!("{}: {whole:?} / {part:?}", String::from_utf8_lossy(&t)),
                }
            }
        }
    }

    #[test]
    fn cut_short_at_every_byte_is_said_so() {
        for end in 0..TRACE.len() - 6 {
            // (the last bytes are white space after the object)
            let cut = &TRACE[..end];
            if cut.iter().all(|b| b.is_ascii_whitespace()) {
                continue;
            }
            for chunk in [3, 1 << 20] {
                match read_in_chunks(cut, chunk) {
                    Err(ScanError::CutShort { offset, .. }) => assert!(offset <= end as u64),
                    other => panic!("cut at {end} (chunks of {chunk}): {other:?}"),
                }
            }
        }
    }

    #[test]
    fn skipped_values_of_any_size_pass_and_kept_ones_are_bounded() {
        // a 9 MiB string and a 9 MiB array inside an event memtrack keeps: skipped
        let mut t = br#"[{"name": "[memory]", "ts": 1, "args": {"Bytes": 8, "s": ""#.to_vec();
        t.extend(std::iter::repeat_n(b'a', 9 << 20));
        t.extend_from_slice(br#"", "a": ["#);
        t.extend(std::iter::repeat_n(b'[', 9 << 20));
        t.extend(std::iter::repeat_n(b']', 9 << 20));
        t.extend_from_slice(br#"]}}]"#);
        let trace = read_in_chunks(&t, 1 << 16).unwrap();
        assert_eq!(trace.memory.len(), 1);
        // a name of 5 MiB is kept: refused
        let mut t = br#"[{"ph": "X", "cat": "cpu_op", "name": ""#.to_vec();
        t.extend(std::iter::repeat_n(b'n', 5 << 20));
        t.extend_from_slice(br#""}]"#);
        match read_in_chunks(&t, 1 << 16) {
            Err(ScanError::ItemTooLarge { index: 0, .. }) => {}
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn text_after_the_json_is_refused() {
        for tail in [&b"x"[..], b"{}", b"]"] {
            let mut t = br#"{"traceEvents": []} "#.to_vec();
            t.extend_from_slice(tail);
            match read_in_chunks(&t, 7) {
                Err(ScanError::Syntax { offset: 20, .. }) => {}
                other => panic!("{other:?}"),
            }
        }
        assert!(read_in_chunks(b"[] \n", 7).is_ok());
    }

    #[test]
    fn figures_no_allocator_reports_are_refused() {
        for (bytes, says) in [
            ("1e400", "which no allocator reports"),
            ("-9223372036854775808", "which no allocator reports"),
            ("1.5", "not a whole number"),
            ("\"many\"", "not a number of bytes"),
        ] {
            let t = format!(r#"[{{"name": "[memory]", "ts": 1, "args": {{"Bytes": {bytes}}}}}]"#);
            match read_in_chunks(t.as_bytes(), 1 << 20) {
                Err(ScanError::BadEvent {
                    index: 0, message, ..
                }) => {
                    assert!(message.contains(says), "{bytes}: {message}")
                }
                other => panic!("{bytes}: {other:?}"),
            }
        }
        let t = br#"[{"name": "[memory]", "ts": 1, "args": {"Total Allocated": -8589934592}}]"#;
        assert!(matches!(
            read_in_chunks(t, 5),
            Err(ScanError::BadEvent { .. })
        ));
        let t =
            br#"[{"name": "[memory]", "ts": 1, "args": {"Bytes": -8589934592, "Total Reserved": 1024.0}}]"#;
        assert_eq!(read_in_chunks(t, 5).unwrap().memory[0].bytes, -8589934592);
    }

    #[test]
    fn gzip_past_its_budget_is_refused_as_it_inflates() {
        use std::io::Write;
        // one member of 16 MiB of white space, concatenated: 512 MiB from 0.5 MiB
        let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        z.write_all(&vec![b' '; 16 << 20]).unwrap();
        let member = z.finish().unwrap();
        let mut file = br#"{"traceEvents": ["#.to_vec();
        let mut head = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        head.write_all(&file).unwrap();
        file = head.finish().unwrap();
        for _ in 0..32 {
            file.extend_from_slice(&member);
        }
        let mut source = Source::new(Box::new(std::io::Cursor::new(file)), true);
        match read(&mut source, &mut |_| {}, Some(Budget::GZIP)) {
            Err(ScanError::Expansion {
                what: "bytes",
                text,
                ..
            }) => {
                assert!(text < 128 << 20, "stopped at {text}")
            }
            other => panic!("{other:?}"),
        }
    }
}
