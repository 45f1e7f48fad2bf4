//! Where a recorded program that raised stopped: the exception as Python printed it last, and
//! the last op recorded before it, with its module and phase (the op that raised never
//! finished, so it is not in the file; the module it ran in usually is that op's).

use serde::Serialize;

use crate::model::{op_module, TrackerStats};

/// The uncaught exception of a recorded program, and where in the run it came.
#[derive(Debug, Serialize)]
pub struct Raised {
    /// Its type and message, the traceback's last entry (`RuntimeError: addmm: mat1 …`).
    pub exception: String,
    /// The last op recorded before it (index and name); None when none was.
    pub after_op: Option<(usize, String)>,
    /// The module that op ran in (`Sequential.0`), when it ran in one.
    pub module: Option<String>,
    /// `forward`, `backward` or `step` (an optimizer's), from that op's name.
    pub phase: Option<String>,
}

/// Longest exception text kept (a message can hold a whole tensor's repr).
const MAX_TEXT: usize = 400;

/// The exception a `record` file says its program raised; None when it did not raise.
pub fn raised(stats: &TrackerStats) -> Option<Raised> {
    let exit = stats.record.as_ref()?.exit.as_ref()?;
    if exit.ended.as_deref() != Some("exception") {
        return None;
    }
    let exception = last_exception(exit.exception.as_deref().unwrap_or(""))?;
    let n = stats.op_count();
    let after_op = n
        .checked_sub(1)
        .map(|i| (i, stats.names.get(i).to_string()));
    let (module, phase) = match &after_op {
        Some((_, name)) => match op_module(name) {
            Some(m) => {
                let rest = &name[m.len() + 1..];
                let phase = rest.split('.').next().map(str::to_string);
                (Some(m.to_string()), phase)
            }
            None => (None, None),
        },
        None => (None, None),
    };
    Some(Raised {
        exception,
        after_op,
        module,
        phase,
    })
}

/// The last exception of a traceback's text: from its last line that starts at the margin
/// (not the header, nor the lines chaining one exception to the next) to the end.
fn last_exception(traceback: &str) -> Option<String> {
    const NOT_IT: [&str; 3] = [
        "Traceback (most recent call last):",
        "During handling of the above exception, another exception occurred:",
        "The above exception was the direct cause of the following exception:",
    ];
    let lines: Vec<&str> = traceback.lines().collect();
    let start = lines.iter().rposition(|l| {
        !l.is_empty() && !l.starts_with([' ', '\t']) && !NOT_IT.contains(&l.trim_end())
    })?;
    let text = lines[start..].join("\n").trim_end().to_string();
    Some(match text.char_indices().nth(MAX_TEXT) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_exception_of_a_chain_is_taken() {
        let tb = "Traceback (most recent call last):\n  File \"a.py\", line 1, in <module>\n    f()\nKeyError: 'x'\n\nDuring handling of the above exception, another exception occurred:\n\nTraceback (most recent call last):\n  File \"a.py\", line 3, in <module>\n    g()\nRuntimeError: addmm: mat1 and mat2 shapes cannot be multiplied (4x5 and 8x8)\n";
        assert_eq!(
            last_exception(tb).unwrap(),
            "RuntimeError: addmm: mat1 and mat2 shapes cannot be multiplied (4x5 and 8x8)"
        );
        assert_eq!(
            last_exception("KeyboardInterrupt\n").unwrap(),
            "KeyboardInterrupt"
        );
        assert_eq!(last_exception(""), None);
        let long = format!("ValueError: {}", "x".repeat(1000));
        assert_eq!(last_exception(&long).unwrap().chars().count(), MAX_TEXT + 1);
    }
}
