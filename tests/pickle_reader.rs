//! The pickle reader over files Python wrote in every protocol (fixtures/pickle/make_pickles.py)
//! and over real PyTorch files.

mod common;

use common::fixture;
use memtrack::pickle::{self, Document, Value, View};

fn load(name: &str) -> Document {
    pickle::read_file(&fixture(name), &mut ()).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn get(doc: &Document, key: &str) -> Value {
    doc.as_dict(doc.root())
        .unwrap()
        .get(key)
        .unwrap_or_else(|| panic!("no key {key}"))
}

fn ints(doc: &Document, v: Value) -> Vec<i64> {
    doc.as_seq(v)
        .or_else(|| match doc.view(v) {
            View::Set(s) => Some(s),
            _ => None,
        })
        .unwrap()
        .iter()
        .map(|&x| doc.as_int(x).unwrap())
        .collect()
}

#[test]
fn every_protocol_decodes_every_value_kind() {
    for proto in 0..=5 {
        let doc = load(&format!("pickle/values_p{proto}.pkl"));
        let d = &doc;
        assert!(matches!(d.view(get(d, "none")), View::None), "p{proto}");
        assert_eq!(d.as_bool(get(d, "true")), Some(true));
        assert_eq!(d.as_bool(get(d, "false")), Some(false));
        assert_eq!(d.as_int(get(d, "small")), Some(7));
        assert_eq!(d.as_int(get(d, "neg")), Some(-5));
        assert_eq!(d.as_int(get(d, "i32")), Some(2i64.pow(31) - 1));
        assert_eq!(d.as_int(get(d, "i64")), Some(-(2i64.pow(62))));
        assert_eq!(
            d.as_f64(get(d, "big")),
            Some(2f64.powi(100)),
            "p{proto} big int"
        );
        assert_eq!(d.as_f64(get(d, "bigneg")), Some(-(2f64.powi(70))));
        assert_eq!(d.as_f64(get(d, "float")), Some(1.5));
        assert_eq!(d.as_f64(get(d, "inf")), Some(f64::INFINITY));
        assert_eq!(d.as_str(get(d, "str")), Some("héllo ✓"), "p{proto}");
        assert_eq!(d.as_str(get(d, "empty")), Some(""));
        match d.view(get(d, "bytes")) {
            View::Bytes(b) => assert_eq!(b, b"\x00\x01\xff"),
            other => panic!("p{proto}: bytes read as {other:?}"),
        }
        assert_eq!(ints(d, get(d, "list")), vec![1, 2, 3]);
        let t = d.as_seq(get(d, "tuple")).unwrap();
        assert_eq!(
            (d.as_int(t[0]), d.as_str(t[1]), d.as_f64(t[2])),
            (Some(1), Some("a"), Some(2.5))
        );
        assert_eq!(ints(d, get(d, "tuple1")), vec![9]);
        let nested = d.as_dict(get(d, "nested")).unwrap();
        let a = d.as_seq(nested.get("a").unwrap()).unwrap();
        assert!(d.is_none(d.as_dict(a[1]).unwrap().get("b").unwrap()));
        let mut set = ints(d, get(d, "set"));
        set.sort();
        assert_eq!(set, vec![1, 2], "p{proto} set");
        assert_eq!(ints(d, get(d, "frozenset")), vec![3]);
        // defaultdict and OrderedDict are plain dicts
        assert_eq!(
            d.as_dict(get(d, "dd"))
                .unwrap()
                .get("x")
                .and_then(|v| d.as_int(v)),
            Some(1)
        );
        assert_eq!(
            d.as_dict(get(d, "od"))
                .unwrap()
                .get("k")
                .and_then(|v| d.as_str(v)),
            Some("v")
        );
    }
}

#[test]
fn objects_shared_through_the_memo_stay_shared() {
    for proto in 0..=5 {
        let doc = load(&format!("pickle/values_p{proto}.pkl"));
        let shared = doc.as_seq(get(&doc, "shared")).unwrap();
        assert_eq!(
            shared[0], shared[1],
            "p{proto}: one frame dict, referenced twice"
        );
        assert_eq!(
            doc.as_dict(shared[0])
                .unwrap()
                .get("line")
                .and_then(|v| doc.as_int(v)),
            Some(7)
        );
    }
}

#[test]
fn globals_are_recorded_never_called() {
    let doc = load("pickle/os_system.pkl");
    let View::Object(o) = doc.view(doc.root()) else {
        panic!("an opaque object")
    };
    assert!(matches!(
        doc.view(o.callable),
        View::Global {
            module: "posix",
            name: "system"
        }
    ));
    let args = doc.as_seq(o.args).unwrap();
    assert_eq!(
        doc.as_str(args[0]),
        Some("echo memtrack-must-never-run-this")
    );
}

#[test]
fn real_snapshots_share_their_frames() {
    // every _dump_snapshot() file shares frame lists through the memo (why serde-pickle fails)
    let doc = load("snapshots/cs336_small_mem_snapshot.pickle");
    let traces = doc.as_seq(get(&doc, "device_traces")).unwrap();
    let events = doc.as_seq(traces[0]).unwrap();
    assert_eq!(events.len(), 97);
    let frames: Vec<Value> = events
        .iter()
        .filter_map(|e| doc.as_dict(*e).and_then(|d| d.get("frames")))
        .collect();
    let distinct: std::collections::HashSet<Value> = frames.iter().copied().collect();
    assert!(
        distinct.len() < frames.len(),
        "some events share one frame list"
    );
}

#[test]
fn every_prefix_of_every_fixture_errors_or_parses_without_panicking() {
    for name in [
        "pickle/values_p0.pkl",
        "pickle/values_p2.pkl",
        "pickle/values_p5.pkl",
    ] {
        let data = std::fs::read(fixture(name)).unwrap();
        for k in 0..data.len() {
            let r = pickle::parse(&data[..k]);
            assert!(r.is_err(), "{name}: a {k}-byte prefix parsed");
        }
        // flipping any one byte gives a value or an error, never a panic
        for k in 0..data.len() {
            let mut bad = data.clone();
            bad[k] ^= 0x5a;
            let _ = pickle::parse(&bad);
        }
    }
}
