//! The recorded program's output as the UI shows it in its pane: the last lines, as a
//! terminal would leave them (a `\r` starts the line again, as progress bars use it; escape
//! sequences, colours included, are left out). The bytes themselves go to the terminal
//! unchanged when the UI closes (`pty`); this is only what the pane shows.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Lines kept for the pane.
const KEPT_LINES: usize = 2000;
/// Longest line kept (the rest of a longer one is dropped).
const LONGEST_LINE: usize = 4096;

/// The program's output, as lines.
#[derive(Default)]
pub struct Output {
    inner: Mutex<Lines>,
    changed: AtomicBool,
}

#[derive(Default)]
struct Lines {
    done: VecDeque<String>,
    current: String,
    escape: Escape,
    /// A `\r` came last: the line starts again unless a `\n` follows (a pty's `\r\n`).
    carriage_return: bool,
    /// Bytes of a UTF-8 character cut by the end of a read.
    pending: Vec<u8>,
}

#[derive(Default, Clone, Copy, PartialEq, Eq)]
enum Escape {
    #[default]
    None,
    /// After ESC.
    Start,
    /// In a CSI sequence (`ESC [` … a final byte).
    Csi,
    /// In an OSC string (`ESC ]` … BEL or `ESC \\`).
    Osc,
    /// ESC inside an OSC string.
    OscEsc,
}

impl Output {
    /// Bytes the program wrote.
    pub fn push(&self, bytes: &[u8]) {
        let mut l = self.inner.lock().unwrap();
        let mut text = std::mem::take(&mut l.pending);
        text.extend_from_slice(bytes);
        let (good, rest) = match std::str::from_utf8(&text) {
            Ok(s) => (s.to_string(), Vec::new()),
            Err(e) if e.error_len().is_none() => {
                let k = e.valid_up_to();
                (
                    String::from_utf8_lossy(&text[..k]).into_owned(),
                    text[k..].to_vec(),
                )
            }
            Err(_) => (String::from_utf8_lossy(&text).into_owned(), Vec::new()),
        };
        l.pending = rest;
        for c in good.chars() {
            l.take(c);
        }
        self.changed.store(true, Ordering::SeqCst);
    }

    /// The last `n` lines, the one being written last.
    pub fn tail(&self, n: usize) -> Vec<String> {
        let l = self.inner.lock().unwrap();
        let mut out: Vec<String> = l.done.iter().rev().take(n).rev().cloned().collect();
        if !l.current.is_empty() {
            out.push(l.current.clone());
            if out.len() > n {
                out.remove(0);
            }
        }
        out
    }

    /// Whether anything came since the last call.
    pub fn changed(&self) -> bool {
        self.changed.swap(false, Ordering::SeqCst)
    }
}

impl Lines {
    fn take(&mut self, c: char) {
        if std::mem::take(&mut self.carriage_return) && c != '\n' {
            self.current.clear();
        }
        match (self.escape, c) {
            (Escape::None, '\u{1b}') => self.escape = Escape::Start,
            (Escape::None, '\n') => {
                let line = std::mem::take(&mut self.current);
                self.done.push_back(line);
                if self.done.len() > KEPT_LINES {
                    self.done.pop_front();
                }
            }
            (Escape::None, '\r') => self.carriage_return = true,
            (Escape::None, '\u{8}') => {
                self.current.pop();
            }
            (Escape::None, '\t') => self.current.push_str("    "),
            (Escape::None, c) if c.is_control() => {}
            (Escape::None, c) => {
                if self.current.len() < LONGEST_LINE {
                    self.current.push(c);
                }
            }
            (Escape::Start, '[') => self.escape = Escape::Csi,
            (Escape::Start, ']') => self.escape = Escape::Osc,
            (Escape::Start, _) => self.escape = Escape::None,
            (Escape::Csi, c) if ('\u{40}'..='\u{7e}').contains(&c) => self.escape = Escape::None,
            (Escape::Csi, _) => {}
            (Escape::Osc, '\u{7}') => self.escape = Escape::None,
            (Escape::Osc, '\u{1b}') => self.escape = Escape::OscEsc,
            (Escape::Osc, _) => {}
            (Escape::OscEsc, _) => self.escape = Escape::None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_read_as_a_terminal_leaves_them() {
        let o = Output::default();
        o.push(b"step 1\r\n\x1b[32mgreen\x1b[0m text\n");
        o.push(b"progress 10%\rprogress 20%\rprog");
        o.push(b"ress 30%\n\x1b]0;title\x07caf\xc3");
        o.push(b"\xa9");
        assert_eq!(
            o.tail(10),
            vec!["step 1", "green text", "progress 30%", "café"]
        );
        assert!(o.changed());
        assert!(!o.changed());
        assert_eq!(o.tail(2), vec!["progress 30%", "café"]);
    }
}
