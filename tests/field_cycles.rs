//! `record --cycles` finds reference cycles holding tensors with the right bytes, and
//! `cycles` lists them and draws them as SVG (well-formed XML), DOT (checked against DOT's
//! grammar) and self-contained HTML.

mod common;

use std::path::Path;

use serde_json::Value;

fn memtrack() -> std::process::Command {
    common::memtrack_process()
}

fn cycles_json(file: &Path) -> Value {
    let o = memtrack()
        .args(["cycles", "--format", "json"])
        .arg(file)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

fn objects(steps: &Value) -> Vec<String> {
    steps
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["object"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn record_cycles_finds_them_with_their_bytes_and_draws_them() {
    let Some(py) = common::python_with_torch() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (code, err) = common::record(
        dir.path(),
        "c.pkl",
        &["--cycles", "--backend", "cpu"],
        &py,
        &[&common::script("cycles.py")],
    );
    assert_eq!(code, 0, "{err}");
    let file = dir.path().join("c.pkl");
    let j = cycles_json(&file);
    let cycles = j["cycles"].as_array().unwrap();
    let summary: Vec<(i64, u64, u64)> = cycles
        .iter()
        .map(|c| {
            (
                c["bytes"].as_i64().unwrap(),
                c["tensors"].as_u64().unwrap(),
                c["op_index"].as_u64().unwrap(),
            )
        })
        .collect();
    // the frame cycle holds its 2 MiB local and, through f_back, the caller's frame with the
    // self-containing list and its 4000-byte tensor; then the object; then the closure.
    // All freed by the gc.collect() after six ops: zeros, empty, zeros, zeros, ones, add.
    assert_eq!(
        summary,
        vec![
            (2 * 1024 * 1024 + 4000, 2, 6),
            (1024 * 1024, 1, 6),
            (40_000, 1, 6)
        ],
        "{j:#}"
    );
    let holder = &cycles[1];
    assert_eq!(objects(&holder["cycle"]), ["Holder", "Holder"]);
    assert_eq!(holder["cycle"][0]["reference"], ".me");
    let path = &holder["tensor_paths"][0];
    assert_eq!(path["bytes"], 1024 * 1024);
    assert_eq!(
        objects(&path["path"]),
        ["Holder", "Tensor float32[262144] cpu"]
    );
    let frame = &cycles[0];
    let loop_objects = objects(&frame["cycle"]);
    assert!(
        loop_objects[0].starts_with("frame failing_step cycles.py:")
            && loop_objects.contains(&"ValueError".to_string()),
        "{loop_objects:?}"
    );
    let refs: Vec<&str> = frame["cycle"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["reference"].as_str())
        .collect();
    assert_eq!(refs, ["local error", "__traceback__", "tb_frame"]);
    let closure = &cycles[2];
    assert!(objects(&closure["cycle"])
        .iter()
        .any(|o| o == "function closure.<locals>.step"));

    // the listing
    let o = memtrack().arg("cycles").arg(&file).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("3 reference cycles held tensors"), "{text}");
    assert!(text.contains("Holder —.me→ Holder"), "{text}");

    // drawings
    for ext in ["svg", "png", "dot", "html"] {
        let out = dir.path().join(format!("c.{ext}"));
        let o = memtrack()
            .arg("cycles")
            .arg(&file)
            .arg("-o")
            .arg(&out)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let svg = std::fs::read_to_string(dir.path().join("c.svg")).unwrap();
    let doc = roxmltree::Document::parse(&svg).expect("the SVG is well-formed XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let texts: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .collect();
    assert!(texts.contains(&"Tensor float32[524288] cpu"), "{texts:?}");
    assert!(texts.contains(&"holds 2.00 MiB"), "{texts:?}");
    assert!(texts.contains(&"tb_frame"), "{texts:?}");

    // the PNG is the SVG rendered
    let png = std::fs::read(dir.path().join("c.png")).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 5_000);

    let dot = std::fs::read_to_string(dir.path().join("c.dot")).unwrap();
    let (nodes, edges) = check_dot(&dot);
    let total_objects: u64 = cycles.iter().map(|c| c["objects"].as_u64().unwrap()).sum();
    assert_eq!(nodes, total_objects as usize, "{dot}");
    assert!(
        edges >= nodes,
        "every object is in a cycle or on a path: {dot}"
    );

    let html = std::fs::read_to_string(dir.path().join("c.html")).unwrap();
    assert!(html.contains("<svg") && html.contains("data-node=\"1-0\""));
    assert!(!html.contains("src=\"http") && !html.contains("src='http"));
    roxmltree::Document::parse(&html[html.find("<svg").unwrap()..html.find("</svg>").unwrap() + 6])
        .expect("the inline SVG is well-formed");
    // its script parses, where node is installed
    let script = html.rsplit("<script>").next().unwrap();
    let script = &script[..script.find("</script>").unwrap()];
    let js = dir.path().join("page.js");
    std::fs::write(&js, script).unwrap();
    if let Ok(o) = std::process::Command::new("node")
        .arg("--check")
        .arg(&js)
        .output()
    {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        // and, on a minimal stand-in for the page's DOM, pointing at a tensor shows its details
        let data = html.split("type=\"application/json\">").nth(1).unwrap();
        let data = &data[..data.find("</script>").unwrap()];
        let harness = format!(
            "const data = {data:?};\n\
             const els = {{}};\n\
             function el(id) {{ return els[id] || (els[id] = {{ id, textContent: '', style: {{}}, offsetWidth: 100, handlers: {{}},\n\
               addEventListener(k, f) {{ this.handlers[k] = f; }}, getAttribute(a) {{ return this.attrs[a]; }}, attrs: {{}} }}); }}\n\
             el('memtrack-data').textContent = data;\n\
             const nodes = Object.keys(JSON.parse(data)).map(k => {{ const e = el('node ' + k); e.attrs['data-node'] = k; return e; }});\n\
             global.window = {{ innerWidth: 1000 }};\n\
             global.document = {{ getElementById: el, querySelectorAll: () => nodes }};\n\
             {script}\n\
             const tensor = nodes.find(n => JSON.parse(data)[n.attrs['data-node']].includes('storage of'));\n\
             tensor.handlers.mouseover(); tensor.handlers.mousemove({{ clientX: 10, clientY: 10 }});\n\
             if (el('details').textContent !== JSON.parse(data)[tensor.attrs['data-node']]) throw new Error('panel');\n\
             if (el('tip').style.display !== 'block' || !el('tip').textContent.includes('Tensor')) throw new Error('tooltip');\n\
             tensor.handlers.mouseout(); if (el('tip').style.display !== 'none') throw new Error('tooltip stays');\n\
             console.log('hover ok');\n"
        );
        let h = dir.path().join("hover.js");
        std::fs::write(&h, harness).unwrap();
        let o = std::process::Command::new("node").arg(&h).output().unwrap();
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("hover ok"),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }

    // the file still loads in PyTorch's MemoryTracker
    let o = std::process::Command::new(&py)
        .args([
            "-c",
            "import sys\nfrom torch.distributed._tools.memory_tracker import MemoryTracker\n\
             m = MemoryTracker(); m.load(sys.argv[1]); m.summary(); print('OK', m._op_index)",
        ])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("OK 8"),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn cycles_needs_a_recording_that_watched() {
    let mt = common::fixture("tracker/memory_tracker_cpu_torch2.15.0.pkl");
    let o = memtrack().arg("cycles").arg(&mt).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("recorded without --cycles"), "{err}");
}

/// A structural check of DOT (graphviz.org/doc/info/lang.html) for what memtrack writes:
/// `digraph ID { stmt* }` with attribute, node, edge and subgraph statements, quoted strings
/// with escapes, every edge between declared nodes. Returns (nodes, edges).
fn check_dot(src: &str) -> (usize, usize) {
    #[derive(Debug, PartialEq, Clone)]
    enum T {
        Id(String),
        Str(String),
        P(&'static str),
    }
    let mut toks = Vec::new();
    let cs: Vec<char> = src.chars().collect();
    let mut i = 0;
    while i < cs.len() {
        let c = cs[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '"' {
            let mut s = String::new();
            i += 1;
            loop {
                assert!(i < cs.len(), "unterminated string");
                match cs[i] {
                    '\\' => {
                        s.push(cs[i + 1]);
                        i += 2;
                    }
                    '"' => {
                        i += 1;
                        break;
                    }
                    '\n' => panic!("raw newline in a string"),
                    c => {
                        s.push(c);
                        i += 1;
                    }
                }
            }
            toks.push(T::Str(s));
        } else if c.is_ascii_alphanumeric() || c == '_' || c == '.' {
            let start = i;
            while i < cs.len() && (cs[i].is_ascii_alphanumeric() || cs[i] == '_' || cs[i] == '.') {
                i += 1;
            }
            toks.push(T::Id(cs[start..i].iter().collect()));
        } else if c == '-' && cs.get(i + 1) == Some(&'>') {
            toks.push(T::P("->"));
            i += 2;
        } else {
            let p = match c {
                '{' => "{",
                '}' => "}",
                '[' => "[",
                ']' => "]",
                '=' => "=",
                ';' => ";",
                ',' => ",",
                c => panic!("unexpected character {c:?} in DOT"),
            };
            toks.push(T::P(p));
            i += 1;
        }
    }
    let mut k = 0;
    let mut declared = std::collections::HashSet::new();
    let mut used = Vec::new();
    let mut edges = 0;
    let expect = |k: &mut usize, t: T| {
        assert_eq!(toks[*k], t, "at token {k}");
        *k += 1;
    };
    let id = |k: &mut usize| -> String {
        match &toks[*k] {
            T::Id(s) | T::Str(s) => {
                *k += 1;
                s.clone()
            }
            t => panic!("expected an ID at token {k}, found {t:?}"),
        }
    };
    let attrs = |k: &mut usize| {
        expect(k, T::P("["));
        loop {
            if toks[*k] == T::P("]") {
                *k += 1;
                return;
            }
            id(k);
            expect(k, T::P("="));
            id(k);
            if toks[*k] == T::P(",") || toks[*k] == T::P(";") {
                *k += 1;
            }
        }
    };
    assert_eq!(toks[k], T::Id("digraph".into()));
    k += 1;
    id(&mut k);
    expect(&mut k, T::P("{"));
    let mut depth = 1;
    while depth > 0 {
        match toks[k].clone() {
            T::P("}") => {
                depth -= 1;
                k += 1;
            }
            T::Id(w) if w == "subgraph" => {
                k += 1;
                id(&mut k);
                expect(&mut k, T::P("{"));
                depth += 1;
            }
            T::Id(w) if w == "graph" || w == "node" || w == "edge" => {
                k += 1;
                attrs(&mut k);
                expect(&mut k, T::P(";"));
            }
            _ => {
                let a = id(&mut k);
                match &toks[k] {
                    T::P("=") => {
                        k += 1;
                        id(&mut k);
                    }
                    T::P("->") => {
                        k += 1;
                        let b = id(&mut k);
                        used.push(a);
                        used.push(b);
                        edges += 1;
                        if toks[k] == T::P("[") {
                            attrs(&mut k);
                        }
                    }
                    _ => {
                        declared.insert(a);
                        if toks[k] == T::P("[") {
                            attrs(&mut k);
                        }
                    }
                }
                expect(&mut k, T::P(";"));
            }
        }
    }
    assert_eq!(k, toks.len(), "nothing after the graph");
    for u in &used {
        assert!(declared.contains(u), "edge to undeclared node {u}");
    }
    (declared.len(), edges)
}
