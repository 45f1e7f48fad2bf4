//! Live bytes grouped by the question asked (`--group-by`): the allocation site, the user's own
//! line, the memory's category, the annotation ranges open at allocation, the allocation's
//! `user_metadata` or `compile_context`, or the user's own rules over frames.
//!
//! Categories are `analysis::categories`' judgements, made as the events go by.

use rustc_hash::FxHashMap;
use serde::Serialize;

use crate::model::snapshot::{Annotation, Snapshot, StackId};

use super::categories::{is_user_file, Category, PhaseTable};
use super::moment::Moment;
use super::sites::{Extra, LiveAtMoment, LiveSet, Origin, SiteKey, Sites};

/// One rule of a `--rules` file: a group name and a pattern over frames.
#[derive(Clone, Debug)]
pub struct Rule {
    /// The group's name.
    pub name: String,
    /// Matched against each frame as `path/file.py:LINE:function`.
    pub pattern: regex::Regex,
}

/// A rules file line that is not `name = regex`.
#[derive(Debug, thiserror::Error)]
#[error("line {line}: {why}")]
pub struct RuleError {
    line: usize,
    why: String,
}

/// `name = regex` lines; `#` starts a comment, blank lines are skipped.
pub fn parse_rules(text: &str) -> Result<Vec<Rule>, RuleError> {
    let mut rules = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let err = |why: String| RuleError { line: i + 1, why };
        let Some((name, pattern)) = line.split_once('=') else {
            return Err(err("expected `name = regex`".into()));
        };
        let (name, pattern) = (name.trim(), pattern.trim());
        if name.is_empty() {
            return Err(err("the group's name is empty".into()));
        }
        let pattern = regex::Regex::new(pattern).map_err(|e| err(e.to_string()))?;
        rules.push(Rule {
            name: name.to_string(),
            pattern,
        });
    }
    if rules.is_empty() {
        return Err(RuleError {
            line: 0,
            why: "no rules (expected `name = regex` lines)".into(),
        });
    }
    Ok(rules)
}

/// What the rows are.
#[derive(Clone, Debug)]
pub enum GroupBy {
    /// The innermost Python frame `_memory_viz` keeps.
    Site,
    /// The innermost frame of the program's own code.
    User,
    /// Parameter, gradient, optimizer state, activation, temporary, input, other.
    Category,
    /// The `external_annotations` ranges open at allocation.
    Annotation,
    /// The allocation's `user_metadata`.
    Metadata,
    /// The allocation's `compile_context`.
    Compile,
    /// The first of the user's rules that matches a frame.
    Rules(Vec<Rule>),
}

impl GroupBy {
    /// The name `--group-by` gives it.
    pub fn name(&self) -> &'static str {
        match self {
            GroupBy::Site => "site",
            GroupBy::User => "user",
            GroupBy::Category => "category",
            GroupBy::Annotation => "annotation",
            GroupBy::Metadata => "metadata",
            GroupBy::Compile => "compile",
            GroupBy::Rules(_) => "rules",
        }
    }

    /// What the gathering must keep of each allocation (`annotations`: the file's, for the
    /// device's spans; they come after the trace in the file).
    pub fn extra(&self, annotations: &[Annotation], device: u32) -> Extra {
        match self {
            GroupBy::Metadata => Extra::Metadata,
            GroupBy::Compile => Extra::Compile,
            GroupBy::Annotation => Extra::Annotations(annotation_spans(annotations, device).0),
            _ => Extra::Nothing,
        }
    }

    /// Whether each allocation is judged (its category: where it was made and where freed),
    /// which reads the events with the snapshot's stacks, after the reading.
    pub fn needs_judgements(&self) -> bool {
        matches!(self, GroupBy::Category)
    }

    /// What the gathering reads the stacks with when allocations are judged.
    pub fn phases(&self, snap: &Snapshot) -> Option<std::sync::Arc<PhaseTable>> {
        self.needs_judgements()
            .then(|| std::sync::Arc::new(PhaseTable::new(snap)))
    }

    /// Whether the gathering needs the annotations before the events.
    pub fn needs_annotations(&self) -> bool {
        matches!(self, GroupBy::Annotation)
    }

    /// Whether the events must be put aside and replayed once the whole file is read (the
    /// annotations come after the trace; judging reads the snapshot's stacks).
    pub fn needs_replay(&self) -> bool {
        self.needs_annotations() || self.needs_judgements()
    }
}

/// The boundaries' times of device `device`'s annotations, ascending, and the label of each
/// span: span 0 is before the first boundary, span `i` after boundary `i - 1`.
fn annotation_spans(annotations: &[Annotation], device: u32) -> (Vec<i64>, Vec<String>) {
    let mut marks: Vec<&Annotation> = annotations
        .iter()
        .filter(|a| a.device.is_none_or(|d| d == device) && a.time_us.is_some())
        .collect();
    marks.sort_by_key(|a| a.time_us);
    let mut open: Vec<&str> = Vec::new();
    let mut starts = Vec::new();
    let mut labels = vec![NONE.to_string()];
    for a in marks {
        if a.stage.eq_ignore_ascii_case("START") {
            open.push(&a.name);
        } else if let Some(i) = open.iter().rposition(|n| *n == a.name) {
            open.remove(i);
        }
        starts.push(a.time_us.unwrap_or_default());
        labels.push(if open.is_empty() {
            NONE.to_string()
        } else {
            open.join(" > ")
        });
    }
    (starts, labels)
}

const NONE: &str = "<none>";

/// Group labels of origins, resolved once per stack.
pub struct Grouper<'s> {
    by: GroupBy,
    sites: Sites<'s>,
    /// `Extra` strings of the device (metadata, compile context).
    strings: Vec<String>,
    annotation_labels: Vec<String>,
    stack_label: FxHashMap<StackId, String>,
}

impl<'s> Grouper<'s> {
    /// Labels by `by` on device `device` of `snap` (`strings`: what the gathering interned).
    pub fn new(snap: &'s Snapshot, device: u32, by: GroupBy, strings: Vec<String>) -> Self {
        let annotation_labels = match by {
            GroupBy::Annotation => annotation_spans(&snap.annotations, device).1,
            _ => Vec::new(),
        };
        Grouper {
            by,
            sites: Sites::new(snap),
            strings,
            annotation_labels,
            stack_label: FxHashMap::default(),
        }
    }

    /// Replaces the strings of what the gathering interned (`Extra`'s ids).
    pub fn set_strings(&mut self, strings: Vec<String>) {
        self.strings = strings;
    }

    /// `file.py:LINE function` of the innermost frame of the program's own code.
    fn user_line(&self, stack: StackId) -> String {
        if stack.is_missing() {
            return "<no-context>".into();
        }
        let snap = self.sites.snap;
        for &f in snap.stacks.stack(stack) {
            let fr = snap.stacks.frame(f);
            let file = snap.stacks.str(fr.filename);
            if is_user_file(file) {
                return format!(
                    "{}:{} {}",
                    crate::model::snapshot::short_filename(file),
                    fr.line,
                    snap.stacks.str(fr.name)
                );
            }
        }
        "<no user frame>".into()
    }

    fn rule_name(&self, stack: StackId, rules: &[Rule]) -> String {
        if !stack.is_missing() {
            let snap = self.sites.snap;
            let frames: Vec<String> = (snap.stacks.stack(stack).iter())
                .map(|&f| snap.frame_label(f, true))
                .collect();
            for r in rules {
                if frames.iter().any(|f| r.pattern.is_match(f)) {
                    return r.name.clone();
                }
            }
        }
        "<unmatched>".into()
    }

    /// `file:line:function` of a site (file name only unless `full_filename`).
    pub fn site_label(&self, k: SiteKey, full_filename: bool) -> String {
        self.sites.label(k, full_filename)
    }

    /// The group of an origin (for sites, the full location: two files of one name are two
    /// sites), and for sites the site.
    pub fn label(&mut self, o: Origin) -> (String, Option<SiteKey>) {
        let string = |id: u32, strings: &[String]| match id {
            0 => NONE.to_string(),
            i => strings[i as usize - 1].clone(),
        };
        match &self.by {
            GroupBy::Site => {
                let k = self.sites.site(o.stack);
                (self.sites.label(k, true), Some(k))
            }
            GroupBy::Category => (
                (o.judged.map_or(Category::Other, |j| j.category()))
                    .name()
                    .to_string(),
                None,
            ),
            GroupBy::Metadata | GroupBy::Compile => (string(o.extra, &self.strings), None),
            GroupBy::Annotation => (
                (self.annotation_labels.get(o.extra as usize))
                    .cloned()
                    .unwrap_or_else(|| NONE.to_string()),
                None,
            ),
            GroupBy::User | GroupBy::Rules(_) => {
                if let Some(l) = self.stack_label.get(&o.stack) {
                    return (l.clone(), None);
                }
                let l = match &self.by {
                    GroupBy::Rules(rules) => self.rule_name(o.stack, rules),
                    _ => self.user_line(o.stack),
                };
                self.stack_label.insert(o.stack, l.clone());
                (l, None)
            }
        }
    }
}

/// One group's live bytes and allocations on one device.
#[derive(Debug, Serialize)]
pub struct GroupRow {
    /// Device index.
    pub device: u32,
    /// The group (`file:line:function` of a site, a user line, a category, …).
    pub group: String,
    /// For sites: the same as `group` (kept for scripts written before `--group-by`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub site: Option<String>,
    /// For sites: `file:line:function` with the full file path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    /// Requested bytes of the group live at the end of the snapshot.
    pub end_bytes: u64,
    /// Allocations of the group live at the end.
    pub end_count: u64,
    /// Requested bytes live at the moment; None when the moment is the end or was not found.
    pub at_bytes: Option<u64>,
    /// Allocations live at the moment.
    pub at_count: Option<u64>,
    /// `at_bytes` when the moment is the peak (the name scripts read before `--at`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_bytes: Option<u64>,
    /// `at_count` when the moment is the peak.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_count: Option<u64>,
    /// Kept frames (innermost first) of the stack contributing most bytes to this group.
    pub example_stack: Vec<String>,
}

/// The groups holding the most memory on one device, at a moment and at the end.
#[derive(Debug, Serialize)]
pub struct GroupReport {
    /// Device index.
    pub device: u32,
    /// `site`, `user`, `category`, `annotation`, `metadata`, `compile` or `rules`.
    pub group_by: &'static str,
    /// The moment asked for (`peak`, `end`, `event 12`, `5.2s`, `oom`, `NAME:end@2`).
    pub moment: String,
    /// Requested bytes of every allocation live at the end.
    pub end_bytes: u64,
    /// Allocations live at the end.
    pub end_count: u64,
    /// Index of the trace event the moment follows (as `trace` numbers them).
    pub at_event_index: Option<usize>,
    /// Seconds from the trace's first timed event to the moment's event, when it has a time.
    pub at_time_s: Option<f64>,
    /// Requested bytes of every allocation live at the moment.
    pub at_bytes: Option<u64>,
    /// Allocations live at the moment.
    pub at_count: Option<u64>,
    /// `at_event_index` when the moment is the peak (kept for scripts written before `--at`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_event_index: Option<usize>,
    /// `at_bytes` when the moment is the peak.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_bytes: Option<u64>,
    /// `at_count` when the moment is the peak.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_count: Option<u64>,
    /// Distinct groups in all (the rows may be the first N).
    pub groups: usize,
    /// Distinct groups, under the name scripts read before `--group-by`.
    pub sites: usize,
    /// The first `top` groups, by bytes at the moment (else at the end), largest first.
    pub rows: Vec<GroupRow>,
}

/// Device `device`'s groups by bytes live at `moment` and at the end, the first `top`.
/// `gathered`: what the trace gave (its `at` None when the moment is the end, or when the
/// trace has no such event: the report then has no moment columns).
pub fn group_report(
    snap: &Snapshot,
    device: u32,
    top: usize,
    by: GroupBy,
    moment: &Moment,
    gathered: LiveAtMoment,
) -> GroupReport {
    let group_by = by.name();
    let LiveAtMoment {
        at,
        end,
        strings,
        at_time_s,
        ..
    } = gathered;
    let mut grouper = Grouper::new(snap, device, by, strings);
    #[derive(Default)]
    struct Acc {
        end: (u64, u64),
        at: (u64, u64),
        best_stack: Option<(u64, StackId)>,
        site: Option<SiteKey>,
    }
    let mut acc: FxHashMap<String, Acc> = FxHashMap::default();
    let mut add = |set: &LiveSet, at: bool| {
        for (&o, &(bytes, count)) in &set.by_origin {
            let (label, site) = grouper.label(o);
            let a = acc.entry(label).or_default();
            let t = if at { &mut a.at } else { &mut a.end };
            t.0 += bytes;
            t.1 += count;
            a.site = site;
            if a.best_stack
                .is_none_or(|(b, s)| bytes > b || (bytes == b && o.stack < s))
            {
                a.best_stack = Some((bytes, o.stack));
            }
        }
    };
    add(&end, false);
    let at = at.filter(|_| *moment != Moment::End);
    if let Some((_, set)) = &at {
        add(set, true);
    }
    let has_at = at.is_some();
    let mut rows: Vec<(String, Acc)> = acc.into_iter().collect();
    let n = rows.len();
    rows.sort_by(|(la, a), (lb, b)| {
        let key = |x: &Acc| (x.at.0, x.end.0);
        key(b).cmp(&key(a)).then_with(|| la.cmp(lb))
    });
    rows.truncate(top);
    let is_peak = *moment == Moment::Peak;
    let rows = rows
        .into_iter()
        .map(|(label, a)| {
            let site = a.site.map(|k| grouper.sites.label(k, false));
            GroupRow {
                device,
                group: site.clone().unwrap_or_else(|| label.clone()),
                location: site.is_some().then_some(label),
                site,
                end_bytes: a.end.0,
                end_count: a.end.1,
                at_bytes: has_at.then_some(a.at.0),
                at_count: has_at.then_some(a.at.1),
                peak_bytes: (has_at && is_peak).then_some(a.at.0),
                peak_count: (has_at && is_peak).then_some(a.at.1),
                example_stack: a
                    .best_stack
                    .map(|(_, s)| grouper.sites.frames(s))
                    .unwrap_or_default(),
            }
        })
        .collect();
    let at_index = at.as_ref().map(|(i, _)| *i);
    let at_bytes = at.as_ref().map(|(_, s)| s.bytes);
    let at_count = at.as_ref().map(|(_, s)| s.count);
    let label = moment.to_string();
    GroupReport {
        device,
        group_by,
        moment: label,
        end_bytes: end.bytes,
        end_count: end.count,
        at_event_index: at_index,
        at_time_s: at_time_s.filter(|_| has_at),
        at_bytes,
        at_count,
        peak_event_index: at_index.filter(|_| is_peak),
        peak_bytes: at_bytes.filter(|_| is_peak),
        peak_count: at_count.filter(|_| is_peak),
        groups: n,
        sites: n,
        rows,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_read_and_say_where_they_are_wrong() {
        let r = parse_rules("# mine\nattention = sdpa|attn\n\nmlp = mlp\\.py\n").unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[1].name, "mlp");
        assert!(r[0].pattern.is_match("/x/sdpa_attention.py:1:f"));
        let e = parse_rules("a = (\n").unwrap_err().to_string();
        assert!(e.starts_with("line 1:"), "{e}");
        assert!(parse_rules("nothing here\n").is_err());
        assert!(parse_rules("# only a comment\n").is_err());
    }

    #[test]
    fn annotation_spans_nest_and_close() {
        let an = |stage: &str, name: &str, t| Annotation {
            device: Some(0),
            stage: stage.into(),
            name: name.into(),
            time_us: Some(t),
        };
        let list = [
            an("START", "step", 10),
            an("START", "inner", 12),
            an("END", "inner", 14),
            an("END", "step", 20),
        ];
        let (starts, labels) = annotation_spans(&list, 0);
        assert_eq!(starts, vec![10, 12, 14, 20]);
        assert_eq!(labels, ["<none>", "step", "step > inner", "step", "<none>"]);
    }
}
