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
pub fn push_size(out: &mut String, bytes: i64) {
    use std::fmt::Write;
    let mut num = bytes as f64;
    for unit in ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi"] {
        if num.abs() < 1024.0 {
            let _ = write!(out, "{num:.1}{unit}B");
            return;
        }
        num /= 1024.0;
    }
    let _ = write!(out, "{num:.1}YiB");
}

/// Per-frame and per-stack results of the filter, computed once per distinct frame/stack.
pub struct FrameFilter<'s> {
    snap: &'s Snapshot,
    keep: Vec<u8>, // 0 unknown, 1 keep, 2 drop
}

impl<'s> FrameFilter<'s> {
    pub fn new(snap: &'s Snapshot) -> FrameFilter<'s> {
        FrameFilter {
            snap,
            keep: vec![0; snap.stacks.frame_count()],
        }
    }

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
    }

    #[test]
    fn filter_drops_unwinder_and_interpreter_frames() {
        assert!(!frame_filter("torch::unwind::unwind()", "??"));
        assert!(!frame_filter("_PyEval_EvalFrameDefault", "ceval.c"));
        assert!(!frame_filter("x", "Python/ceval.c"));
        assert!(frame_filter("forward", "model.py"));
    }
}
