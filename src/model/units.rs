//! Byte amounts and the binary units they are shown in (as MemTracker: 1 KiB = 1024 B).

use std::fmt;
use std::str::FromStr;

/// Bytes in a MiB, as a float (MemoryTracker's numbers are MiB floats).
pub const MIB: f64 = 1024.0 * 1024.0;

/// The most bytes one allocator figure of a stats file or a profiler trace may be: 1 PiB,
/// past any device's memory (an H200 has 141 GB) by far, and within f64's exact integers.
/// A larger one is refused as no allocator's ("a damaged or hand-made file?").
pub const MAX_BYTES: u64 = 1 << 50;

/// The unit byte amounts are shown in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Units {
    /// Pick per number: the largest unit in which it is at least 1.
    #[default]
    Auto,
    /// Bytes.
    B,
    /// Kibibytes: 1024 bytes.
    KiB,
    /// Mebibytes: 1024 KiB.
    MiB,
    /// Gibibytes: 1024 MiB.
    GiB,
}

impl Units {
    fn divisor(self) -> f64 {
        match self {
            Units::Auto | Units::B => 1.0,
            Units::KiB => 1024.0,
            Units::MiB => MIB,
            Units::GiB => MIB * 1024.0,
        }
    }

    /// The unit's symbol (`auto`, `B`, `KiB`, …).
    pub fn name(self) -> &'static str {
        match self {
            Units::Auto => "auto",
            Units::B => "B",
            Units::KiB => "KiB",
            Units::MiB => "MiB",
            Units::GiB => "GiB",
        }
    }

    /// The unit `Auto` resolves to for a given amount.
    pub fn resolve(self, bytes: f64) -> Units {
        if self != Units::Auto {
            return self;
        }
        let a = bytes.abs();
        if a >= MIB * 1024.0 {
            Units::GiB
        } else if a >= MIB {
            Units::MiB
        } else if a >= 1024.0 {
            Units::KiB
        } else {
            Units::B
        }
    }

    /// The amount in this unit, as a number (no suffix).
    pub fn scale(self, bytes: f64) -> f64 {
        bytes / self.resolve(bytes).divisor()
    }
}

impl FromStr for Units {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(Units::Auto),
            "b" => Ok(Units::B),
            "kib" => Ok(Units::KiB),
            "mib" => Ok(Units::MiB),
            "gib" => Ok(Units::GiB),
            // refused rather than silently read as binary: a MB is 10^6 bytes
            "kb" | "mb" | "gb" | "k" | "m" | "g" => Err(format!(
                "'{s}': memtrack shows binary units, as PyTorch does (1 MiB = 1024 KiB): use auto, B, KiB, MiB or GiB"
            )),
            _ => Err(format!("unknown unit '{s}': use auto, B, KiB, MiB or GiB")),
        }
    }
}

impl fmt::Display for Units {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `1.50 GiB`, `512 B`, `-3.25 MiB`: two decimals, none for whole bytes.
pub fn format_bytes(bytes: f64, units: Units) -> String {
    let u = units.resolve(bytes);
    if u == Units::B {
        return format!("{} B", bytes.round() as i64);
    }
    format!("{:.2} {}", bytes / u.divisor(), u.name())
}

/// What is wrong with a memory size given as text (`parse_size`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    /// No number where the size should start.
    #[error("`{0}`: expected a size such as 80GiB or 2.5GB")]
    NotANumber(String),
    /// A number followed by a unit memtrack does not know.
    #[error("`{input}`: unknown unit `{unit}` (B, KiB, MiB, GiB, TiB, kB, MB, GB, TB)")]
    UnknownUnit {
        /// The whole text given.
        input: String,
        /// The unit as written (trimmed, lower case).
        unit: String,
    },
    /// Below one byte, or beyond 2^63 bytes.
    #[error("`{0}`: not a usable memory size")]
    Unusable(String),
}

/// `80GiB`, `2.5 GB`, `512MiB`, `1000000` (bytes): binary units are powers of 1024, `kB`,
/// `MB`, `GB`, `TB` powers of 1000. The result is in bytes.
pub fn parse_size(s: &str) -> Result<u64, SizeError> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let num: f64 = num.parse().map_err(|_| SizeError::NotANumber(s.into()))?;
    let scale = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kib" => 1024.0,
        "mib" => MIB,
        "gib" => MIB * 1024.0,
        "tib" => MIB * MIB,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        u => {
            return Err(SizeError::UnknownUnit {
                input: s.into(),
                unit: u.into(),
            })
        }
    };
    let bytes = num * scale;
    if !(bytes >= 1.0 && bytes < 2f64.powi(63)) {
        return Err(SizeError::Unusable(s.into()));
    }
    Ok(bytes.round() as u64)
}

/// `1,234,567`
pub fn thousands(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_in_binary_and_decimal_units() {
        assert_eq!(parse_size("80GiB"), Ok(80 << 30));
        assert_eq!(parse_size("2.5 GB"), Ok(2_500_000_000));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("1000"), Ok(1000));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("3 parsecs").is_err());
        assert!(parse_size("0").is_err());
    }

    #[test]
    fn auto_picks_the_largest_unit_at_least_one() {
        assert_eq!(format_bytes(512.0, Units::Auto), "512 B");
        assert_eq!(format_bytes(1536.0, Units::Auto), "1.50 KiB");
        assert_eq!(format_bytes(-3.0 * MIB, Units::Auto), "-3.00 MiB");
        assert_eq!(format_bytes(3.0 * MIB, Units::GiB), "0.00 GiB");
        assert_eq!("mib".parse::<Units>().unwrap(), Units::MiB);
        assert!("tb".parse::<Units>().is_err());
        // decimal names are refused, not silently binary
        for decimal in ["mb", "MB", "kb", "gb", "m"] {
            let e = decimal.parse::<Units>().unwrap_err();
            assert!(e.contains("binary units"), "{e}");
        }
    }
}
