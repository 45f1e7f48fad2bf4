//! `memtrack.estimate` of a file `memtrack estimate` wrote (docs/format.md): the facts of
//! `model::EstimateFacts`, each a list of dicts.
//!
//! ```text
//! {"reads": [{file, line, what, count, branch}],
//!  "upper_bounds": [{file, line, op, count}],
//!  "unwritten": [{file, line, what, path, count}],
//!  "process_groups": [{name, size}], "nccl_allowance_bytes": int,
//!  "stopped": None | {file, line, what, count, limit}}
//! ```

use crate::model::estimate::{
    EstimateFacts, ProcessGroup, Stopped, Unwritten, UpperBound, ValueRead,
};
use crate::pickle::writer::Writer;
use crate::pickle::{Dict, Document, Value};

use super::error::{LayoutError, Parse};

/// A list of dicts under `key`, each made by `item` (None: a key missing or of another type).
fn list<T>(
    doc: &Document,
    v: Option<Value>,
    key: &str,
    shape: &str,
    item: impl Fn(&Field) -> Option<T>,
) -> Parse<Vec<T>> {
    let Some(v) = v else { return Ok(Vec::new()) };
    let seq = doc
        .as_seq(v)
        .ok_or_else(|| LayoutError(format!("memtrack.estimate.{key}: expected a list")))?;
    let mut out = Vec::with_capacity(seq.len());
    for (k, x) in seq.iter().enumerate() {
        let bad = || LayoutError(format!("memtrack.estimate.{key}[{k}]: expected {shape}"));
        let d = doc.as_dict(*x).ok_or_else(bad)?;
        out.push(item(&Field { doc, d: &d }).ok_or_else(bad)?);
    }
    Ok(out)
}

/// One dict's fields, typed.
struct Field<'a> {
    doc: &'a Document,
    d: &'a Dict<'a>,
}

impl Field<'_> {
    fn str(&self, k: &str) -> Option<String> {
        self.d
            .get(k)
            .and_then(|v| self.doc.as_str(v))
            .map(str::to_string)
    }
    fn line(&self) -> Option<u32> {
        self.d
            .get("line")
            .and_then(|v| self.doc.as_int(v))
            .and_then(|l| u32::try_from(l).ok())
    }
    fn count(&self, k: &str) -> Option<u64> {
        self.d
            .get(k)
            .and_then(|v| self.doc.as_int(v))
            .and_then(|c| u64::try_from(c).ok())
    }
}

const READ: &str = "{file, line, what, count, branch}";
const BOUND: &str = "{file, line, op, count}";
const UNWRITTEN: &str = "{file, line, what, path, count}";
const STOPPED: &str = "{file, line, what, count, limit}";
const GROUP: &str = "{name, size}";

pub fn read(doc: &Document, v: Value) -> Parse<EstimateFacts> {
    let d = doc.as_dict(v).ok_or("memtrack.estimate: expected a dict")?;
    let reads = list(doc, d.get("reads"), "reads", READ, |f| {
        Some(ValueRead {
            file: f.str("file")?,
            line: f.line()?,
            what: f.str("what")?,
            count: f.count("count")?,
            branch: f.d.get("branch").and_then(|v| doc.as_bool(v))?,
        })
    })?;
    let upper_bounds = list(doc, d.get("upper_bounds"), "upper_bounds", BOUND, |f| {
        Some(UpperBound {
            file: f.str("file")?,
            line: f.line()?,
            op: f.str("op")?,
            count: f.count("count")?,
        })
    })?;
    let unwritten = list(doc, d.get("unwritten"), "unwritten", UNWRITTEN, |f| {
        Some(Unwritten {
            file: f.str("file")?,
            line: f.line()?,
            what: f.str("what")?,
            path: f.str("path")?,
            count: f.count("count")?,
        })
    })?;
    let stopped = match d.get("stopped").filter(|v| !doc.is_none(*v)) {
        None => None,
        Some(v) => {
            let bad = || LayoutError(format!("memtrack.estimate.stopped: expected {STOPPED}"));
            let sd = doc.as_dict(v).ok_or_else(bad)?;
            let f = Field { doc, d: &sd };
            let s = (|| {
                Some(Stopped {
                    file: f.str("file")?,
                    line: f.line()?,
                    what: f.str("what")?,
                    count: f.count("count")?,
                    limit: f.count("limit")?,
                })
            })();
            Some(s.ok_or_else(bad)?)
        }
    };
    let process_groups = list(doc, d.get("process_groups"), "process_groups", GROUP, |f| {
        Some(ProcessGroup {
            name: f.str("name")?,
            size: f.count("size")?,
        })
    })?;
    let nccl_allowance_bytes = d
        .get("nccl_allowance_bytes")
        .and_then(|v| doc.as_int(v))
        .map_or(0, |n| n.max(0) as u64);
    Ok(EstimateFacts {
        reads,
        upper_bounds,
        unwritten,
        stopped,
        process_groups,
        nccl_allowance_bytes,
    })
}

fn place(w: &mut Writer, file: &str, line: u32) {
    w.entry("file", |w| w.str(file));
    w.entry("line", |w| w.int(line.into()));
}

pub fn write(w: &mut Writer, f: &EstimateFacts) {
    w.begin_dict();
    w.entry("reads", |w| {
        w.list(&f.reads, |w, r| {
            w.begin_dict();
            place(w, &r.file, r.line);
            w.entry("what", |w| w.str(&r.what));
            w.entry("count", |w| w.int(r.count as i64));
            w.entry("branch", |w| w.bool(r.branch));
            w.end_dict();
        });
    });
    w.entry("upper_bounds", |w| {
        w.list(&f.upper_bounds, |w, u| {
            w.begin_dict();
            place(w, &u.file, u.line);
            w.entry("op", |w| w.str(&u.op));
            w.entry("count", |w| w.int(u.count as i64));
            w.end_dict();
        });
    });
    w.entry("unwritten", |w| {
        w.list(&f.unwritten, |w, u| {
            w.begin_dict();
            place(w, &u.file, u.line);
            w.entry("what", |w| w.str(&u.what));
            w.entry("path", |w| w.str(&u.path));
            w.entry("count", |w| w.int(u.count as i64));
            w.end_dict();
        });
    });
    w.entry("process_groups", |w| {
        w.list(&f.process_groups, |w, g| {
            w.begin_dict();
            w.entry("name", |w| w.str(&g.name));
            w.entry("size", |w| w.int(g.size as i64));
            w.end_dict();
        });
    });
    w.entry("nccl_allowance_bytes", |w| {
        w.int(f.nccl_allowance_bytes as i64)
    });
    w.entry("stopped", |w| match &f.stopped {
        Some(s) => {
            w.begin_dict();
            place(w, &s.file, s.line);
            w.entry("what", |w| w.str(&s.what));
            w.entry("count", |w| w.int(s.count as i64));
            w.entry("limit", |w| w.int(s.limit as i64));
            w.end_dict();
        }
        None => w.none(),
    });
    w.end_dict();
}
