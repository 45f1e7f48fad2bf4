//! The keyboard, read from the terminal ourselves: crossterm's reader spins on a terminal that
//! went away (a read of 0 bytes, end of file, is taken for "more to come"), so an SSH session
//! that drops would leave the UI burning a core. Here end of file or a hang-up is said as
//! [`Input::Gone`], and the few keys the screens take are decoded from their bytes.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::time::Duration;

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

/// What the terminal gave.
pub enum Input {
    Key(KeyEvent),
    /// Nothing within the wait.
    Nothing,
    /// The terminal is gone (hung up, closed): nobody is there to draw for.
    Gone,
}

/// Keys from a terminal's descriptor, decoded as they come.
pub struct Keys {
    tty: File,
    pending: Vec<u8>,
    /// The terminal was found gone (once gone, it stays so).
    gone: bool,
}

impl Keys {
    pub fn new(tty: File) -> Keys {
        Keys {
            tty,
            pending: Vec::new(),
            gone: false,
        }
    }

    /// Whether the terminal was found gone.
    pub fn gone(&self) -> bool {
        self.gone
    }

    /// The next key, waiting at most `wait` for one.
    pub fn next(&mut self, wait: Duration) -> io::Result<Input> {
        let input = self.read(wait)?;
        self.gone |= matches!(input, Input::Gone);
        Ok(input)
    }

    fn read(&mut self, wait: Duration) -> io::Result<Input> {
        if let Some(k) = self.decode() {
            return Ok(Input::Key(k));
        }
        let mut p = libc::pollfd {
            fd: self.tty.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll on one valid pollfd
        let ready = unsafe { libc::poll(&mut p, 1, wait.as_millis().min(i32::MAX as u128) as i32) };
        if ready < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::Interrupted => Ok(Input::Nothing),
                _ => Err(e),
            };
        }
        if p.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
            return Ok(Input::Gone);
        }
        if p.revents & libc::POLLIN == 0 {
            return Ok(Input::Nothing);
        }
        let mut buf = [0u8; 256];
        // SAFETY: read into our buffer from a descriptor we hold
        let n = unsafe { libc::read(p.fd, buf.as_mut_ptr().cast(), buf.len()) };
        match n {
            0 => Ok(Input::Gone),
            n if n < 0 => match io::Error::last_os_error() {
                e if e.kind() == io::ErrorKind::Interrupted => Ok(Input::Nothing),
                e if e.kind() == io::ErrorKind::WouldBlock => Ok(Input::Nothing),
                e if e.raw_os_error() == Some(libc::EIO) => Ok(Input::Gone),
                e => Err(e),
            },
            n => {
                self.pending.extend_from_slice(&buf[..n as usize]);
                // a lone ESC read by itself is the Esc key; one that begins a sequence came
                // with the rest of it
                let lone_esc = self.pending == [0x1b];
                if lone_esc {
                    self.pending.clear();
                    return Ok(Input::Key(key(KeyCode::Esc)));
                }
                Ok(self.decode().map_or(Input::Nothing, Input::Key))
            }
        }
    }

    /// The first key in what was read, taking its bytes; None where none is complete.
    fn decode(&mut self) -> Option<KeyEvent> {
        loop {
            let (k, used) = decode(&self.pending)?;
            self.pending.drain(..used);
            if k.is_some() {
                return k;
            }
        }
    }
}

fn key(code: KeyCode) -> KeyEvent {
    KeyEvent::new(code, KeyModifiers::NONE)
}

/// One key from the start of `b`: (the key, or None for bytes no screen takes; bytes used).
/// None where `b` is empty or holds only the start of a key.
fn decode(b: &[u8]) -> Option<(Option<KeyEvent>, usize)> {
    let first = *b.first()?;
    let one = |code| Some((Some(key(code)), 1));
    match first {
        0x03 => Some((
            Some(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)),
            1,
        )),
        b'\r' | b'\n' => one(KeyCode::Enter),
        0x7f | 0x08 => one(KeyCode::Backspace),
        0x1b => escape(b),
        c if c < 0x20 => Some((None, 1)),
        _ => {
            // one UTF-8 character
            let len = match first {
                c if c < 0x80 => 1,
                c if c >> 5 == 0b110 => 2,
                c if c >> 4 == 0b1110 => 3,
                c if c >> 3 == 0b11110 => 4,
                _ => return Some((None, 1)),
            };
            if b.len() < len {
                return None;
            }
            match std::str::from_utf8(&b[..len])
                .ok()
                .and_then(|s| s.chars().next())
            {
                Some(c) => Some((Some(key(KeyCode::Char(c))), len)),
                None => Some((None, 1)),
            }
        }
    }
}

/// An escape sequence (CSI `ESC [ … final` or SS3 `ESC O x`) from the start of `b`.
fn escape(b: &[u8]) -> Option<(Option<KeyEvent>, usize)> {
    match b.get(1) {
        None => None,
        Some(b'O') => {
            let code = match *b.get(2)? {
                b'A' => KeyCode::Up,
                b'B' => KeyCode::Down,
                b'C' => KeyCode::Right,
                b'D' => KeyCode::Left,
                b'H' => KeyCode::Home,
                b'F' => KeyCode::End,
                _ => return Some((None, 3)),
            };
            Some((Some(key(code)), 3))
        }
        Some(b'[') => {
            // parameters and intermediates, then a final byte in 0x40..=0x7e
            let end = 2 + b[2..].iter().position(|c| (0x40..=0x7e).contains(c))?;
            let params = &b[2..end];
            let code = match (b[end], params) {
                (b'A', _) => KeyCode::Up,
                (b'B', _) => KeyCode::Down,
                (b'C', _) => KeyCode::Right,
                (b'D', _) => KeyCode::Left,
                (b'H', _) | (b'~', b"1") | (b'~', b"7") => KeyCode::Home,
                (b'F', _) | (b'~', b"4") | (b'~', b"8") => KeyCode::End,
                (b'~', b"5") => KeyCode::PageUp,
                (b'~', b"6") => KeyCode::PageDown,
                _ => return Some((None, end + 1)),
            };
            Some((Some(key(code)), end + 1))
        }
        // Alt and a key: the key
        Some(_) => Some((None, 1)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(bytes: &[u8]) -> Vec<KeyEvent> {
        let mut out = Vec::new();
        let mut b = bytes;
        while let Some((k, used)) = decode(b) {
            out.extend(k);
            b = &b[used..];
        }
        out
    }

    #[test]
    fn the_keys_the_screens_take_are_decoded() {
        let k = keys(b"q/ab\r\x1b[A\x1b[B\x1b[C\x1b[D\x1bOH\x1b[4~\x1b[5~\x1b[6~\x7f\x03\xc3\xa9");
        let codes: Vec<KeyCode> = k.iter().map(|k| k.code).collect();
        use KeyCode::*;
        assert_eq!(
            codes,
            [
                Char('q'),
                Char('/'),
                Char('a'),
                Char('b'),
                Enter,
                Up,
                Down,
                Right,
                Left,
                Home,
                End,
                PageUp,
                PageDown,
                Backspace,
                Char('c'),
                Char('é')
            ]
        );
        assert!(k[14].modifiers.contains(KeyModifiers::CONTROL));
        // a sequence cut short waits for the rest
        assert!(decode(b"\x1b[1").is_none());
        // an unknown sequence is skipped whole
        assert_eq!(keys(b"\x1b[1;5Pq")[0].code, Char('q'));
    }

    #[test]
    fn a_terminal_that_hangs_up_is_gone_not_a_spin() {
        // a pseudo-terminal whose other side closes: the end every SSH disconnect gives
        let mut master = 0;
        let mut slave = 0;
        // SAFETY: openpty fills two descriptors
        let r = unsafe {
            libc::openpty(
                &mut master,
                &mut slave,
                std::ptr::null_mut(),
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        assert_eq!(r, 0);
        // SAFETY: descriptors openpty just made, each owned once
        let (master, slave) = unsafe {
            use std::os::fd::FromRawFd;
            (File::from_raw_fd(master), File::from_raw_fd(slave))
        };
        let mut keys = Keys::new(slave);
        drop(master);
        // (Nothing would be the wait running out)
        assert!(matches!(
            keys.next(Duration::from_secs(5)).unwrap(),
            Input::Gone
        ));
    }
}
