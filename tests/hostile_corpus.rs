//! Every command that reads a file, over a corpus of hostile inputs made here: pickles that
//! state absurd sizes (a 373-byte snapshot with one 2^62-byte segment, blocks adding up past
//! 2^64, a string of 4 GiB in a 40-byte file, a 2^62-byte frame, an integer of a million
//! bytes), figures no allocator or clock gives (1e300, inf, NaN and negative MiB; times of
//! 1e308 µs, NaN, text), devices and ops numbered 2^62, the wrong type in every place,
//! nesting 100,000 deep, memo bombs, a pickle that calls `os.system`; profiler traces with
//! bad times and figures, JSON nested a million deep, a gzip that inflates to 128 MiB; and
//! files named with a tab, an escape sequence and a newline (issue 59).
//!
//! Each run must end (killed past 20 s), within an address-space limit (RLIMIT_AS, so an
//! allocation sized by a figure in the file aborts rather than swaps), with exit 0 or 2: never
//! a panic, an abort or a signal. Its peak resident memory (the kernel's count, from `wait4`)
//! stays under 100 MiB and what it writes (stdout and `-o`) under 4 MiB; a refusal names the
//! file, quoted when its name holds control characters, and no report shows such a name
//! raw. Wall time is printed, not asserted.

mod common;

use std::ffi::{OsStr, OsString};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::{fixture, memtrack_process};

// ---- pickles, written by hand (protocol 2) ----

/// A pickle value: what the corpus's files are made of.
#[derive(Clone)]
enum P {
    Int(i128),
    Float(f64),
    Str(String),
    List(Vec<P>),
    Tuple(Vec<P>),
    Dict(Vec<(P, P)>),
    None,
    Bool(bool),
}

fn s(text: &str) -> P {
    P::Str(text.into())
}

fn dict(items: Vec<(&str, P)>) -> P {
    P::Dict(items.into_iter().map(|(k, v)| (s(k), v)).collect())
}

impl P {
    fn write(&self, out: &mut Vec<u8>) {
        match self {
            P::Int(v) => {
                // LONG1: little-endian two's complement, as short as its sign allows
                let bytes = v.to_le_bytes();
                let mut n = 16;
                while n > 1 {
                    let top = bytes[n - 1];
                    let below_sign = bytes[n - 2] & 0x80;
                    if (top == 0 && below_sign == 0) || (top == 0xff && below_sign != 0) {
                        n -= 1;
                    } else {
                        break;
                    }
                }
                out.extend_from_slice(&[0x8a, n as u8]);
                out.extend_from_slice(&bytes[..n]);
            }
            P::Float(f) => {
                out.push(b'G');
                out.extend_from_slice(&f.to_be_bytes());
            }
            P::Str(t) => {
                out.push(b'X');
                out.extend_from_slice(&(t.len() as u32).to_le_bytes());
                out.extend_from_slice(t.as_bytes());
            }
            P::List(items) => {
                out.extend_from_slice(b"](");
                items.iter().for_each(|i| i.write(out));
                out.push(b'e');
            }
            P::Tuple(items) => {
                out.push(b'(');
                items.iter().for_each(|i| i.write(out));
                out.push(b't');
            }
            P::Dict(items) => {
                out.extend_from_slice(b"}(");
                for (k, v) in items {
                    k.write(out);
                    v.write(out);
                }
                out.push(b'u');
            }
            P::None => out.push(b'N'),
            P::Bool(b) => out.push(if *b { 0x88 } else { 0x89 }),
        }
    }

    fn pickle(&self) -> Vec<u8> {
        let mut out = b"\x80\x02".to_vec();
        self.write(&mut out);
        out.push(b'.');
        out
    }
}

fn int(v: i128) -> P {
    P::Int(v)
}

/// A snapshot of the given segments and device traces, with settings as PyTorch 2.x writes.
fn snapshot(segments: Vec<P>, traces: Vec<Vec<P>>) -> P {
    dict(vec![
        ("segments", P::List(segments)),
        (
            "device_traces",
            P::List(traces.into_iter().map(P::List).collect()),
        ),
        (
            "allocator_settings",
            dict(vec![
                ("PYTORCH_CUDA_ALLOC_CONF", s("")),
                ("max_split_size", int(-1)),
                ("expandable_segments", P::Bool(false)),
            ]),
        ),
        ("external_annotations", P::List(vec![])),
    ])
}

/// One segment of `total` bytes on `device` at `address`, its blocks (size, state).
fn segment(device: i128, address: i128, total: i128, blocks: &[(i128, &str)]) -> P {
    let mut at = address;
    let blocks = blocks
        .iter()
        .map(|&(size, state)| {
            let b = dict(vec![
                ("address", int(at)),
                ("size", int(size)),
                ("requested_size", int(size)),
                ("state", s(state)),
                ("frames", P::List(vec![])),
            ]);
            at = at.wrapping_add(size);
            b
        })
        .collect();
    dict(vec![
        ("device", int(device)),
        ("address", int(address)),
        ("total_size", int(total)),
        ("allocated_size", int(1 << 20)),
        ("active_size", int(1 << 20)),
        ("requested_size", int(1 << 20)),
        ("stream", int(0)),
        ("segment_type", s("large")),
        ("segment_pool_id", P::Tuple(vec![int(0), int(0)])),
        ("is_expandable", P::Bool(false)),
        ("frames", P::List(vec![])),
        ("blocks", P::List(blocks)),
    ])
}

/// A trace event: `action` of `size` bytes at `addr`, at `time`.
fn event(action: &str, addr: i128, size: i128, time: P) -> P {
    let frame = dict(vec![
        ("name", s("forward")),
        ("filename", s("/home/u/train.py")),
        ("line", int(12)),
    ]);
    dict(vec![
        ("action", s(action)),
        ("addr", int(addr)),
        ("size", int(size)),
        ("stream", int(0)),
        ("time_us", time),
        ("frames", P::List(vec![frame])),
    ])
}

/// A trace that reserves a segment of `size` bytes and allocates, frees and releases it.
fn whole_trace(size: i128, times: [P; 5]) -> Vec<P> {
    let [t0, t1, t2, t3, t4] = times;
    vec![
        event("segment_alloc", 1 << 40, size, t0),
        event("alloc", 1 << 40, size, t1),
        event("free_requested", 1 << 40, size, t2),
        event("free_completed", 1 << 40, size, t3),
        event("segment_free", 1 << 40, size, t4),
    ]
}

fn times(t: [f64; 5]) -> [P; 5] {
    t.map(P::Float)
}

fn ok_times() -> [P; 5] {
    [1, 2, 3, 4, 5].map(|t| int(1_700_000_000_000_000 + t))
}

/// MemoryTracker stats of three ops, op 1's figure `mib`, with `extra` keys (a record's
/// `memtrack` key, or wrong ones).
fn stats(mib: P, names: [&str; 3], op_keys: [i128; 3], extra: Vec<(&str, P)>) -> P {
    let series = || {
        P::Dict(
            (0..3)
                .map(|i| {
                    let v = if i == 1 {
                        mib.clone()
                    } else {
                        P::Float(i as f64)
                    };
                    (int(op_keys[i]), P::Tuple(vec![s(names[i]), v]))
                })
                .collect(),
        )
    };
    let mut items = vec![
        ("memories_allocated", series()),
        ("memories_active", series()),
        ("memories_reserved", series()),
        (
            "markers",
            dict(vec![("fw_start", int(0)), ("fw_bw_boundary", int(1))]),
        ),
        ("num_alloc_retries", int(0)),
        ("op_index", int(3)),
    ];
    for (k, v) in extra {
        match items.iter_mut().find(|(key, _)| *key == k) {
            Some(item) => item.1 = v,
            None => items.push((k, v)),
        }
    }
    dict(items)
}

const NAMES: [&str; 3] = [
    "fc.forward.addmm_0",
    "fc.forward.relu_0",
    "fc.backward.addmm_0",
];

fn plain_stats(extra: Vec<(&str, P)>) -> P {
    stats(P::Float(1.0), NAMES, [0, 1, 2], extra)
}

fn gzip(text: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    z.write_all(text).unwrap();
    z.finish().unwrap()
}

/// A profiler trace of one `[memory]` event with `ts` (a JSON member, or nothing) and `bytes`.
fn memory_trace(ts: &str, bytes: &str, device: &str) -> Vec<u8> {
    format!(
        r#"{{"traceEvents": [{{"ph": "i", "name": "[memory]", {ts}"pid": 1, "tid": 1, "args": {{"Addr": 1, "Bytes": {bytes}, "Total Allocated": 512, "Total Reserved": 2097152, "Device Id": {device}, "Device Type": 1}}}}]}}"#
    )
    .into_bytes()
}

/// The corpus: (file name, bytes).
fn corpus() -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = Vec::new();
    let mut add = |name: &str, bytes: Vec<u8>| out.push((name.to_string(), bytes));
    let mib = 1i128 << 20;

    // sizes the file states
    for shift in [52, 56, 62] {
        let total = 1i128 << shift;
        let snap = snapshot(
            vec![segment(
                0,
                0,
                total,
                &[(mib, "active_allocated"), (total - mib, "inactive")],
            )],
            vec![vec![]],
        );
        add(&format!("segment_2_{shift}.pickle"), snap.pickle());
    }
    let most = (1i128 << 63) - 1;
    let past = snapshot(
        vec![segment(
            0,
            0,
            most,
            &[
                (mib, "active_allocated"),
                (most, "inactive"),
                (most, "inactive"),
            ],
        )],
        vec![vec![]],
    );
    add("blocks_past_2_64.pickle", past.pickle());
    let negative = snapshot(
        vec![segment(0, -4096, -(1 << 30), &[(-mib, "active_allocated")])],
        vec![vec![]],
    );
    add("negative_sizes.pickle", negative.pickle());
    add(
        "trace_2_62.pickle",
        snapshot(vec![], vec![whole_trace(1 << 62, ok_times())]).pickle(),
    );
    add(
        "trace_2_64.pickle",
        snapshot(vec![], vec![whole_trace(u64::MAX as i128, ok_times())]).pickle(),
    );
    // an integer of a million bytes as a segment's size
    let mut huge_int = b"\x80\x02}(".to_vec();
    s("segments").write(&mut huge_int);
    huge_int.extend_from_slice(b"]}(");
    s("total_size").write(&mut huge_int);
    huge_int.push(0x8b);
    huge_int.extend_from_slice(&1_000_000u32.to_le_bytes());
    huge_int.extend(std::iter::repeat_n(0x7f, 1_000_000));
    huge_int.extend_from_slice(b"uau.");
    add("int_of_a_million_bytes.pickle", huge_int);
    // lengths past the end of the file
    let mut long_string = b"\x80\x02}(X".to_vec();
    long_string.extend_from_slice(&u32::MAX.to_le_bytes());
    long_string.extend_from_slice(b"segments]u.");
    add("string_of_4_gib.pickle", long_string);
    let mut frame = b"\x80\x04\x95".to_vec();
    frame.extend_from_slice(&(1u64 << 62).to_le_bytes());
    frame.extend_from_slice(b"}.");
    add("frame_of_2_62.pickle", frame);

    // devices and ops numbered far apart
    let far_device = snapshot(
        vec![segment(
            1 << 62,
            0,
            2 * mib,
            &[(2 * mib, "active_allocated")],
        )],
        vec![vec![]],
    );
    add("device_2_62.pickle", far_device.pickle());
    let minus_device = snapshot(
        vec![segment(-1, 0, 2 * mib, &[(2 * mib, "active_allocated")])],
        vec![vec![]],
    );
    add("device_minus_1.pickle", minus_device.pickle());
    add(
        "ops_2_62_apart.pkl",
        stats(P::Float(1.0), NAMES, [0, 1 << 62, -(1 << 62)], vec![]).pickle(),
    );
    add(
        "op_index_2_62.pkl",
        plain_stats(vec![("op_index", int(1 << 62))]).pickle(),
    );
    add(
        "marker_2_62.pkl",
        plain_stats(vec![(
            "markers",
            dict(vec![
                ("fw_start", int(1 << 62)),
                ("fw_bw_boundary", int(-7)),
            ]),
        )])
        .pickle(),
    );
    add(
        "record_world_2_62.pkl",
        plain_stats(vec![(
            "memtrack",
            dict(vec![
                ("version", int(1)),
                ("backend", s("cuda")),
                ("rank", int(1 << 62)),
                ("world_size", int(1 << 62)),
                ("iteration_starts", P::List(vec![int(0), int(1 << 62)])),
                ("oom_op_index", int(1 << 62)),
                ("device", dict(vec![("total_bytes", int(1 << 62))])),
            ]),
        )])
        .pickle(),
    );

    // figures no allocator reports, times no clock gives
    for (name, v) in [
        ("e300", 1e300),
        ("inf", f64::INFINITY),
        ("nan", f64::NAN),
        ("negative", -5.0),
        ("2_63", 2f64.powi(63)),
    ] {
        add(
            &format!("stats_{name}.pkl"),
            stats(P::Float(v), NAMES, [0, 1, 2], vec![]).pickle(),
        );
    }
    add(
        "times_1e308.pickle",
        snapshot(
            vec![],
            vec![whole_trace(mib, times([1.0, 1e308, -1e308, 2.0, 3.0]))],
        )
        .pickle(),
    );
    add(
        "times_nan.pickle",
        snapshot(
            vec![],
            vec![whole_trace(
                mib,
                times([f64::NAN, f64::INFINITY, 1.0, f64::NEG_INFINITY, 2.0]),
            )],
        )
        .pickle(),
    );
    add(
        "times_text.pickle",
        snapshot(
            vec![],
            vec![whole_trace(
                mib,
                [s("abc"), P::None, int(1 << 62), int(-(1 << 62)), s("")],
            )],
        )
        .pickle(),
    );

    // the wrong type in each place
    add(
        "no_segments_no_traces.pickle",
        snapshot(vec![], vec![]).pickle(),
    );
    let wrong = |key: &str, v: P| {
        let mut items = vec![
            ("segments", P::List(vec![segment(0, 0, 2 * mib, &[])])),
            ("device_traces", P::List(vec![P::List(vec![])])),
        ];
        items.iter_mut().find(|(k, _)| *k == key).unwrap().1 = v;
        dict(items).pickle()
    };
    add("segments_a_string.pickle", wrong("segments", s("abc")));
    add(
        "segment_an_int.pickle",
        wrong("segments", P::List(vec![int(5)])),
    );
    add(
        "traces_of_strings.pickle",
        wrong("device_traces", P::List(vec![P::List(vec![s("x")])])),
    );
    add(
        "total_size_text.pickle",
        wrong(
            "segments",
            P::List(vec![dict(vec![
                ("device", int(0)),
                ("address", s("0x0")),
                ("total_size", s("big")),
                ("blocks", P::Dict(vec![])),
            ])]),
        ),
    );
    add(
        "event_fields_wrong.pickle",
        wrong(
            "device_traces",
            P::List(vec![P::List(vec![dict(vec![
                ("action", int(3)),
                ("addr", s("here")),
                ("size", P::Float(1.5)),
                ("frames", int(5)),
            ])])]),
        ),
    );
    add(
        "stats_series_a_list.pkl",
        plain_stats(vec![("memories_allocated", P::List(vec![int(1)]))]).pickle(),
    );
    add(
        "stats_value_text.pkl",
        stats(s("12 MiB"), NAMES, [0, 1, 2], vec![]).pickle(),
    );
    add(
        "record_key_text.pkl",
        plain_stats(vec![("memtrack", s("abc"))]).pickle(),
    );
    add(
        "op_names_with_escapes.pkl",
        stats(
            P::Float(3.0),
            ["fc.forward.\x1b[31mred_0", "fc\nforward\n_0", "\t\r\x07_0"],
            [0, 1, 2],
            vec![],
        )
        .pickle(),
    );

    // nesting and bombs
    let mut deep = b"\x80\x02".to_vec();
    deep.extend(std::iter::repeat_n(b']', 100_000));
    deep.extend(std::iter::repeat_n(b'a', 99_999));
    deep.push(b'.');
    add("deep.pickle", deep);
    for name in [
        "laughs_segments.pickle",
        "laughs_settings.pickle",
        "laughs_traces.pickle",
        "os_system.pkl",
        "fuzz_nan_values.pkl",
    ] {
        add(
            name,
            std::fs::read(fixture(&format!("pickle/{name}"))).unwrap(),
        );
    }

    // profiler traces
    for (name, ts, bytes, device) in [
        ("ts_inf", r#""ts": 1e400, "#, "512", "0"),
        ("ts_minus_inf", r#""ts": -1e400, "#, "512", "0"),
        ("ts_text", r#""ts": "abc", "#, "512", "0"),
        ("ts_null", r#""ts": null, "#, "512", "0"),
        ("ts_missing", "", "512", "0"),
        ("bytes_inf", r#""ts": 1, "#, "1e400", "0"),
        ("bytes_2_63", r#""ts": 1, "#, "-9223372036854775808", "0"),
        ("device_2_62", r#""ts": 1, "#, "512", "4611686018427387904"),
    ] {
        add(&format!("{name}.json"), memory_trace(ts, bytes, device));
    }
    let mut nested =
        br#"{"traceEvents": [{"ph": "X", "name": "op", "ts": 1, "dur": 1e300, "args": {"x": "#
            .to_vec();
    nested.extend(std::iter::repeat_n(b'[', 1_000_000));
    nested.extend(std::iter::repeat_n(b']', 1_000_000));
    nested.extend_from_slice(b"}}]}");
    add("nested_a_million.json", nested);
    add("white.json.gz", gzip(b"  \n\n   "));
    // 128 MiB of white space inside traceEvents, in concatenated members (about 130 KB): past
    // the gzip budget (64 MiB and 100 times the compressed size; tests/profiler_trace.rs
    // holds a 1 GiB one to it)
    let mut bomb = gzip(br#"{"traceEvents": ["#);
    let member = {
        use std::io::Write;
        let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        z.write_all(&vec![b' '; 1 << 20]).unwrap();
        z.finish().unwrap()
    };
    for _ in 0..128 {
        bomb.extend_from_slice(&member);
    }
    bomb.extend(gzip(b"]}"));
    add("bomb.json.gz", bomb);

    // names a terminal would act on, over a file refused and one read
    let two_62 = snapshot(
        vec![segment(0, 0, 1 << 62, &[(1 << 62, "inactive")])],
        vec![vec![]],
    );
    add("tab\tand \x1b[31mred.pickle", two_62.pickle());
    add("new\nline.pkl", plain_stats(vec![]).pickle());
    out
}

// ---- running the binary ----

/// Address space a run may map: far above what any run needs (threads' stacks and malloc
/// arenas are mapped, not used), far below what a figure from the file would ask.
const ADDRESS_SPACE: u64 = 4 << 30;
/// What a run may hold resident, and write.
const MAX_RSS_MIB: u64 = 100;
const MAX_WRITTEN: u64 = 4 << 20;
const LIMIT: Duration = Duration::from_secs(20);

struct Ran {
    code: Option<i32>,
    signal: Option<i32>,
    stderr: String,
    /// What it wrote to stdout, up to [`MAX_WRITTEN`] bytes.
    stdout: Vec<u8>,
    rss_mib: u64,
    written: u64,
    seconds: f64,
}

/// Run memtrack with `args` in `dir` (empty; what it writes stays there), measured.
// the child is reaped by `wait4`, which std's `Child::wait` would not let us give a rusage
#[allow(clippy::zombie_processes)]
fn run_measured(args: &[OsString], dir: &Path) -> Ran {
    let out_path = dir.join("stdout");
    let err_path = dir.join("stderr");
    let mut cmd = memtrack_process();
    cmd.args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap());
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: ADDRESS_SPACE,
                rlim_max: ADDRESS_SPACE,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let started = Instant::now();
    let mut child = cmd.spawn().unwrap();
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: a plain C struct, all zeros is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let mut killed = false;
    loop {
        // SAFETY: pid is our child, not yet reaped; status and usage are ours to write.
        let r = unsafe {
            let flags = if killed { 0 } else { libc::WNOHANG };
            libc::wait4(pid, &mut status, flags, &mut usage)
        };
        if r == pid {
            break;
        }
        assert!(r == 0, "wait4: {}", std::io::Error::last_os_error());
        if started.elapsed() > LIMIT {
            let _ = child.kill();
            killed = true;
        } else {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let written = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name() != "stderr")
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum();
    let (code, signal) = if libc::WIFEXITED(status) {
        (Some(libc::WEXITSTATUS(status)), None)
    } else {
        (None, Some(libc::WTERMSIG(status)))
    };
    Ran {
        code,
        signal,
        stderr: String::from_utf8_lossy(&std::fs::read(&err_path).unwrap()).into_owned(),
        stdout: {
            use std::io::Read;
            let mut bytes = Vec::new();
            let file = std::fs::File::open(&out_path).unwrap();
            file.take(MAX_WRITTEN).read_to_end(&mut bytes).unwrap();
            bytes
        },
        rss_mib: usage.ru_maxrss as u64 / 1024,
        written,
        seconds,
    }
}

/// Each command that reads a file, with its output options, over `file`.
fn commands(file: &Path) -> Vec<Vec<OsString>> {
    let f = file.as_os_str();
    let each: &[&[&str]] = &[
        &["summary", "F"],
        &["summary", "F", "--format", "json"],
        &["modules", "F"],
        &["top", "F"],
        &["top", "F", "--group-by", "category"],
        &["plot", "F", "-o", "plot.svg"],
        &["plot", "F", "--stacked", "-o", "stacked.html"],
        &["trace", "F"],
        &["segments", "F"],
        &["segments", "F", "-o", "segments.svg"],
        &["simulate", "F"],
        &["diff", "F", "F"],
        &["export", "F", "-o", "export.json"],
        &["allocator", "F"],
        &["cycles", "F"],
    ];
    each.iter()
        .map(|args| {
            args.iter()
                .map(|&a| {
                    if a == "F" {
                        f.to_owned()
                    } else {
                        OsString::from(a)
                    }
                })
                .collect()
        })
        .collect()
}

/// What is wrong with a run, if anything.
fn judge(name: &str, ran: &Ran) -> Option<String> {
    if ran.signal.is_some() || !matches!(ran.code, Some(0 | 2)) {
        return Some(format!("exit {:?}, signal {:?}", ran.code, ran.signal));
    }
    if ran.stderr.contains("panicked") {
        return Some("panicked".into());
    }
    if ran.rss_mib >= MAX_RSS_MIB {
        return Some(format!("peak RSS {} MiB", ran.rss_mib));
    }
    if ran.written >= MAX_WRITTEN {
        return Some(format!("wrote {} bytes", ran.written));
    }
    let plain = !name.chars().any(|c| c.is_control());
    if plain {
        if ran.code == Some(2) && !ran.stderr.contains(name) {
            return Some("the refusal does not name the file".into());
        }
    } else {
        // the name's controls reach no terminal: quoted as the shell would write it
        let quoted = memtrack::quote::quote(OsStr::new(name)).into_owned();
        let shown = quoted.trim_start_matches('\'');
        if ran.stderr.contains('\x1b') || ran.stderr.contains('\t') {
            return Some("a control character of the file's name reached stderr".into());
        }
        // nor through a report's title
        let raw = name.as_bytes();
        if ran.stdout.contains(&0x1b) || ran.stdout.windows(raw.len()).any(|w| w == raw) {
            return Some("the file's name reached stdout raw".into());
        }
        if ran.code == Some(2) && !ran.stderr.contains(shown) {
            return Some(format!("the refusal does not show the name as {quoted}"));
        }
    }
    None
}

#[test]
fn every_command_over_the_hostile_corpus_ends_in_bounded_memory_and_output() {
    let dir = tempfile::tempdir().unwrap();
    let inputs = dir.path().join("in");
    std::fs::create_dir(&inputs).unwrap();
    let mut jobs: Vec<(String, Vec<OsString>)> = Vec::new();
    for (name, bytes) in corpus() {
        let file: PathBuf = inputs.join(&name);
        std::fs::write(&file, bytes).unwrap();
        for args in commands(&file) {
            jobs.push((name.clone(), args));
        }
    }
    let next = AtomicUsize::new(0);
    let said = Mutex::new(Vec::new());
    let slowest = Mutex::new((0.0f64, String::new()));
    let largest = Mutex::new((0u64, String::new()));
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some((name, args)) = jobs.get(i) else {
                    break;
                };
                let here = dir.path().join(format!("run{i}"));
                std::fs::create_dir(&here).unwrap();
                let ran = run_measured(args, &here);
                let shown = format!("memtrack {}", quoted_args(args));
                if let Some(wrong) = judge(name, &ran) {
                    said.lock().unwrap().push(format!(
                        "{shown}: {wrong} ({} MiB, {:.1} s): {}",
                        ran.rss_mib, ran.seconds, ran.stderr
                    ));
                }
                let mut s = slowest.lock().unwrap();
                if ran.seconds > s.0 {
                    *s = (ran.seconds, shown.clone());
                }
                let mut l = largest.lock().unwrap();
                if ran.rss_mib > l.0 {
                    *l = (ran.rss_mib, shown);
                }
                let _ = std::fs::remove_dir_all(&here);
            });
        }
    });
    let said = said.into_inner().unwrap();
    assert!(said.is_empty(), "{}", said.join("\n"));
    let (seconds, slow) = slowest.into_inner().unwrap();
    let (mib, large) = largest.into_inner().unwrap();
    eprintln!(
        "{} runs over {} files in {:.1} s; slowest {seconds:.2} s ({slow}); most memory {mib} MiB ({large})",
        jobs.len(),
        jobs.len() / commands(Path::new("F")).len(),
        started.elapsed().as_secs_f64()
    );
    assert!(jobs.len() >= 50 * 15, "{} runs", jobs.len());
}

fn quoted_args(args: &[OsString]) -> String {
    let quoted: Vec<String> = args
        .iter()
        .map(|a| match Path::new(a).file_name() {
            Some(n) if a.len() > n.len() => memtrack::quote::quote(n).into_owned(),
            _ => memtrack::quote::quote(a).into_owned(),
        })
        .collect();
    quoted.join(" ")
}

/// The 373-byte snapshot of one 2^62-byte segment: `segments` refuses it or draws a bounded
/// map, without an allocation the size of the segment (issue 59's floor: 50 MB).
#[test]
fn segments_of_a_2_62_byte_segment_in_a_small_file_stays_small() {
    let dir = tempfile::tempdir().unwrap();
    let (name, bytes) = corpus()
        .into_iter()
        .find(|(n, _)| n == "segment_2_62.pickle")
        .unwrap();
    assert!(bytes.len() < 1000, "{} bytes", bytes.len());
    let file = dir.path().join(&name);
    std::fs::write(&file, bytes).unwrap();
    let here = dir.path().join("run");
    std::fs::create_dir(&here).unwrap();
    let ran = run_measured(&["segments".into(), file.into_os_string()], &here);
    assert!(
        matches!(ran.code, Some(0 | 2)),
        "{:?}: {}",
        ran.code,
        ran.stderr
    );
    assert!(ran.rss_mib < 50, "{} MiB", ran.rss_mib);
    assert!(ran.written < 1 << 20, "{} bytes", ran.written);
}

/// `view` of each hostile file: refused (exit 2, naming the file), or serving its URL, in
/// little memory.
#[test]
fn view_of_the_hostile_corpus_refuses_or_serves() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let mut said = Vec::new();
    for (name, bytes) in corpus() {
        let file = dir.path().join(&name);
        std::fs::write(&file, bytes).unwrap();
        let mut child = memtrack_process()
            .args(["view", "--no-browser", "--port", "0"])
            .arg(&file)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let status_file = format!("/proc/{}/status", child.id());
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let url = rx.recv_timeout(LIMIT);
        let hwm_kib = std::fs::read_to_string(&status_file).ok().and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        });
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        let shown = memtrack::quote::quote(OsStr::new(&name)).into_owned();
        let shown = shown.trim_start_matches('\'');
        match url {
            Ok(line) if line.starts_with("http://") => {
                if hwm_kib.unwrap_or(0) >= MAX_RSS_MIB << 10 {
                    said.push(format!("{shown}: served in {hwm_kib:?} KiB"));
                }
            }
            Ok(_) => {
                if !err.contains(shown) || err.contains("panicked") || out.status.code() != Some(2)
                {
                    said.push(format!("{shown}: {:?}: {err}", out.status));
                }
            }
            Err(_) => said.push(format!("{shown}: neither served nor refused: {err}")),
        }
    }
    assert!(said.is_empty(), "{}", said.join("\n"));
}
