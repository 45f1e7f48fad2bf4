//! The one writer of text and Markdown reports: titles, headings, paragraphs, lines, list items
//! and tables ([`Table`]), each in the look of the format asked for. CSV is a [`Table`] of its
//! own (`Table::csv`, `table::csv_record`); JSON is serde (`super::json`).
//!
//! Spacing, the same in every report: in Markdown every block (title, heading, paragraph,
//! table) ends with a blank line; in text a heading starts after one. `gap` puts a blank line
//! where a report wants one more, and `close_up` takes back the one after a Markdown block.

use super::table::Table;
use super::Format;

/// How text tables and headings look: aligned columns under a rule, or MemTracker's own
/// (`tabulate(tablefmt="rst")` tables and `== heading ==` banners).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum TextStyle {
    /// Headings as lines, tables as aligned columns (`Table::text`).
    Plain,
    /// Headings as `== heading ==`, tables as reStructuredText, each and a blank line.
    MemTracker,
}

/// A report being written as text or Markdown (any other format writes text).
pub struct Document {
    markdown: bool,
    style: TextStyle,
    out: String,
}

impl Document {
    /// A document in `format`: Markdown for `Format::Markdown`, plain text otherwise.
    pub fn new(format: Format) -> Document {
        Document::styled(format, TextStyle::Plain)
    }

    /// A document whose text looks as `style` says (Markdown looks the same either way).
    pub fn styled(format: Format, style: TextStyle) -> Document {
        Document {
            markdown: format == Format::Markdown,
            style,
            out: String::new(),
        }
    }

    /// Whether this is Markdown (for the words that differ, not the layout).
    pub fn is_markdown(&self) -> bool {
        self.markdown
    }

    /// The report's title: `## t` in Markdown, the line `t` in text.
    pub fn title(&mut self, t: &str) {
        if self.markdown {
            self.out.push_str("## ");
            self.out.push_str(t);
            self.out.push_str("\n\n");
        } else {
            self.line(t);
        }
    }

    /// A section heading: `### h` in Markdown; in text the line `h` after a blank line
    /// (MemTracker style: `== h ==` and a blank line).
    pub fn heading(&mut self, h: &str) {
        if self.markdown {
            self.out.push_str("### ");
            self.out.push_str(h);
            self.out.push_str("\n\n");
        } else if self.style == TextStyle::MemTracker {
            self.out.push_str("== ");
            self.out.push_str(h);
            self.out.push_str(" ==\n\n");
        } else {
            self.gap();
            self.line(h);
        }
    }

    /// A heading under a heading: `#### h` in Markdown, the line `h` in text.
    pub fn subheading(&mut self, h: &str) {
        if self.markdown {
            self.out.push_str("#### ");
            self.out.push_str(h);
            self.out.push_str("\n\n");
        } else {
            self.line(h);
        }
    }

    /// A paragraph (`p` without its last newline): its lines, and in Markdown a blank line.
    pub fn para(&mut self, p: &str) {
        self.line(p);
        if self.markdown {
            self.out.push('\n');
        }
    }

    /// One line as it is, in either format.
    pub fn line(&mut self, l: &str) {
        self.out.push_str(l);
        self.out.push('\n');
    }

    /// A list item: `- item` in Markdown, `  item` in text.
    pub fn item(&mut self, item: &str) {
        self.out.push_str(if self.markdown { "- " } else { "  " });
        self.line(item);
    }

    /// `s` as code: `` `s` `` in Markdown, as it is in text.
    pub fn code(&self, s: &str) -> String {
        if self.markdown {
            format!("`{s}`")
        } else {
            s.to_string()
        }
    }

    /// A table: Markdown and a blank line, or text in the document's style.
    pub fn table(&mut self, t: &Table) {
        if self.markdown {
            self.out.push_str(&t.markdown());
            self.out.push('\n');
        } else if self.style == TextStyle::MemTracker {
            self.out.push_str(&t.rst());
            self.out.push('\n');
        } else {
            self.out.push_str(&t.text());
        }
    }

    /// Text only: a blank line and a note under the tables (Markdown leaves such notes out).
    pub fn text_note(&mut self, note: &str) {
        if !self.markdown {
            self.gap();
            self.line(note);
        }
    }

    /// A blank line, unless the document is empty or already ends with one.
    pub fn gap(&mut self) {
        if !self.out.is_empty() && !self.out.ends_with("\n\n") {
            self.out.push('\n');
        }
    }

    /// Take back the blank line that ends the document, so that what follows (or the end)
    /// comes right under the last block.
    pub fn close_up(&mut self) {
        if self.out.ends_with("\n\n") {
            self.out.pop();
        }
    }

    /// Text written elsewhere (another report, a fixed layout), as it is.
    pub fn raw(&mut self, s: &str) {
        self.out.push_str(s);
    }

    /// The document's text.
    pub fn finish(self) -> String {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(format: Format) -> String {
        let mut t = Table::new(&["a", ">b"]);
        t.row(vec!["x".into(), "1".into()]);
        let mut d = Document::new(format);
        d.title("T");
        d.heading("H");
        d.table(&t);
        d.para("p");
        d.heading("I");
        d.finish()
    }

    #[test]
    fn blocks_are_spaced_as_the_format_wants() {
        assert_eq!(
            sample(Format::Text),
            "T\n\nH\n a   b\n───────\n x   1\np\n\nI\n"
        );
        assert_eq!(
            sample(Format::Markdown),
            "## T\n\n### H\n\n| a | b |\n|---|---|\n| x | 1 |\n\np\n\n### I\n\n"
        );
    }
}
