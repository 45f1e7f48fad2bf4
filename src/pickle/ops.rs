//! Pickle opcodes decoded with their arguments, without executing anything: one decoder for
//! the generic virtual machine (`reader`) and for layout-specific fast paths in `formats`.

use super::error::PickleError;

/// One opcode and its argument, borrowing from the input.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Op<'a> {
    Proto(u8),
    /// FRAME: a length hint for buffered readers; the framed opcodes follow inline.
    Frame,
    Stop,
    Mark,
    Pop,
    PopMark,
    Dup,
    None,
    Bool(bool),
    Int(i64),
    /// LONG1 / LONG4: little-endian two's complement bytes.
    Long(&'a [u8]),
    /// INT / LONG in protocol 0 when it does not fit in an i64: the decimal text.
    DecimalInt(&'a str),
    Float(f64),
    /// Text the file declares UTF-8 (BINUNICODE family), not yet validated.
    Unicode(&'a [u8]),
    /// Protocol 0 UNICODE: raw-unicode-escape text.
    UnicodeEscaped(&'a [u8]),
    /// Protocol 0 STRING: a quoted Python 2 literal.
    StringLiteral(&'a [u8]),
    /// BINSTRING / SHORT_BINSTRING: Python 2 str bytes (read as text, as Python 3 does).
    BinString(&'a [u8]),
    Bytes(&'a [u8]),
    NextBuffer,
    ReadonlyBuffer,
    EmptyTuple,
    Tuple,
    /// TUPLE1, TUPLE2, TUPLE3
    TupleN(usize),
    EmptyList,
    List,
    EmptyDict,
    Dict,
    EmptySet,
    FrozenSet,
    Append,
    Appends,
    AddItems,
    SetItem,
    SetItems,
    Get(u64),
    Put(u64),
    Memoize,
    Global {
        module: &'a [u8],
        name: &'a [u8],
    },
    StackGlobal,
    Reduce,
    NewObj,
    NewObjEx,
    Inst {
        module: &'a [u8],
        name: &'a [u8],
    },
    Obj,
    Build,
    PersId(&'a [u8]),
    BinPersId,
    Ext(u32),
}

/// Reads opcodes from a byte slice. Cheap to clone, so a reader can look ahead and go back. Every declared length is checked against what is left of
/// the input before it is used, so no argument can make the reader allocate or overrun.
#[derive(Clone)]
pub struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
    /// Where the opcode being decoded starts, for error messages.
    start: usize,
}

type Result<T> = std::result::Result<T, PickleError>;

impl<'a> Cursor<'a> {
    pub fn new(data: &'a [u8]) -> Cursor<'a> {
        Cursor {
            data,
            pos: 0,
            start: 0,
        }
    }

    /// All the bytes, read or not.
    pub fn whole(&self) -> &'a [u8] {
        self.data
    }

    /// Bytes consumed so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Consume the next opcode if it is the argument-less opcode `code` (e.g. MEMOIZE, 0x94).
    #[inline(always)]
    pub fn eat(&mut self, code: u8) -> bool {
        if self.data.get(self.pos) == Some(&code) {
            self.start = self.pos;
            self.pos += 1;
            true
        } else {
            false
        }
    }

    /// The bytes not read yet, for readers that match a known byte layout directly.
    #[inline(always)]
    pub fn rest(&self) -> &'a [u8] {
        &self.data[self.pos..]
    }

    /// Skip `n` bytes of [`Cursor::rest`] that the caller has decoded itself.
    #[inline(always)]
    pub fn advance(&mut self, n: usize) {
        self.start = self.pos;
        self.pos = (self.pos + n).min(self.data.len());
    }

    /// Offset of the opcode returned last.
    pub fn op_start(&self) -> usize {
        self.start
    }

    #[cold]
    #[inline(never)]
    pub fn error(&self, message: String) -> PickleError {
        PickleError {
            offset: self.start,
            message,
            cut_short: false,
        }
    }

    /// The file ends where the pickle needs more bytes.
    #[cold]
    #[inline(never)]
    fn cut_short(&self, message: String) -> PickleError {
        PickleError {
            cut_short: true,
            ..self.error(message)
        }
    }

    #[cold]
    #[inline(never)]
    fn truncated(&self, n: usize) -> PickleError {
        self.cut_short(format!(
            "truncated: opcode needs {} more bytes but the file ends after {}",
            n,
            self.data.len() - self.pos
        ))
    }

    #[inline(always)]
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let data: &'a [u8] = self.data;
        if n > data.len() - self.pos {
            return Err(self.truncated(n));
        }
        let s = &data[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    #[inline(always)]
    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        Ok(self.take(N)?.try_into().expect("take returns N bytes"))
    }

    #[inline(always)]
    fn u8(&mut self) -> Result<u8> {
        Ok(self.array::<1>()?[0])
    }

    #[inline(always)]
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    #[inline(always)]
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// A declared length, checked against what is left before anything is read or allocated.
    fn counted(&mut self, declared: u64) -> Result<&'a [u8]> {
        let left = (self.data.len() - self.pos) as u64;
        if declared > left {
            return Err(self.error(format!(
                "declared length {declared} is larger than the {left} bytes left in the file"
            )));
        }
        self.take(declared as usize)
    }

    fn line(&mut self) -> Result<&'a [u8]> {
        let data: &'a [u8] = self.data;
        let rest = &data[self.pos..];
        match rest.iter().position(|&b| b == b'\n') {
            Some(n) => {
                self.pos += n + 1;
                Ok(&rest[..n])
            }
            None => {
                Err(self.cut_short("truncated: a text argument has no terminating newline".into()))
            }
        }
    }

    fn decimal_u64(&self, line: &[u8]) -> Result<u64> {
        std::str::from_utf8(line)
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .ok_or_else(|| self.error("memo key is not a decimal number".into()))
    }

    fn decimal_int(&self, line: &'a [u8]) -> Result<Op<'a>> {
        let text = std::str::from_utf8(line)
            .map_err(|_| self.error("INT/LONG: not a decimal number".into()))?
            .trim();
        Ok(match text.parse::<i64>() {
            Ok(i) => Op::Int(i),
            Err(_) => Op::DecimalInt(text),
        })
    }

    /// The next opcode. At the end of the input: an error saying the file is empty or
    /// truncated (a pickle always ends with STOP). Inlined into each reader's loop: as a call,
    /// returning the decoded op through memory cost a third of the parse.
    #[inline(always)]
    pub fn next_op(&mut self) -> Result<Op<'a>> {
        self.start = self.pos;
        let Some(&code) = self.data.get(self.pos) else {
            return Err(if self.pos == 0 {
                self.error("empty file: no pickle data".into())
            } else {
                self.cut_short("truncated: the file ends before the pickle's STOP opcode".into())
            });
        };
        self.pos += 1;
        Ok(match code {
            0x80 => {
                let proto = self.u8()?;
                if proto > 5 {
                    return Err(self.error(format!(
                        "unsupported pickle protocol {proto} (0-5 are known)"
                    )));
                }
                Op::Proto(proto)
            }
            0x95 => {
                let n = self.u64()?;
                let left = (self.data.len() - self.pos) as u64;
                if n > left {
                    return Err(self.cut_short(format!(
                        "truncated: FRAME of {n} bytes but only {left} are left in the file"
                    )));
                }
                Op::Frame
            }
            b'.' => Op::Stop,
            b'(' => Op::Mark,
            b'0' => Op::Pop,
            b'1' => Op::PopMark,
            b'2' => Op::Dup,
            b'N' => Op::None,
            0x88 => Op::Bool(true),
            0x89 => Op::Bool(false),
            b'J' => Op::Int(i32::from_le_bytes(self.array()?) as i64),
            b'K' => Op::Int(self.u8()? as i64),
            b'M' => Op::Int(u16::from_le_bytes(self.array()?) as i64),
            0x8a => {
                let n = self.u8()? as u64;
                Op::Long(self.counted(n)?)
            }
            0x8b => {
                let n = self.u32()? as u64;
                Op::Long(self.counted(n)?)
            }
            b'I' => match self.line()? {
                b"01" => Op::Bool(true),
                b"00" => Op::Bool(false),
                line => self.decimal_int(line)?,
            },
            b'L' => {
                let line = self.line()?;
                self.decimal_int(line.strip_suffix(b"L").unwrap_or(line))?
            }
            b'G' => Op::Float(f64::from_be_bytes(self.array()?)),
            b'F' => {
                let line = self.line()?;
                let text = std::str::from_utf8(line).ok().map(str::trim);
                match text.and_then(parse_python_float) {
                    Some(f) => Op::Float(f),
                    None => return Err(self.error("FLOAT: not a number".into())),
                }
            }
            0x8c => {
                let n = self.u8()? as u64;
                Op::Unicode(self.counted(n)?)
            }
            b'X' => {
                let n = self.u32()? as u64;
                Op::Unicode(self.counted(n)?)
            }
            0x8d => {
                let n = self.u64()?;
                Op::Unicode(self.counted(n)?)
            }
            b'V' => Op::UnicodeEscaped(self.line()?),
            b'S' => Op::StringLiteral(self.line()?),
            b'T' => {
                let n = i32::from_le_bytes(self.array()?);
                if n < 0 {
                    return Err(self.error("BINSTRING: negative length".into()));
                }
                Op::BinString(self.counted(n as u64)?)
            }
            b'U' => {
                let n = self.u8()? as u64;
                Op::BinString(self.counted(n)?)
            }
            b'C' => {
                let n = self.u8()? as u64;
                Op::Bytes(self.counted(n)?)
            }
            b'B' => {
                let n = self.u32()? as u64;
                Op::Bytes(self.counted(n)?)
            }
            0x8e | 0x96 => {
                let n = self.u64()?;
                Op::Bytes(self.counted(n)?)
            }
            0x97 => Op::NextBuffer,
            0x98 => Op::ReadonlyBuffer,
            b')' => Op::EmptyTuple,
            b't' => Op::Tuple,
            0x85..=0x87 => Op::TupleN((code - 0x84) as usize),
            b']' => Op::EmptyList,
            b'l' => Op::List,
            b'}' => Op::EmptyDict,
            b'd' => Op::Dict,
            0x8f => Op::EmptySet,
            0x91 => Op::FrozenSet,
            b'a' => Op::Append,
            b'e' => Op::Appends,
            0x90 => Op::AddItems,
            b's' => Op::SetItem,
            b'u' => Op::SetItems,
            b'g' => {
                let line = self.line()?;
                Op::Get(self.decimal_u64(line)?)
            }
            b'h' => Op::Get(self.u8()? as u64),
            b'j' => Op::Get(self.u32()? as u64),
            b'p' => {
                let line = self.line()?;
                Op::Put(self.decimal_u64(line)?)
            }
            b'q' => Op::Put(self.u8()? as u64),
            b'r' => Op::Put(self.u32()? as u64),
            0x94 => Op::Memoize,
            b'c' => {
                let module = self.line()?;
                Op::Global {
                    module,
                    name: self.line()?,
                }
            }
            0x93 => Op::StackGlobal,
            b'R' => Op::Reduce,
            0x81 => Op::NewObj,
            0x92 => Op::NewObjEx,
            b'i' => {
                let module = self.line()?;
                Op::Inst {
                    module,
                    name: self.line()?,
                }
            }
            b'o' => Op::Obj,
            b'b' => Op::Build,
            b'P' => Op::PersId(self.line()?),
            b'Q' => Op::BinPersId,
            0x82 => Op::Ext(self.u8()? as u32),
            0x83 => Op::Ext(u16::from_le_bytes(self.array()?) as u32),
            0x84 => Op::Ext(self.u32()?),
            other => {
                return Err(self.error(format!(
                    "unknown opcode 0x{other:02x}; not a pickle, or a corrupt one"
                )))
            }
        })
    }
}

fn parse_python_float(s: &str) -> Option<f64> {
    match s {
        "inf" => Some(f64::INFINITY),
        "-inf" => Some(f64::NEG_INFINITY),
        "nan" => Some(f64::NAN),
        _ => s.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_arguments_and_checks_lengths() {
        let mut c = Cursor::new(b"\x80\x05K\x07\x8c\x02hiJ\xff\xff\xff\xff.");
        assert_eq!(c.next_op().unwrap(), Op::Proto(5));
        assert_eq!(c.next_op().unwrap(), Op::Int(7));
        assert_eq!(c.next_op().unwrap(), Op::Unicode(b"hi"));
        assert_eq!(c.next_op().unwrap(), Op::Int(-1));
        assert_eq!(c.next_op().unwrap(), Op::Stop);
        let e = Cursor::new(b"X\xff\xff\xff\x7f").next_op().unwrap_err();
        assert!(e.message.contains("declared length"), "{e}");
        assert_eq!(Cursor::new(b"I01\n").next_op().unwrap(), Op::Bool(true));
        assert_eq!(
            Cursor::new(b"L123456789012345678901234567890L\n")
                .next_op()
                .unwrap(),
            Op::DecimalInt("123456789012345678901234567890")
        );
    }
}
