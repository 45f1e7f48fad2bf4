//! The small conventions of PyTorch's `torch.cuda._memory_viz`, reimplemented so that our
//! numbers and listings line up with what users already know: its frame filter and its size
//! format.

use crate::model::snapshot::{FrameId, Snapshot, StackId};

const OMIT_FUNCTIONS: &[&str] = &[
    "unwind::unwind",
    "CapturedTraceback::gather",
    "gather_with_cpp",
    "_start",
    "__libc_start_main",
    "PyEval_",
    "PyObject_",
    "PyFunction_",
];
const OMIT_FILENAMES: &[&str] = &[
    "core/boxing",
    "/Register",
    "/Redispatch",
    "pythonrun.c",
    "Modules/main.c",
    "Objects/call.c",
    "Objects/methodobject.c",
    "pycore_ceval.h",
    "ceval.c",
    "cpython/abstract.h",
];

/// `_memory_viz._frame_filter`: false for the unwinder's own frames and the interpreter's.
pub fn frame_filter(name: &str, filename: &str) -> bool {
    !OMIT_FUNCTIONS.iter().any(|o| name.contains(o))
        && !OMIT_FILENAMES.iter().any(|o| filename.contains(o))
}

/// `_memory_viz._format_size` (what its `Bytes` prints): `512.0B`, `1.5KiB`, `20.0MiB`.
pub fn format_size(bytes: i64) -> String {
    let mut s = String::new();
    push_size(&mut s, bytes);
    s
}

/// Append `format_size(bytes)` to `out`.
///
/// In integers: Python divides by 1024 in floats, which is exact, and `.1f` rounds the exact
/// value half to even; so does this, without float formatting (the trace listing prints
/// millions of sizes).
pub fn push_size(out: &mut String, bytes: i64) {
    const UNITS: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    let neg = bytes < 0;
    let mag = bytes.unsigned_abs();
    // the largest unit not above the value: 2^(10 k) <= mag
    let k = match mag {
        0 => 0,
        _ => ((63 - mag.leading_zeros()) / 10).min(6),
    };
    // tenths of the unit, by shifts and masks (a u128 division is a library call)
    let (t, shift) = (mag as u128 * 10, 10 * k);
    let d = 1u128 << shift;
    let (mut q, r) = ((t >> shift) as u64, t & (d - 1));
    if 2 * r > d || (2 * r == d && q % 2 == 1) {
        q += 1;
    }
    if neg {
        out.push('-');
    }
    out.push_str(itoa::Buffer::new().format(q / 10));
    out.push('.');
    out.push((b'0' + (q % 10) as u8) as char);
    out.push_str(UNITS[k as usize]);
    out.push('B');
}

/// Per-frame and per-stack results of the filter, computed once per distinct frame/stack.
pub struct FrameFilter<'s> {
    snap: &'s Snapshot,
    keep: Vec<u8>, // 0 unknown, 1 keep, 2 drop
}

impl<'s> FrameFilter<'s> {
    /// A filter over `snap`'s frames, deciding each frame once.
    pub fn new(snap: &'s Snapshot) -> FrameFilter<'s> {
        FrameFilter {
            snap,
            keep: vec![0; snap.stacks.frame_count()],
        }
    }

    /// Whether `_memory_viz`'s frame filter keeps frame `f`.
    pub fn keeps(&mut self, f: FrameId) -> bool {
        let k = &mut self.keep[f.0 as usize];
        if *k == 0 {
            let fr = self.snap.stacks.frame(f);
            let st = &self.snap.stacks;
            *k = if frame_filter(st.str(fr.name), st.str(fr.filename)) {
                1
            } else {
                2
            };
        }
        *k == 1
    }

    /// The stack's frames that pass the filter, innermost first.
    pub fn kept(&mut self, s: StackId) -> Vec<FrameId> {
        let frames = self.snap.stacks.stack(s);
        frames.iter().copied().filter(|&f| self.keeps(f)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_print_as_memory_viz_prints_them() {
        assert_eq!(format_size(0), "0.0B");
        assert_eq!(format_size(512), "512.0B");
        assert_eq!(format_size(1023), "1023.0B");
        assert_eq!(format_size(1024), "1.0KiB");
        assert_eq!(format_size(1536), "1.5KiB");
        assert_eq!(format_size(20 << 20), "20.0MiB");
        assert_eq!(format_size(-(3 << 30)), "-3.0GiB");
        // ties round to even on the exact binary value, as Python's format does
        assert_eq!(format_size(1024 + 256 + 51), "1.3KiB");
        // an exact tie: 1.25 KiB → 1.2 (half to even), 1.75 KiB → 1.8
        assert_eq!(format_size(1280), "1.2KiB");
        assert_eq!(format_size(1792), "1.8KiB");
        // rounding up into the next power still prints in the smaller unit, as Python does
        assert_eq!(format_size(1024 * 1024 - 1), "1024.0KiB");
        assert_eq!(format_size(8_091_861_260), "7.5GiB");
    }

    #[test]
    fn integer_formatting_matches_float_formatting() {
        // the float way, as _memory_viz does it
        fn float_way(bytes: i64) -> String {
            let mut num = bytes as f64;
            for unit in ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"] {
                if num.abs() < 1024.0 {
                    return format!("{num:.1}{unit}B");
                }
                num /= 1024.0;
            }
            format!("{num:.1}ZiB")
        }
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for i in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let bits = (i % 50) as u32;
            let v = (x >> (64 - bits.max(1))) as i64 * if i % 7 == 0 { -1 } else { 1 };
            assert_eq!(format_size(v), float_way(v), "{v}");
        }
    }

    #[test]
    fn filter_drops_unwinder_and_interpreter_frames() {
        assert!(!frame_filter("torch::unwind::unwind()", "??"));
        assert!(!frame_filter("_PyEval_EvalFrameDefault", "ceval.c"));
        assert!(!frame_filter("x", "Python/ceval.c"));
        assert!(frame_filter("forward", "model.py"));
    }
}
