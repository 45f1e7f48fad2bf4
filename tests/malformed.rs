//! Bad input gets a clear error naming the file, exit code 2, and never a panic.

mod common;

use common::{fixture, memtrack, write_temp};
use predicates::prelude::*;

fn fails_cleanly(path: &std::path::Path, expect: &str) {
    let shown = path.display().to_string();
    memtrack()
        .args(["summary"])
        .arg(path)
        .assert()
        .code(2)
        .stderr(predicate::str::contains(shown))
        .stderr(predicate::str::contains(expect))
        .stderr(predicate::str::contains("panicked").not());
}

#[test]
fn empty_file() {
    let dir = tempfile::tempdir().unwrap();
    fails_cleanly(&write_temp(dir.path(), "empty.pkl", b""), "empty file");
}

#[test]
fn missing_file() {
    fails_cleanly(std::path::Path::new("/nonexistent/run.pkl"), "cannot read");
}

#[test]
fn json_and_text_are_not_pickles() {
    let dir = tempfile::tempdir().unwrap();
    fails_cleanly(
        &write_temp(dir.path(), "stats.json", b"{\"memories_allocated\": {}}"),
        // JSON is read as a torch.profiler trace, which names what it lacks
        "not a Chrome trace: it has no `traceEvents` (its keys: memories_allocated)",
    );
    fails_cleanly(
        &write_temp(dir.path(), "notes.txt", b"hello world\n"),
        "it looks like text",
    );
    fails_cleanly(&write_temp(dir.path(), "x.gz", b"\x1f\x8b\x08\x00"), "gzip");
    fails_cleanly(
        &write_temp(dir.path(), "model.pt", b"PK\x03\x04rest"),
        "zip archive",
    );
}

#[test]
fn wrong_magic_and_unknown_protocol() {
    let dir = tempfile::tempdir().unwrap();
    fails_cleanly(
        &write_temp(dir.path(), "p9.pkl", b"\x80\x09N."),
        "unsupported pickle protocol 9",
    );
    fails_cleanly(
        &write_temp(dir.path(), "junk.pkl", b"\xfe\xfe\xfe"),
        "not a pickle",
    );
    // APPENDS onto an int: the message reads as English ("an int", not "a int")
    fails_cleanly(
        &write_temp(dir.path(), "appends.pkl", b"\x80\x04K\x05(K\x01e."),
        "APPENDS on an int where a list was expected",
    );
}

#[test]
fn a_pickle_that_calls_os_system_is_refused_not_run() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    // if anything executed this, the marker file would appear
    let cmd = format!("touch {}", marker.display());
    let mut bytes = b"\x80\x02cposix\nsystem\nq\x00X".to_vec();
    bytes.extend((cmd.len() as u32).to_le_bytes());
    bytes.extend(cmd.as_bytes());
    bytes.extend(b"\x85R.");
    let p = write_temp(dir.path(), "evil.pkl", &bytes);
    fails_cleanly(
        &p,
        "built by calling posix.system; memtrack never runs code from a file",
    );
    fails_cleanly(&fixture("pickle/os_system.pkl"), "posix.system");
    assert!(!marker.exists());
}

#[test]
fn deeply_nested_lists_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    // 100k nested lists: EMPTY_LIST x N, then APPEND x (N-1)
    let n = 100_000;
    let mut bytes = vec![0x80, 2];
    bytes.extend(std::iter::repeat_n(b']', n));
    bytes.extend(std::iter::repeat_n(b'a', n - 1));
    bytes.push(b'.');
    fails_cleanly(
        &write_temp(dir.path(), "deep.pkl", &bytes),
        "nested more than 1000 deep",
    );
    // the same through MARK ... LIST
    let mut bytes = vec![0x80, 2];
    bytes.extend(std::iter::repeat_n(b'(', n));
    bytes.extend(std::iter::repeat_n(b'l', n));
    bytes.push(b'.');
    fails_cleanly(
        &write_temp(dir.path(), "deep2.pkl", &bytes),
        "nested more than 1000 deep",
    );
}

#[test]
fn huge_declared_sizes_are_refused_before_allocating() {
    let dir = tempfile::tempdir().unwrap();
    // BINUNICODE8 claiming 2^62 bytes; LONG_BINPUT at id 2^32-1; FRAME of 2^60
    fails_cleanly(
        &write_temp(
            dir.path(),
            "big_str.pkl",
            b"\x80\x04\x8d\x00\x00\x00\x00\x00\x00\x00\x40",
        ),
        "declared length",
    );
    fails_cleanly(
        &write_temp(
            dir.path(),
            "big_frame.pkl",
            b"\x80\x04\x95\x00\x00\x00\x00\x00\x00\x00\x10N.",
        ),
        "FRAME",
    );
    fails_cleanly(
        &write_temp(
            dir.path(),
            "sparse_memo.pkl",
            b"\x80\x02Nr\xff\xff\xff\xff.",
        ),
        "a pickle whose top-level value is a None",
    );
}

#[test]
fn wrong_shapes_name_the_key() {
    let dir = tempfile::tempdir().unwrap();
    // {'memories_allocated': [1]}
    let p = write_temp(
        dir.path(),
        "shape.pkl",
        b"\x80\x02}X\x12\x00\x00\x00memories_allocated]K\x01as.",
    );
    fails_cleanly(&p, "memories_allocated: expected a dict, found list");
    // {'memories_allocated': {0: 5}}
    let p = write_temp(
        dir.path(),
        "entry.pkl",
        b"\x80\x02}X\x12\x00\x00\x00memories_allocated}K\x00K\x05ss.",
    );
    fails_cleanly(
        &p,
        "memories_allocated[0]: expected (op name, MiB) tuple, found int",
    );
    // a dict of something else
    let p = write_temp(
        dir.path(),
        "other.pkl",
        b"\x80\x02}X\x03\x00\x00\x00fooK\x01s.",
    );
    fails_cleanly(&p, "keys ['foo']");
}

#[test]
fn truncated_files_fail_cleanly_at_every_offset() {
    // every prefix through the library (fast), a sample through the binary (the whole path)
    let data = std::fs::read(fixture("tracker/memory_tracker_cpu_torch2.15.0.pkl")).unwrap();
    for k in 0..data.len() {
        let prefix = &data[..k];
        let Err(e) = memtrack::pickle::parse(prefix) else {
            panic!("prefix of {k} bytes parsed");
        };
        assert!(
            k == 0 || e.cut_short,
            "prefix of {k} bytes: {e} is not called cut short"
        );
        assert!(memtrack::formats::tracker_stream::read(prefix, &mut ()).is_none());
    }
    let dir = tempfile::tempdir().unwrap();
    for k in (0..data.len()).step_by(97) {
        let p = write_temp(dir.path(), &format!("cut{k}.pkl"), &data[..k]);
        let expect = if k == 0 { "empty file" } else { "cut short" };
        fails_cleanly(&p, expect);
    }
}

#[test]
fn output_errors_keep_existing_files() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("keep.svg");
    std::fs::write(&out, "previous").unwrap();
    let bad = write_temp(dir.path(), "bad.pkl", b"nonsense");
    memtrack()
        .args(["plot"])
        .arg(&bad)
        .arg("-o")
        .arg(&out)
        .assert()
        .code(2);
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "previous");
    memtrack()
        .args([
            "summary",
            fixture("tracker/synthetic_2000_ops.pkl").to_str().unwrap(),
            "-o",
            "/nonexistent-dir/x.txt",
        ])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "/nonexistent-dir/x.txt: cannot write",
        ));
}

/// What a careless user hands memtrack gets named in plain words: no opcode or memo jargon,
/// "not a pickle" said once.
#[test]
fn directories_text_and_images_are_named_plainly() {
    let dir = tempfile::tempdir().unwrap();
    let png = write_temp(dir.path(), "plot.png", b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR");
    let text = write_temp(dir.path(), "notes.txt", b"hello (world) g\n");
    let json = write_temp(dir.path(), "x.json", b"[1, 2]");
    let empty_dir = dir.path().join("empty");
    std::fs::create_dir(&empty_dir).unwrap();
    for (path, says) in [
        // a folder is read as a folder of torch.profiler traces (this one holds none)
        (empty_dir, "a folder without traces"),
        (png, "looks like a PNG image"),
        (text, "looks like text"),
        (json, "not a Chrome trace: trace event 0 is `1"),
    ] {
        let out = memtrack().arg("summary").arg(&path).output().unwrap();
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{}: {err}", path.display());
        for jargon in ["memo key", "opcode", "No such device", "at byte"] {
            assert!(!err.contains(jargon), "{}: {err}", path.display());
        }
        assert!(err.matches("not a pickle").count() <= 1, "{err}");
    }
}

#[test]
fn files_that_expand_through_shared_references_are_refused_not_expanded() {
    // each would expand to 10^6..10^8 values from at most 62 KB (fixtures/pickle/make_pickles.py);
    // real captures, which share strings and frames through the memo too, are read by every
    // other test
    for name in [
        "laughs_segments.pickle",
        "laughs_settings.pickle",
        "laughs_traces.pickle",
    ] {
        let path = fixture(&format!("pickle/{name}"));
        for command in ["summary", "export", "segments", "top", "trace"] {
            if command == "segments" && name == "laughs_traces.pickle" {
                continue; // `segments` skips the traces unread
            }
            memtrack()
                .arg(command)
                .arg(&path)
                .assert()
                .code(2)
                .stderr(predicate::str::contains(name))
                .stderr(predicate::str::contains(
                    "expands through shared references",
                ))
                .stderr(predicate::str::contains("panicked").not());
        }
    }
}

/// A snapshot with one segment of `total_size` written as LONG1 `le` (little-endian two's
/// complement, as Python writes it), by hand.
fn snapshot_with_size(le: &[u8]) -> Vec<u8> {
    let key = |s: &str| {
        let mut k = vec![b'X'];
        k.extend_from_slice(&(s.len() as u32).to_le_bytes());
        k.extend_from_slice(s.as_bytes());
        k
    };
    let mut p = b"\x80\x02}(".to_vec();
    p.extend(key("segments"));
    p.extend_from_slice(b"]}(");
    for (name, value) in [("device", 0u8), ("address", 0), ("allocated_size", 0)] {
        p.extend(key(name));
        p.extend_from_slice(&[b'K', value]);
    }
    p.extend(key("total_size"));
    p.extend_from_slice(&[0x8a, le.len() as u8]);
    p.extend_from_slice(le);
    p.extend(key("blocks"));
    p.extend_from_slice(b"]ua");
    p.extend(key("device_traces"));
    p.extend_from_slice(b"]]au.");
    p
}

#[test]
fn sizes_that_fit_in_64_bits_are_not_called_wider() {
    let dir = tempfile::tempdir().unwrap();
    // 2^63 and 2^64 - 16 take 9 bytes as LONG1 (a sign byte), and fit in a u64
    for (name, le, says) in [
        (
            "2_63",
            &b"\0\0\0\0\0\0\0\x80\0"[..],
            "9223372036854775808, where a size",
        ),
        (
            "2_64_16",
            b"\xf0\xff\xff\xff\xff\xff\xff\xff\0",
            "18446744073709551600, where a size",
        ),
        ("2_64", b"\0\0\0\0\0\0\0\0\x01", "wider than 64 bits"),
    ] {
        let p = write_temp(
            dir.path(),
            &format!("{name}.pickle"),
            &snapshot_with_size(le),
        );
        fails_cleanly(&p, says);
        fails_cleanly(&p, "total_size");
    }
    // just below 2^63 is read
    let p = write_temp(
        dir.path(),
        "below.pickle",
        &snapshot_with_size(b"\xff\xff\xff\xff\xff\xff\xff\x7f"),
    );
    memtrack().args(["summary"]).arg(&p).assert().success();
}

/// `segments` drew a character per 20 MiB of every segment: one segment stated as 2^52 bytes
/// (a file of 300 bytes) took 24.7 s and 2.5 GB, and 2^56 or 2^62 aborted on a 27 GB
/// allocation. A segment past 320 GiB is drawn in at most 16,384 characters, a coarser page.
#[test]
fn a_segment_stated_past_any_device_is_drawn_in_a_bounded_map() {
    let dir = tempfile::tempdir().unwrap();
    for shift in [52u32, 56, 62] {
        let le = (1u64 << shift).to_le_bytes();
        let p = write_temp(
            dir.path(),
            &format!("2_{shift}.pickle"),
            &snapshot_with_size(&le),
        );
        let path = p.to_str().unwrap();
        let text = common::stdout(&["segments", path]);
        assert!(text.len() < 100_000, "2^{shift}: {} bytes", text.len());
        assert!(text.contains("segment 0's map: 1 char = "), "{text}");
        let j = common::json_out(&["segments", path, "--format", "json"]);
        let row = &j["segments"][0];
        let page = row["map_page_size"].as_u64().unwrap();
        assert_eq!(page % (20 << 20), 0);
        let chars = row["map"].as_str().unwrap().len() as u64;
        assert!(chars <= 16_384 && chars * page >= 1 << shift, "{row}");
        let csv = common::stdout(&["segments", path, "--format", "csv"]);
        assert!(csv.lines().next().unwrap().ends_with(",map,map_page_size"));
        assert!(csv.lines().nth(1).unwrap().ends_with(&format!(",{page}")));
        let svg = dir.path().join(format!("2_{shift}.svg"));
        memtrack()
            .args(["segments", path, "-o"])
            .arg(&svg)
            .assert()
            .success();
        assert!(std::fs::metadata(&svg).unwrap().len() < 100_000);
    }
    // a real segment keeps the map of `_memory_viz`: 20 MiB a character, no page of its own
    let j = common::json_out(&[
        "segments",
        fixture("snapshots/cs336_medium_512_training.pickle")
            .to_str()
            .unwrap(),
        "--format",
        "json",
    ]);
    let rows = j["segments"].as_array().unwrap();
    assert!(rows.iter().all(|r| r.get("map_page_size").is_none()));
}

/// MemoryTracker stats whose MiB figures no allocator reports: printed as a 300-digit GiB
/// figure, `inf GiB` or `9007199254740992.00 GiB`, a NaN skipped and a negative accepted
/// before. Refused by both readers (the stream reader leaves them to the generic one),
/// naming the series, the op and the figure.
#[test]
fn stats_figures_no_allocator_reports_are_refused_naming_the_op() {
    use memtrack::formats::{tracker, tracker_stream};
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(fixture("tracker/synthetic_2000_ops.pkl")).unwrap();
    let good = tracker_stream::read(&bytes, &mut ()).unwrap();
    let op = good.names.get(7).to_string();
    let mib = 1024.0 * 1024.0;
    for (name, value, says) in [
        ("e300", 1e300 * mib, "1e300 MiB, which no allocator reports"),
        ("inf", f64::INFINITY, "inf MiB, which no allocator reports"),
        ("nan", f64::NAN, "NaN, not a number of MiB"),
        ("negative", -5.0 * mib, "-5 MiB, which no allocator reports"),
        (
            "2_63",
            2f64.powi(63) * mib,
            "9.223372036854776e18 MiB, which no allocator reports",
        ),
    ] {
        for series in ["memories_allocated", "memories_reserved"] {
            let mut stats = tracker_stream::read(&bytes, &mut ()).unwrap();
            match series {
                "memories_allocated" => stats.allocated[7] = value,
                _ => stats.reserved[7] = value,
            }
            let pickle = tracker::to_pickle_bytes(&stats);
            assert!(tracker_stream::read(&pickle, &mut ()).is_none(), "{name}");
            let path = write_temp(dir.path(), &format!("{name}_{series}.pkl"), &pickle);
            for command in ["summary", "plot", "export", "diff"] {
                let mut cmd = memtrack();
                cmd.arg(command).arg(&path);
                match command {
                    "plot" => cmd.arg("-o").arg(dir.path().join("p.svg")),
                    "diff" => cmd.arg(fixture("tracker/synthetic_2000_ops.pkl")),
                    _ => &mut cmd,
                };
                cmd.assert()
                    .code(2)
                    .stderr(predicate::str::contains(format!("{name}_{series}.pkl")))
                    .stderr(predicate::str::contains(format!(
                        "{series}[7] (op \"{op}\"): {says}"
                    )))
                    .stderr(predicate::str::contains("panicked").not());
            }
        }
    }
    // the largest figure an allocator may report (1 PiB) is read, and -0.0 is 0
    let mut stats = tracker_stream::read(&bytes, &mut ()).unwrap();
    stats.allocated[7] = (1u64 << 50) as f64;
    stats.allocated[8] = -0.0;
    let path = write_temp(dir.path(), "pib.pkl", &tracker::to_pickle_bytes(&stats));
    memtrack().arg("summary").arg(&path).assert().success();
}

/// A file named with a tab, an escape sequence and a newline was echoed raw: the escape
/// recoloured the terminal and the newline forged a second `memtrack:` line. Names are
/// quoted as coreutils quotes them, what a terminal acts on as `$'…'` escapes.
#[test]
fn names_in_messages_are_quoted_and_escaped() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let name = std::ffi::OsStr::from_bytes(b"bad\t\x1b[31m.pkl\nmemtrack: forged\xff");
    let path = dir.path().join(name);
    std::fs::write(&path, b"not a pickle").unwrap();
    // the folder's name is quoted with it: `'/tmp/.tmpXXXX/bad'$'\t…`
    let shown = r"/bad'$'\t\033''[31m.pkl'$'\n''memtrack: forged'$'\377'";
    let out = memtrack().arg("summary").arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains(shown), "{err}");
    assert!(!err.contains('\x1b') && err.lines().count() == 1, "{err:?}");
    // the output's name too, and a plain name stays as it is
    let out = memtrack()
        .arg("summary")
        .arg(fixture("tracker/synthetic_2000_ops.pkl"))
        .arg("-o")
        .arg(dir.path().join(name).join("x.txt"))
        .output()
        .unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains(&format!("{shown}'/x.txt': cannot write")),
        "{err}"
    );
    assert!(!err.contains('\x1b') && err.lines().count() == 1, "{err:?}");
    let out = memtrack()
        .args(["summary", "/nonexistent/run.pkl"])
        .output()
        .unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.starts_with("memtrack: /nonexistent/run.pkl: "), "{err}");
}
