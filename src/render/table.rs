//! One table type, printed as aligned text (tabled), reStructuredText, Markdown or CSV.

use tabled::builder::Builder;
use tabled::settings::object::Columns;
use tabled::settings::{Alignment, Style};

/// Where a column's cells sit in text and Markdown.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Words.
    Left,
    /// Numbers.
    Right,
}

/// Rows under headers, each column aligned left or right; printed by the methods below.
pub struct Table {
    /// Column names, as shown.
    pub headers: Vec<String>,
    /// Each column's alignment.
    pub align: Vec<Align>,
    /// The cells, row by row.
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// Columns named with a leading `>` are right-aligned (numbers); the `>` is not shown.
    pub fn new(headers: &[&str]) -> Table {
        Table {
            headers: headers
                .iter()
                .map(|h| h.trim_start_matches('>').to_string())
                .collect(),
            align: headers
                .iter()
                .map(|h| {
                    if h.starts_with('>') {
                        Align::Right
                    } else {
                        Align::Left
                    }
                })
                .collect(),
            rows: Vec::new(),
        }
    }

    /// Add a row (as many cells as headers).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    fn builder(&self) -> Builder {
        let mut b = Builder::default();
        b.push_record(self.headers.clone());
        for r in &self.rows {
            b.push_record(r.clone());
        }
        b
    }

    fn aligned(&self, t: &mut tabled::Table) {
        for (i, a) in self.align.iter().enumerate() {
            if *a == Align::Right {
                t.modify(Columns::one(i), Alignment::right());
            }
        }
    }

    /// Plain aligned columns under a rule, for terminals.
    pub fn text(&self) -> String {
        let mut t = self.builder().build();
        t.with(Style::blank().remove_horizontals());
        self.aligned(&mut t);
        let mut s = t.to_string();
        // a rule under the header makes long tables readable
        if let Some(first_newline) = s.find('\n') {
            let width = s[..first_newline].chars().count();
            s.insert_str(first_newline + 1, &format!("{}\n", "─".repeat(width)));
        }
        s.lines().map(str::trim_end).collect::<Vec<_>>().join("\n") + "\n"
    }

    /// reStructuredText simple table, as `tabulate(..., tablefmt="rst")` prints MemTracker's.
    pub fn rst(&self) -> String {
        let mut t = self.builder().build();
        t.with(Style::re_structured_text());
        self.aligned(&mut t);
        t.to_string()
            .lines()
            .map(str::trim_end)
            .collect::<Vec<_>>()
            .join("\n")
            + "\n"
    }

    /// A Markdown (GitHub) table, columns padded and aligned.
    pub fn markdown(&self) -> String {
        let mut t = self.builder().build();
        t.with(Style::markdown());
        self.aligned(&mut t);
        t.to_string() + "\n"
    }

    /// CSV: the header line, then a line a row (see [`csv_record`]).
    pub fn csv(&self) -> String {
        let mut out = String::new();
        for r in std::iter::once(&self.headers).chain(self.rows.iter()) {
            csv_record(&mut out, r);
        }
        out
    }
}

/// One CSV line onto `out`: the cells, comma-separated, each quoted when it holds a comma, a
/// quote or a line break. Reports that write millions of rows (`trace`) call it row by row.
pub fn csv_record<S: AsRef<str>>(out: &mut String, cells: &[S]) {
    for (i, c) in cells.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        csv_cell(out, c.as_ref());
    }
    out.push('\n');
}

/// One CSV cell onto `out`: quoted when it holds a comma, a quote or a line break.
pub fn csv_cell(out: &mut String, c: &str) {
    if c.contains([',', '"', '\n', '\r']) {
        out.push('"');
        out.push_str(&c.replace('"', "\"\""));
        out.push('"');
    } else {
        out.push_str(c);
    }
}

/// A cell for a value a row may lack: the value, or empty (CSV's missing).
pub fn or_empty<T: ToString>(v: Option<T>) -> String {
    v.map_or(String::new(), |v| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_quotes_what_needs_quoting() {
        let mut t = Table::new(&["a", ">b"]);
        t.row(vec!["x,y".into(), "1".into()]);
        t.row(vec!["say \"hi\"".into(), "2".into()]);
        assert_eq!(t.csv(), "a,b\n\"x,y\",1\n\"say \"\"hi\"\"\",2\n");
        assert!(t.markdown().contains("| a "));
        assert!(t.text().contains("x,y"));
    }
}
