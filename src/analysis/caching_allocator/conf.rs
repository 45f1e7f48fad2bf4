//! The spellings of the settings: parsing and writing `PYTORCH_CUDA_ALLOC_CONF` strings (with
//! what is wrong with one, `SettingError`), and reading the `allocator_settings` a snapshot
//! records.

use super::settings::Settings;
use super::sizes::{LARGE_BUFFER, ROUNDUP_INTERVALS};

/// What is wrong with one `KEY:VALUE` item of a `PYTORCH_CUDA_ALLOC_CONF` string; each
/// message starts with the item as given.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SettingError {
    /// No `:` between a key and a value.
    #[error("`{item}`: expected KEY:VALUE, e.g. expandable_segments:True")]
    NotKeyValue {
        /// The item as given.
        item: String,
    },
    /// A `*_mb` setting whose value is not a whole number.
    #[error("`{item}`: {key} takes a whole number of MiB")]
    NotWholeMib {
        /// The item as given.
        item: String,
        /// The setting's name.
        key: String,
    },
    /// `max_split_size_mb` at or below 20 (the allocator's large buffer), which PyTorch
    /// refuses too.
    #[error("`{item}`: max_split_size_mb must be above 20")]
    MaxSplitTooSmall {
        /// The item as given.
        item: String,
    },
    /// `expandable_segments` other than True/False (or true/false, 1/0).
    #[error("`{item}`: expandable_segments is True or False")]
    NotBool {
        /// The item as given.
        item: String,
    },
    /// `garbage_collection_threshold` that is not a number.
    #[error("`{item}`: expected a number")]
    NotANumber {
        /// The item as given.
        item: String,
    },
    /// `garbage_collection_threshold` outside (0, 1).
    #[error("`{item}`: garbage_collection_threshold must be between 0.0 and 1.0")]
    ThresholdOutOfRange {
        /// The item as given.
        item: String,
    },
    /// A `roundup_power2_divisions` value that does not parse.
    #[error("`{item}`: roundup_power2_divisions {source}")]
    Divisions {
        /// The item as given.
        item: String,
        /// What is wrong in the value.
        source: DivisionsError,
    },
    /// A key the model does not know (or does not model).
    #[error(
        "`{item}`: unknown setting {key}; simulate models max_split_size_mb, \
         max_non_split_rounding_mb, roundup_power2_divisions, expandable_segments \
         and garbage_collection_threshold"
    )]
    UnknownSetting {
        /// The item as given.
        item: String,
        /// The key as given (trimmed).
        key: String,
    },
}

/// What is wrong in a `roundup_power2_divisions` value (`4` or `[256:1,512:2,>:8]`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DivisionsError {
    /// A division count that is not a number (the text as given).
    #[error("`{0}` is not a number")]
    NotANumber(String),
    /// A division count or an interval's size in MiB that is not a power of two.
    #[error("{0} is not a power of two")]
    NotPowerOfTwo(u64),
    /// A list item without `:` (the item as given).
    #[error("item `{0}` is not SIZE_MB:DIVISIONS")]
    NotSizeDivisions(String),
    /// A list key that is neither `>` nor a number (the key as given).
    #[error("`{0}` is not a size in MiB")]
    NotASize(String),
}

impl Settings {
    /// Apply a `PYTORCH_CUDA_ALLOC_CONF` string: `KEY:VALUE` items separated by commas (those
    /// inside a `[...]` list belong to it).
    pub fn apply_all(&mut self, conf: &str) -> Result<(), SettingError> {
        let mut depth = 0i32;
        let mut start = 0;
        for (i, c) in conf.char_indices().chain([(conf.len(), ',')]) {
            match c {
                '[' => depth += 1,
                ']' => depth -= 1,
                // the end always closes an item, so an unclosed list is an error, not ignored
                ',' if depth <= 0 || i == conf.len() => {
                    let item = conf[start..i.min(conf.len())].trim();
                    if !item.is_empty() {
                        self.apply(item)?;
                    }
                    start = i + 1;
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Apply one `KEY:VALUE` of `PYTORCH_CUDA_ALLOC_CONF` syntax.
    pub fn apply(&mut self, item: &str) -> Result<(), SettingError> {
        let (key, value) = item
            .split_once(':')
            .ok_or_else(|| SettingError::NotKeyValue { item: item.into() })?;
        let (key, value) = (key.trim(), value.trim());
        let mb = |v: &str| -> Result<u64, SettingError> {
            v.parse::<u64>().map_err(|_| SettingError::NotWholeMib {
                item: item.into(),
                key: key.into(),
            })
        };
        match key {
            "max_split_size_mb" => {
                let m = mb(value)?;
                // the allocator refuses values below its large buffer (20 MiB) the same way
                if m * (1 << 20) <= LARGE_BUFFER {
                    return Err(SettingError::MaxSplitTooSmall { item: item.into() });
                }
                self.max_split_size = Some(m << 20);
            }
            "max_non_split_rounding_mb" => self.max_non_split_rounding_size = mb(value)? << 20,
            "expandable_segments" => {
                self.expandable_segments = match value {
                    "True" | "true" | "1" => true,
                    "False" | "false" | "0" => false,
                    _ => return Err(SettingError::NotBool { item: item.into() }),
                }
            }
            "garbage_collection_threshold" => {
                let t: f64 = value
                    .parse()
                    .map_err(|_| SettingError::NotANumber { item: item.into() })?;
                if !(t > 0.0 && t < 1.0) {
                    return Err(SettingError::ThresholdOutOfRange { item: item.into() });
                }
                self.garbage_collection_threshold = t;
            }
            "roundup_power2_divisions" => {
                self.roundup_power2_divisions =
                    parse_divisions(value).map_err(|source| SettingError::Divisions {
                        item: item.into(),
                        source,
                    })?
            }
            _ => {
                return Err(SettingError::UnknownSetting {
                    item: item.into(),
                    key: key.into(),
                })
            }
        }
        Ok(())
    }

    /// `PYTORCH_CUDA_ALLOC_CONF` spelling of what differs from the defaults ("default" if nothing).
    pub fn describe(&self) -> String {
        let d = Settings::default();
        let mut parts = Vec::new();
        if self.expandable_segments {
            parts.push("expandable_segments:True".to_string());
        }
        if let Some(m) = self.max_split_size {
            parts.push(format!("max_split_size_mb:{}", m >> 20));
        }
        if self.max_non_split_rounding_size != d.max_non_split_rounding_size {
            parts.push(format!(
                "max_non_split_rounding_mb:{}",
                self.max_non_split_rounding_size >> 20
            ));
        }
        let div = &self.roundup_power2_divisions;
        if div != &d.roundup_power2_divisions {
            if div.iter().all(|&x| x == div[0]) {
                parts.push(format!("roundup_power2_divisions:{}", div[0]));
            } else {
                let items: Vec<String> = div
                    .iter()
                    .enumerate()
                    .map(|(i, x)| format!("{}:{x}", 1u64 << i))
                    .collect();
                parts.push(format!("roundup_power2_divisions:[{}]", items.join(",")));
            }
        }
        if self.garbage_collection_threshold > 0.0 {
            parts.push(format!(
                "garbage_collection_threshold:{}",
                self.garbage_collection_threshold
            ));
        }
        if parts.is_empty() {
            "default".into()
        } else {
            parts.join(",")
        }
    }

    /// The settings a snapshot's `allocator_settings` records (unknown keys are ignored).
    pub fn from_recorded(items: &[(String, serde_json::Value)]) -> Settings {
        let mut s = Settings::default();
        for (k, v) in items {
            match (k.as_str(), v) {
                ("expandable_segments", serde_json::Value::Bool(b)) => s.expandable_segments = *b,
                ("max_split_size", v) => {
                    s.max_split_size = v.as_i64().filter(|&m| m > 0).map(|m| m as u64)
                }
                ("max_non_split_rounding_size", v) => {
                    if let Some(m) = v.as_u64() {
                        s.max_non_split_rounding_size = m;
                    }
                }
                ("garbage_collection_threshold", v) => {
                    s.garbage_collection_threshold = v.as_f64().unwrap_or(0.0)
                }
                ("roundup_power2_divisions", serde_json::Value::Object(m)) => {
                    // keyed by the interval's start in MiB
                    for (mib, d) in m {
                        if let (Ok(mib), Some(d)) = (mib.parse::<u64>(), d.as_u64()) {
                            if mib.is_power_of_two() {
                                let i = (mib.trailing_zeros() as usize).min(ROUNDUP_INTERVALS - 1);
                                s.roundup_power2_divisions[i] = d as u32;
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        s
    }
}

/// `roundup_power2_divisions:4` (every interval) or `[256:1,512:2,>:8]` (keys in MiB, powers of
/// two; intervals before the first key take its value, `>` fills every interval after the last).
fn parse_divisions(v: &str) -> Result<[u32; ROUNDUP_INTERVALS], DivisionsError> {
    let check = |d: &str| -> Result<u32, DivisionsError> {
        let d: u32 = d
            .trim()
            .parse()
            .map_err(|_| DivisionsError::NotANumber(d.into()))?;
        if d != 0 && !d.is_power_of_two() {
            return Err(DivisionsError::NotPowerOfTwo(d.into()));
        }
        Ok(d)
    };
    let mut out = [0u32; ROUNDUP_INTERVALS];
    let Some(list) = v.strip_prefix('[').and_then(|v| v.strip_suffix(']')) else {
        out = [check(v)?; ROUNDUP_INTERVALS];
        return Ok(out);
    };
    let mut last: Option<usize> = None;
    for item in list.split(',') {
        let (k, d) = item
            .split_once(':')
            .ok_or_else(|| DivisionsError::NotSizeDivisions(item.into()))?;
        let d = check(d)?;
        if k.trim() == ">" {
            let from = last.map_or(0, |l| l + 1);
            out[from.min(ROUNDUP_INTERVALS)..].fill(d);
            continue;
        }
        let mib: u64 = k
            .trim()
            .parse()
            .map_err(|_| DivisionsError::NotASize(k.into()))?;
        if !mib.is_power_of_two() {
            return Err(DivisionsError::NotPowerOfTwo(mib));
        }
        let i = (mib.trailing_zeros() as usize).min(ROUNDUP_INTERVALS - 1);
        if last.is_none() {
            out[..i].fill(d);
        }
        out[i] = d;
        last = Some(i);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn division_lists_fill_as_pytorch_does() {
        let d = parse_divisions("[256:1,512:2,>:8]").unwrap();
        assert_eq!(d[..8], [1; 8]);
        assert_eq!(d[9], 2);
        assert_eq!(d[10..], [8; 6]);
        assert!(parse_divisions("[3:1]").is_err());
        let mut s = Settings::default();
        s.apply_all("roundup_power2_divisions:[1:2,>:8],expandable_segments:True")
            .unwrap();
        assert_eq!(s.roundup_power2_divisions[0], 2);
        assert_eq!(s.roundup_power2_divisions[5], 8);
        assert!(s.expandable_segments);
        assert!(s.apply_all("roundup_power2_divisions:[1:2,").is_err());
        assert!(parse_divisions("3").is_err());
    }
}
