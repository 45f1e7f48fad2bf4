//! Names as messages show them. A file name comes from whoever named the file: one with a tab,
//! an escape sequence (`ESC[31m`) or a newline would reach the terminal raw, recolour it or
//! forge a second message line. A plain name is shown as it is; any other is quoted for a
//! shell, as coreutils' diagnostics and `ls --quoting-style=shell-escape` show it: in single
//! quotes, with what a terminal would act on as `$'…'` escapes (`'a'$'\t''b'`), so the name
//! shown is the name, and can be pasted back into a command.

use std::borrow::Cow;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// A path as messages show it: as it is when plain, else quoted ([`quote`]).
pub fn path(p: &Path) -> Cow<'_, str> {
    quote(p.as_os_str())
}

/// A name as messages show it: as it is when every character is plain (letters, digits, and
/// `-_./:,+=@%^` and `~` after the first), else in single quotes with each character a
/// terminal would act on, and each byte that is not UTF-8, as a `$'…'` escape.
pub fn quote(name: &OsStr) -> Cow<'_, str> {
    let bytes = name.as_bytes();
    if let Ok(text) = std::str::from_utf8(bytes) {
        if !text.is_empty() && text.chars().enumerate().all(|(i, c)| plain(c, i == 0)) {
            return Cow::Borrowed(text);
        }
    }
    let mut out = Quoted::default();
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\'' => out.escaped("\\'"),
                c if acts_on_terminal(c) => out.escaped(&escape(c)),
                c => out.quoted(c),
            }
        }
        for b in chunk.invalid() {
            out.escaped(&format!("\\{b:03o}"));
        }
    }
    Cow::Owned(out.finish())
}

/// A name as a report's title shows it (`summary`'s first line, a chart's caption, a JSON
/// document's names): as it is, spaces and all, unless it holds a character a terminal would
/// act on or is not UTF-8; then quoted as messages quote it ([`quote`]), so that no file's
/// name recolours a terminal, forges a line of a report or breaks an SVG.
pub fn title(name: &OsStr) -> Cow<'_, str> {
    match std::str::from_utf8(name.as_bytes()) {
        Ok(text) if !text.chars().any(acts_on_terminal) => Cow::Borrowed(text),
        _ => quote(name),
    }
}

/// Text a message carries from a file (an op's or a marker's name, an exception's text) with
/// each character a terminal would act on, but the newline, written as its escape (`\033`):
/// what `main` prints as the error, so that no file can recolour or retitle the terminal.
pub fn visible(text: &str) -> Cow<'_, str> {
    if !text.chars().any(|c| c != '\n' && acts_on_terminal(c)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c != '\n' && acts_on_terminal(c) {
            out.push_str(&escape(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Shown without quotes: what a shell reads as part of a word, and no terminal acts on.
fn plain(c: char, first: bool) -> bool {
    match c {
        'a'..='z' | 'A'..='Z' | '0'..='9' | '-' | '_' | '.' | '/' | ':' | ',' | '+' | '=' => true,
        '@' | '%' | '^' => true,
        '~' => !first,
        c => !c.is_ascii() && !c.is_whitespace() && !acts_on_terminal(c),
    }
}

/// A character a terminal acts on rather than shows: the C0 and C1 controls and DEL, and
/// the invisible ones that reorder or hide what follows (bidi overrides and isolates, zero
/// widths, line and paragraph separators, the byte order mark).
fn acts_on_terminal(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{200B}'..='\u{200F}'
                | '\u{2028}'..='\u{202E}'
                | '\u{2060}'..='\u{2069}'
                | '\u{FEFF}'
        )
}

/// `c` as bash's `$'…'` writes it: `\t`, `\n` and the other named ones, `\033` for the other
/// ASCII controls (octal, as coreutils writes them), `\u202e` past ASCII.
fn escape(c: char) -> String {
    match c {
        '\u{7}' => "\\a".into(),
        '\u{8}' => "\\b".into(),
        '\t' => "\\t".into(),
        '\n' => "\\n".into(),
        '\u{B}' => "\\v".into(),
        '\u{C}' => "\\f".into(),
        '\r' => "\\r".into(),
        c if c.is_ascii() => format!("\\{:03o}", c as u32),
        c => format!("\\u{:04x}", c as u32),
    }
}

/// A quoted name being written: runs of plain characters in `'…'`, escapes in `$'…'`.
#[derive(Default)]
struct Quoted {
    out: String,
    /// Which quotes are open: none, `'`, or `$'`.
    open: Open,
}

#[derive(Default, PartialEq)]
enum Open {
    #[default]
    None,
    Single,
    Dollar,
}

impl Quoted {
    fn quoted(&mut self, c: char) {
        if self.open != Open::Single {
            self.close();
            self.out.push('\'');
            self.open = Open::Single;
        }
        self.out.push(c);
    }

    fn escaped(&mut self, e: &str) {
        if self.open != Open::Dollar {
            self.close();
            self.out.push_str("$'");
            self.open = Open::Dollar;
        }
        self.out.push_str(e);
    }

    fn close(&mut self) {
        if self.open != Open::None {
            self.out.push('\'');
            self.open = Open::None;
        }
    }

    fn finish(mut self) -> String {
        if self.out.is_empty() {
            return "''".into();
        }
        self.close();
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;

    fn q(bytes: &[u8]) -> String {
        quote(OsStr::from_bytes(bytes)).into_owned()
    }

    #[test]
    fn plain_names_are_shown_as_they_are() {
        for name in [
            "run.pkl",
            "/tmp/a/rank0.snap.pickle",
            "trace-0_1.json.gz",
            "données/été.pkl",
            "a~b",
        ] {
            assert_eq!(q(name.as_bytes()), name);
        }
    }

    #[test]
    fn titles_quote_only_names_a_terminal_would_act_on() {
        let t = |b: &[u8]| title(OsStr::from_bytes(b)).into_owned();
        assert_eq!(t(b"my run.pkl"), "my run.pkl");
        assert_eq!(t(b"it's.pkl"), "it's.pkl");
        assert_eq!(t(b"a\tb\x1b[31m.pkl"), r"'a'$'\t''b'$'\033''[31m.pkl'");
        assert_eq!(t(b"x\nmemtrack: forged"), r"'x'$'\n''memtrack: forged'");
        assert_eq!(t(b"caf\xe9.pkl"), r"'caf'$'\351''.pkl'");
    }

    #[test]
    fn other_names_are_quoted_as_a_shell_reads_them() {
        assert_eq!(q(b"my run.pkl"), "'my run.pkl'");
        assert_eq!(q(b""), "''");
        assert_eq!(q(b"~/x"), "'~/x'");
        assert_eq!(q(b"it's"), r"'it'$'\'''s'");
        assert_eq!(q(b"a\tb"), r"'a'$'\t''b'");
        assert_eq!(q(b"\x1b[31mred"), r"$'\033''[31mred'");
        assert_eq!(q(b"x\nmemtrack: forged"), r"'x'$'\n''memtrack: forged'");
        assert_eq!(q(b"bad\xff\xfe.pkl"), r"'bad'$'\377\376''.pkl'");
        assert_eq!(q("a\u{202e}b".as_bytes()), r"'a'$'\u202e''b'");
        assert_eq!(visible("op \u{1b}[2J\tx\ny"), "op \\033[2J\\tx\ny");
        assert!(matches!(visible("plain text\n"), Cow::Borrowed(_)));
        // nothing a terminal acts on is left in what is shown
        for name in [&b"\x1b]0;title\x07"[..], b"\r\x7f\x9b", "\u{85}".as_bytes()] {
            let shown = q(name);
            assert!(!shown.chars().any(acts_on_terminal), "{shown:?}");
        }
    }
}
