//! No two files of `src/` import each other, directly or through others, and no two of its
//! parts (its folders: `formats`, `record`, `estimate`, …) do either (docs/architecture.md:
//! data flows one way). A circle fails the test, which names its files and the lines that
//! make it. (The files at `src/`'s root that every part uses, `error.rs`, `inputs.rs`,
//! `output.rs`, are checked as files.)
//!
//! The imports are read from the source: every path a file names (`use` trees, and paths in
//! code such as `crate::formats::load(…)` or `super::Parse`), resolved the way the compiler
//! resolves names — through modules, `use` aliases, re-exports and glob imports — to the file
//! that defines the item. A type re-exported by a `mod.rs` is an import of the file that
//! defines it, not of the `mod.rs`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// Imports the check lets through for now: (files from, files to), by path prefix. Delete an
/// entry once its imports are gone; the check then holds them to the rule. None now: add one
/// only with the reason and what would end it.
const KNOWN_EXCEPTIONS: &[(&str, &str)] = &[];

fn excepted(from: &str, to: &str) -> bool {
    KNOWN_EXCEPTIONS
        .iter()
        .any(|(f, t)| from.starts_with(f) && to.starts_with(t))
}

// ---- tokens ----

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    /// `::`
    Path,
    Punct(char),
}

/// The tokens of Rust source that name things: identifiers, `::` and punctuation, with
/// comments, strings, chars and lifetimes left out.
fn tokens(src: &str) -> Vec<(Tok, usize)> {
    let b: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    let ident_start = |c: char| c == '_' || c.is_alphabetic();
    let ident_char = |c: char| c == '_' || c.is_alphanumeric();
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    line += (b[i] == '\n') as usize;
                    i += 1;
                }
            }
        } else if c == '"' {
            i = skip_string(&b, i + 1, &mut line);
        } else if c == '\'' {
            // a char literal ('a', '\n', '\u{1F600}') or a lifetime ('a, 'static)
            if next == Some('\\') {
                i += 2;
                while i < b.len() && b[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if b.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
                while i < b.len() && ident_char(b[i]) {
                    i += 1;
                }
            }
        } else if ident_start(c) {
            let start = i;
            while i < b.len() && ident_char(b[i]) {
                i += 1;
            }
            let word: String = b[start..i].iter().collect();
            // raw strings and byte strings: r"…", r#"…"#, b"…", br#"…"#, b'x'
            let hashes = b[i..].iter().take_while(|&&h| h == '#').count();
            if matches!(word.as_str(), "r" | "br") && b.get(i + hashes) == Some(&'"') {
                i = skip_raw_string(&b, i + hashes + 1, hashes, &mut line);
            } else if word == "b" && b.get(i) == Some(&'"') {
                i = skip_string(&b, i + 1, &mut line);
            } else if word == "b" && b.get(i) == Some(&'\'') {
                i += 1;
                while i < b.len() && b[i] != '\'' {
                    i += 1 + (b[i] == '\\') as usize;
                }
                i += 1;
            } else if word == "r" && hashes == 1 && b.get(i + 1).is_some_and(|&c| ident_start(c)) {
                // a raw identifier: r#type
                i += 1;
                let start = i;
                while i < b.len() && ident_char(b[i]) {
                    i += 1;
                }
                out.push((Tok::Ident(b[start..i].iter().collect()), line));
            } else {
                out.push((Tok::Ident(word), line));
            }
        } else if c.is_ascii_digit() {
            while i < b.len() && (b[i].is_alphanumeric() || b[i] == '_' || b[i] == '.') {
                // `1..n` is a range, not a number
                if b[i] == '.' && b.get(i + 1) == Some(&'.') {
                    break;
                }
                i += 1;
            }
        } else if c == ':' && next == Some(':') {
            out.push((Tok::Path, line));
            i += 2;
        } else {
            out.push((Tok::Punct(c), line));
            i += 1;
        }
    }
    out
}

/// Past a string's closing quote (`i`: after its opening one).
fn skip_string(b: &[char], mut i: usize, line: &mut usize) -> usize {
    while i < b.len() && b[i] != '"' {
        *line += (b[i] == '\n') as usize;
        i += 1 + (b[i] == '\\') as usize;
    }
    i + 1
}

/// Past a raw string's closing quote and `hashes` hashes (`i`: after its opening quote).
fn skip_raw_string(b: &[char], mut i: usize, hashes: usize, line: &mut usize) -> usize {
    while i < b.len() {
        if b[i] == '"'
            && b[i + 1..]
                .iter()
                .take(hashes)
                .filter(|&&h| h == '#')
                .count()
                == hashes
        {
            return i + 1 + hashes;
        }
        *line += (b[i] == '\n') as usize;
        i += 1;
    }
    i
}

// ---- what each file says ----

/// A module's path from the crate's root (`["formats", "snapshot"]`).
type ModPath = Vec<String>;

/// A `use` of one name: what it names, in the scope it is written in.
#[derive(Clone, Debug)]
struct UseItem {
    /// The inline module it is written in (`tests` of `mod tests { … }`), relative to the file.
    scope: ModPath,
    /// The path as written (`crate`, `super`, `self` or a name first).
    path: Vec<String>,
    /// The name it brings in (`None` for a glob `*`).
    name: Option<String>,
    line: usize,
}

/// A path named in code (not in a `use`), as written.
#[derive(Debug)]
struct PathRef {
    scope: ModPath,
    path: Vec<String>,
    line: usize,
}

#[derive(Debug, Default)]
struct FileFacts {
    /// `mod NAME;` declarations: child modules in files of their own.
    children: Vec<String>,
    /// Names of items defined here, per inline scope.
    defined: BTreeSet<(ModPath, String)>,
    uses: Vec<UseItem>,
    refs: Vec<PathRef>,
}

const ITEM_KEYWORDS: &[&str] = &[
    "fn", "struct", "enum", "trait", "type", "const", "static", "union", "mod",
];

fn read_facts(src: &str) -> FileFacts {
    let t = tokens(src);
    let mut f = FileFacts::default();
    // inline modules open at a brace depth: (name, depth inside it)
    let mut scope: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    let ident = |k: usize| match t.get(k) {
        Some((Tok::Ident(s), _)) => Some(s.as_str()),
        _ => None,
    };
    let scope_path = |scope: &[(String, usize)]| scope.iter().map(|s| s.0.clone()).collect();
    while i < t.len() {
        match &t[i].0 {
            Tok::Punct('{') => {
                depth += 1;
                i += 1;
            }
            Tok::Punct('}') => {
                if scope.last().is_some_and(|s| s.1 == depth) {
                    scope.pop();
                }
                depth = depth.saturating_sub(1);
                i += 1;
            }
            Tok::Ident(w) if w == "use" && t.get(i + 1).map(|t| &t.0) != Some(&Tok::Punct('(')) => {
                let line = t[i].1;
                let mut items = Vec::new();
                i = use_tree(&t, i + 1, Vec::new(), &mut items);
                for (path, name) in items {
                    f.uses.push(UseItem {
                        scope: scope_path(&scope),
                        path,
                        name,
                        line,
                    });
                }
            }
            Tok::Ident(w) if ITEM_KEYWORDS.contains(&w.as_str()) => {
                // `fn name`, `mod name;` / `mod name {`; not `impl Fn(…)`'s `fn(`
                if let Some(name) = ident(i + 1) {
                    let name = name.to_string();
                    if w == "mod" {
                        match t.get(i + 2).map(|t| &t.0) {
                            Some(Tok::Punct(';')) if scope.is_empty() => {
                                f.children.push(name.clone())
                            }
                            Some(Tok::Punct('{')) => {
                                f.defined.insert((scope_path(&scope), name.clone()));
                                scope.push((name, depth + 1));
                            }
                            _ => {}
                        }
                    } else {
                        f.defined.insert((scope_path(&scope), name));
                    }
                }
                i += 1;
            }
            Tok::Ident(w) if w == "macro_rules" => {
                if let Some(name) = ident(i + 2) {
                    f.defined.insert((scope_path(&scope), name.to_string()));
                }
                i += 1;
            }
            Tok::Ident(first) if t.get(i + 1).map(|t| &t.0) == Some(&Tok::Path) => {
                // a path in code: NAME::NAME::…, unless it continues one (`x::` after `::`)
                let continues = i > 0 && t[i - 1].0 == Tok::Path;
                let line = t[i].1;
                let mut path = vec![first.clone()];
                let mut k = i + 1;
                while t.get(k).map(|t| &t.0) == Some(&Tok::Path) {
                    match ident(k + 1) {
                        Some(n) => {
                            path.push(n.to_string());
                            k += 2;
                        }
                        None => break, // `::<T>` or `::{`
                    }
                }
                if !continues {
                    f.refs.push(PathRef {
                        scope: scope_path(&scope),
                        path,
                        line,
                    });
                }
                i = k;
            }
            _ => i += 1,
        }
    }
    f
}

/// One `use` tree from token `i` (after `use` or a `{`/`,`), under `prefix`: each name it
/// brings in as (full path, name), `None` for a glob. Returns the index past the tree.
fn use_tree(
    t: &[(Tok, usize)],
    mut i: usize,
    mut prefix: Vec<String>,
    out: &mut Vec<(Vec<String>, Option<String>)>,
) -> usize {
    if t.get(i).map(|t| &t.0) == Some(&Tok::Path) {
        i += 1; // a leading `::`
    }
    loop {
        match t.get(i).map(|t| &t.0) {
            Some(Tok::Ident(n)) => {
                prefix.push(n.clone());
                i += 1;
                match t.get(i).map(|t| &t.0) {
                    Some(Tok::Path) => i += 1,
                    Some(Tok::Ident(a)) if a == "as" => {
                        let alias = match t.get(i + 1).map(|t| &t.0) {
                            Some(Tok::Ident(a)) if a != "_" => Some(a.clone()),
                            _ => Some(String::new()), // `as _`: nothing named
                        };
                        out.push((prefix, alias));
                        return skip_to_end(t, i + 2);
                    }
                    _ => {
                        let name = prefix.last().cloned();
                        // `use super::{self, x}`: `self` names the module
                        if name.as_deref() == Some("self") {
                            prefix.pop();
                            let name = prefix.last().cloned();
                            out.push((prefix, name));
                        } else {
                            out.push((prefix, name));
                        }
                        return skip_to_end(t, i);
                    }
                }
            }
            Some(Tok::Punct('*')) => {
                out.push((prefix, None));
                return skip_to_end(t, i + 1);
            }
            Some(Tok::Punct('{')) => {
                i += 1;
                loop {
                    match t.get(i).map(|t| &t.0) {
                        Some(Tok::Punct('}')) => return skip_to_end(t, i + 1),
                        Some(Tok::Punct(',')) => i += 1,
                        None => return i,
                        _ => i = use_tree(t, i, prefix.clone(), out),
                    }
                }
            }
            _ => return skip_to_end(t, i),
        }
    }
}

/// Leaves `i` at the `,`, `}` or past the `;` that ends a use tree.
fn skip_to_end(t: &[(Tok, usize)], i: usize) -> usize {
    match t.get(i).map(|t| &t.0) {
        Some(Tok::Punct(';')) => i + 1,
        _ => i,
    }
}

// ---- resolving names to files ----

struct Crate {
    /// Module path → its file, relative to the repository (`src/formats/mod.rs`).
    files: BTreeMap<ModPath, String>,
    facts: HashMap<String, FileFacts>,
    /// File → its module path.
    module_of: HashMap<String, ModPath>,
}

impl Crate {
    fn load(root: &Path) -> Crate {
        let mut c = Crate {
            files: BTreeMap::new(),
            facts: HashMap::new(),
            module_of: HashMap::new(),
        };
        c.add(root, "src/lib.rs", Vec::new());
        c
    }

    fn add(&mut self, root: &Path, file: &str, module: ModPath) {
        let src =
            std::fs::read_to_string(root.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        let facts = read_facts(&src);
        let dir = match file
            .strip_suffix("/mod.rs")
            .or(file.strip_suffix("lib.rs").map(|d| d.trim_end_matches('/')))
        {
            Some(d) => d.to_string(),
            None => file.strip_suffix(".rs").unwrap().to_string(),
        };
        for child in &facts.children {
            let mut m = module.clone();
            m.push(child.clone());
            let flat = format!("{dir}/{child}.rs");
            let nested = format!("{dir}/{child}/mod.rs");
            let child_file = if root.join(&flat).exists() {
                flat
            } else {
                nested
            };
            self.add(root, &child_file, m);
        }
        self.files.insert(module.clone(), file.to_string());
        self.module_of.insert(file.to_string(), module);
        self.facts.insert(file.to_string(), facts);
    }

    /// The file an absolute path's item is defined in, following `use` aliases, re-exports and
    /// globs; `None` outside the crate.
    fn resolve(&self, path: &[String], hops: usize) -> Option<String> {
        if hops > 32 {
            return None;
        }
        let mut module: ModPath = Vec::new();
        for (k, seg) in path.iter().enumerate() {
            let file = &self.files[&module];
            let facts = &self.facts[file];
            let mut child = module.clone();
            child.push(seg.clone());
            if self.files.contains_key(&child) {
                module = child;
                continue;
            }
            if facts.defined.contains(&(Vec::new(), seg.clone())) {
                return Some(file.clone());
            }
            let rest = &path[k + 1..];
            // brought in by a `use` at the file's top: resolve what it names
            for u in facts.uses.iter().filter(|u| u.scope.is_empty()) {
                if u.name.as_deref() == Some(seg.as_str()) {
                    let mut target = self.absolute(file, &[], &u.path)?;
                    target.extend_from_slice(rest);
                    return self.resolve(&target, hops + 1);
                }
            }
            for u in facts
                .uses
                .iter()
                .filter(|u| u.scope.is_empty() && u.name.is_none())
            {
                if let Some(mut target) = self.absolute(file, &[], &u.path) {
                    target.push(seg.clone());
                    target.extend_from_slice(rest);
                    if let Some(found) = self.resolve(&target, hops + 1) {
                        return Some(found);
                    }
                }
            }
            // an enum's variant, a macro, or a name this reading does not see: this file
            return Some(file.clone());
        }
        Some(self.files[&module].clone())
    }

    /// A path as written in `file` (in its inline `scope`) made absolute; `None` when it
    /// leaves the crate (`std::…`, `serde::…`).
    fn absolute(&self, file: &str, scope: &[String], path: &[String]) -> Option<Vec<String>> {
        let mut module = self.module_of[file].clone();
        module.extend_from_slice(scope);
        let first = path.first()?;
        match first.as_str() {
            "crate" => Some(path[1..].to_vec()),
            "self" => Some([module, path[1..].to_vec()].concat()),
            "super" => {
                let mut k = 0;
                while path.get(k).map(String::as_str) == Some("super") {
                    module.pop()?;
                    k += 1;
                }
                Some([module, path[k..].to_vec()].concat())
            }
            _ => {
                let facts = &self.facts[file];
                // a name `use`d in this scope or one around it
                for depth in (0..=scope.len()).rev() {
                    let s = &scope[..depth];
                    if let Some(u) = facts
                        .uses
                        .iter()
                        .find(|u| u.scope == s && u.name.as_deref() == Some(first.as_str()))
                    {
                        let mut target = self.absolute(file, s, &u.path)?;
                        target.extend_from_slice(&path[1..]);
                        return Some(target);
                    }
                }
                // a child module of the file, or an item of the module it is in
                let mut child = module.clone();
                child.push(first.clone());
                if self.files.contains_key(&child)
                    || facts.defined.contains(&(scope.to_vec(), first.clone()))
                {
                    return Some([module, path.to_vec()].concat());
                }
                None
            }
        }
    }
}

/// Every import between files: (from, to) → the lines of `from` that make it.
fn imports(c: &Crate) -> BTreeMap<(String, String), Vec<usize>> {
    let mut edges: BTreeMap<(String, String), Vec<usize>> = BTreeMap::new();
    for (file, facts) in &c.facts {
        let named = facts
            .uses
            .iter()
            .map(|u| (&u.scope, &u.path, u.line))
            .chain(facts.refs.iter().map(|r| (&r.scope, &r.path, r.line)));
        for (scope, path, line) in named {
            let Some(abs) = c.absolute(file, scope, path) else {
                continue;
            };
            let Some(to) = c.resolve(&abs, 0) else {
                continue;
            };
            if &to != file {
                edges.entry((file.clone(), to)).or_default().push(line);
            }
        }
    }
    edges
}

/// The part of `src/` a file belongs to: its first folder; `None` for a file at the root.
fn part(file: &str) -> Option<String> {
    let rest = file.strip_prefix("src/").unwrap();
    rest.split_once('/').map(|(dir, _)| format!("src/{dir}/"))
}

/// The groups of nodes that reach each other (Tarjan's strongly connected components),
/// those of more than one node.
fn circles(edges: &BTreeSet<(String, String)>) -> Vec<Vec<String>> {
    let nodes: BTreeSet<&String> = edges.iter().flat_map(|(a, b)| [a, b]).collect();
    let mut next: HashMap<&String, Vec<&String>> = HashMap::new();
    for (a, b) in edges {
        next.entry(a).or_default().push(b);
    }
    struct State<'a> {
        index: HashMap<&'a String, usize>,
        low: HashMap<&'a String, usize>,
        stack: Vec<&'a String>,
        on_stack: BTreeSet<&'a String>,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(v: &'a String, next: &HashMap<&'a String, Vec<&'a String>>, s: &mut State<'a>) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        for &w in next.get(v).into_iter().flatten() {
            if !s.index.contains_key(w) {
                visit(w, next, s);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut group = Vec::new();
            loop {
                let w = s.stack.pop().unwrap();
                s.on_stack.remove(w);
                group.push(w.clone());
                if w == v {
                    break;
                }
            }
            if group.len() > 1 {
                group.sort();
                s.found.push(group);
            }
        }
    }
    let mut s = State {
        index: HashMap::new(),
        low: HashMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in nodes {
        if !s.index.contains_key(v) {
            visit(v, &next, &mut s);
        }
    }
    s.found
}

/// What a circle's edges are, for the failure message.
fn describe(
    group: &[String],
    edges: &BTreeMap<(String, String), Vec<usize>>,
    key: impl Fn(&str) -> String,
) -> String {
    let mut lines = vec![format!("  {}", group.join(", "))];
    for ((from, to), at) in edges {
        let (f, t) = (key(from), key(to));
        if f != t && group.contains(&f) && group.contains(&t) {
            lines.push(format!("    {from} → {to} (lines {at:?})"));
        }
    }
    lines.join("\n")
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn no_two_files_or_parts_of_src_import_each_other() {
    let c = Crate::load(&root());
    assert!(
        c.files.len() > 100,
        "only {} files found under src/",
        c.files.len()
    );
    let edges: BTreeMap<(String, String), Vec<usize>> = imports(&c)
        .into_iter()
        .filter(|((from, to), _)| !excepted(from, to))
        .collect();
    let files: BTreeSet<(String, String)> = edges.keys().cloned().collect();
    let parts: BTreeSet<(String, String)> = files
        .iter()
        .filter_map(|(a, b)| Some((part(a)?, part(b)?)))
        .filter(|(a, b)| a != b)
        .collect();
    let mut said = Vec::new();
    for group in circles(&files) {
        said.push(format!(
            "files:\n{}",
            describe(&group, &edges, str::to_string)
        ));
    }
    for group in circles(&parts) {
        let key = |f: &str| part(f).unwrap_or_default();
        said.push(format!("parts:\n{}", describe(&group, &edges, key)));
    }
    assert!(
        said.is_empty(),
        "import circles in src/:\n{}",
        said.join("\n")
    );
}

#[test]
fn the_reading_of_imports_sees_them() {
    // the check above would pass on a reading that found nothing: these imports are known
    let c = Crate::load(&root());
    let edges = imports(&c);
    for (from, to) in [
        ("src/commands/segments.rs", "src/analysis/segments.rs"), // use crate::analysis::segments::…
        ("src/commands/segments.rs", "src/output.rs"), // use crate::{…, output}: output::emit
        ("src/formats/tracker.rs", "src/formats/record_ext.rs"), // use super::record_ext
    ] {
        assert!(
            edges.contains_key(&(from.to_string(), to.to_string())),
            "{from} → {to} not seen; seen from {from}: {:?}",
            edges
                .keys()
                .filter(|(f, _)| f == from)
                .map(|(_, t)| t)
                .collect::<Vec<_>>()
        );
    }
    // a circle is found where there is one
    let made: BTreeSet<(String, String)> = [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(
        circles(&made),
        vec![vec!["a".to_string(), "b".into(), "c".into()]]
    );
}
