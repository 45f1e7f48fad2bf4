//! `memtrack view` run as a user runs it, for the tests that ask its server and drive its page
//! in a headless browser.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running `memtrack view --no-browser --port 0 FILE`, stopped with SIGINT when dropped.
pub struct Viewer {
    pub child: Child,
    /// `http://127.0.0.1:PORT`
    pub base: String,
    pub token: String,
    pub url: String,
}

impl Viewer {
    pub fn start(file: &Path) -> Viewer {
        Viewer::launch(file, |cmd| {
            cmd.arg("--no-browser");
        })
    }

    /// `memtrack view --port 0 FILE`, the command made ready by `configure` (its options, its
    /// environment).
    pub fn launch(file: &Path, configure: impl FnOnce(&mut Command)) -> Viewer {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_memtrack"));
        cmd.args(["view", "--port", "0"]);
        configure(&mut cmd);
        let mut child = cmd
            .arg(file)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("memtrack runs");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line.trim().to_string();
        assert!(
            url.starts_with("http://127.0.0.1:") && url.contains("/?token="),
            "the first line is the URL: {url:?}"
        );
        let (base, token) = url.split_once("/?token=").unwrap();
        Viewer {
            base: base.to_string(),
            token: token.to_string(),
            url: url.clone(),
            child,
        }
    }

    /// Status and body of `GET path` (`token` added unless `path` says `notoken`).
    pub fn get(&self, path: &str) -> (u16, String) {
        let sep = if path.contains('?') { '&' } else { '?' };
        self.raw("GET", &format!("{path}{sep}token={}", self.token))
    }

    pub fn raw(&self, method: &str, target: &str) -> (u16, String) {
        let host = self.base.trim_start_matches("http://");
        let mut s = TcpStream::connect(host).unwrap();
        // a server that never answers fails the test instead of hanging it
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        write!(
            s,
            "{method} {target} HTTP/1.0\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        let status: u16 = text
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("an HTTP answer: {text:?}"));
        let body = text
            .split_once("\r\n\r\n")
            .map_or("", |(_, b)| b)
            .to_string();
        (status, body)
    }

    /// `127.0.0.1:PORT`
    pub fn host(&self) -> &str {
        self.base.trim_start_matches("http://")
    }

    pub fn connect(&self) -> TcpStream {
        TcpStream::connect(self.host()).unwrap()
    }

    /// The server's resident memory, KiB.
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    pub fn json(&self, path: &str) -> serde_json::Value {
        let (status, body) = self.get(path);
        assert_eq!(status, 200, "{path}: {body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"))
    }

    /// Ctrl-C: the server stops and exits 0.
    pub fn interrupt(mut self) -> i32 {
        // SAFETY: a signal to our own child
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let status = self.child.wait().unwrap();
        status.code().unwrap_or(-1)
    }
}

impl Drop for Viewer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The page's `#selftest` report (JSON) from a headless browser, after checking the page
/// logged no error.
pub fn selftest(browser: &Path, dir: &Path, url: &str) -> serde_json::Value {
    report(browser, dir, url, "selftest", "selftest")
}

/// The report the page writes into `<pre id=ID>` when opened at `url#FRAGMENT`, after checking
/// the page logged no error.
pub fn report(
    browser: &Path,
    dir: &Path,
    url: &str,
    fragment: &str,
    id: &str,
) -> serde_json::Value {
    let out = super::headless(
        browser,
        &dir.join("profile"),
        10_000,
        "--dump-dom",
        &format!("{url}#{fragment}"),
    );
    let dom = String::from_utf8_lossy(&out.stdout);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(
        !log.contains("Uncaught") && !log.contains("CONSOLE"),
        "the page logged an error:\n{log}"
    );
    let open = format!(r#"<pre id="{id}">"#);
    let start = dom
        .find(&open)
        .unwrap_or_else(|| panic!("the page's {id} did not finish:\n{log}"));
    let report = &dom[start + open.len()..];
    let report = &report[..report.find("</pre>").unwrap()];
    let report = report
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    serde_json::from_str(&report).unwrap_or_else(|e| panic!("{e}: {report}"))
}
