//! Protocol 0's text: decimal ints wider than 64 bits, and Python string literals as the
//! text opcodes write them. A leaf of the reader.

/// Little-endian two's complement bytes of a decimal integer (for ints wider than 64 bits).
pub(super) fn decimal_to_twos_complement_le(negative: bool, digits: &str) -> Vec<u8> {
    let mut mag: Vec<u8> = vec![0];
    for d in digits.bytes() {
        let mut carry = (d - b'0') as u32;
        for byte in mag.iter_mut() {
            let x = *byte as u32 * 10 + carry;
            *byte = x as u8;
            carry = x >> 8;
        }
        while carry > 0 {
            mag.push(carry as u8);
            carry >>= 8;
        }
    }
    mag.push(0); // room for the sign bit
    if negative {
        let mut carry = 1u16;
        for b in mag.iter_mut() {
            let x = (!*b) as u16 + carry;
            *b = x as u8;
            carry = x >> 8;
        }
    }
    mag
}

/// Protocol 0 `UNICODE`: latin-1 bytes with `\uXXXX` and `\UXXXXXXXX` escapes.
pub(super) fn decode_raw_unicode_escape(raw: &[u8]) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'\\' && i + 1 < raw.len() && (raw[i + 1] == b'u' || raw[i + 1] == b'U') {
            let n = if raw[i + 1] == b'u' { 4 } else { 8 };
            if let Some(hex) = raw.get(i + 2..i + 2 + n) {
                let code = std::str::from_utf8(hex)
                    .ok()
                    .and_then(|h| u32::from_str_radix(h, 16).ok());
                if let Some(c) = code.and_then(char::from_u32) {
                    out.push(c);
                    i += 2 + n;
                    continue;
                }
            }
        }
        out.push(raw[i] as char);
        i += 1;
    }
    out
}

/// Protocol 0 `STRING`: a Python 2 repr, `'...'` or `"..."`, with backslash escapes.
pub(super) fn decode_python_string_literal(line: &[u8]) -> Option<Vec<u8>> {
    let q = *line.first()?;
    if line.len() < 2 || (q != b'\'' && q != b'"') || *line.last()? != q {
        return None;
    }
    let body = &line[1..line.len() - 1];
    let mut out = Vec::with_capacity(body.len());
    let mut i = 0;
    while i < body.len() {
        let b = body[i];
        if b != b'\\' || i + 1 >= body.len() {
            out.push(b);
            i += 1;
            continue;
        }
        let e = body[i + 1];
        i += 2;
        match e {
            b'n' => out.push(b'\n'),
            b't' => out.push(b'\t'),
            b'r' => out.push(b'\r'),
            b'\\' | b'\'' | b'"' => out.push(e),
            b'x' => {
                let hex = body.get(i..i + 2)?;
                out.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?);
                i += 2;
            }
            b'0'..=b'7' => {
                let mut v = (e - b'0') as u32;
                let mut k = 0;
                while k < 2 && i < body.len() && (b'0'..=b'7').contains(&body[i]) {
                    v = v * 8 + (body[i] - b'0') as u32;
                    i += 1;
                    k += 1;
                }
                out.push(v as u8);
            }
            _ => {
                out.push(b'\\');
                out.push(e);
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_big_ints_become_twos_complement() {
        assert_eq!(decimal_to_twos_complement_le(false, "256"), vec![0, 1, 0]);
        let neg = decimal_to_twos_complement_le(true, "1");
        assert!(neg.iter().all(|&b| b == 0xff));
    }

    #[test]
    fn string_literals_unescape() {
        assert_eq!(
            decode_python_string_literal(b"'a\\nb\\x41\\101'").unwrap(),
            b"a\nbAA"
        );
        assert!(decode_python_string_literal(b"abc").is_none());
        assert_eq!(decode_raw_unicode_escape(b"caf\\u00e9"), "café");
    }
}
