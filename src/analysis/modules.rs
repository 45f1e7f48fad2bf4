//! `modules`: pick iterations, modules (by depth) and states out of a record's module
//! breakdown, in MemTracker's order (natural sort of module names).

use std::cmp::Ordering;

use serde::Serialize;

use crate::model::{IterationModules, ModState, ModuleSnapshot, ModuleStats, RecordInfo};

/// Which iterations of a record's module breakdown to show.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IterationSel {
    /// Only the last iteration recorded.
    Last,
    /// Every iteration recorded, in order.
    All,
    /// 1-based.
    One(usize),
}

/// What is wrong with a query of the module breakdown. The messages say what is wrong with
/// the value; the caller says which argument gave it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    /// An iteration that is neither a number from 1 nor `last` nor `all`.
    #[error("'{0}' is not a number from 1, 'last' or 'all'")]
    BadIteration(String),
    /// A state name MemTracker does not have; the message lists those it has.
    #[error("unknown state '{name}'; use {known}")]
    UnknownState {
        /// The name as given.
        name: String,
        /// Every state's name, lower case, comma-separated.
        known: String,
    },
    /// An iteration (1-based) the file does not have.
    #[error("the file has {recorded} iteration{}", if *recorded == 1 { "" } else { "s" })]
    NoSuchIteration {
        /// The iteration asked for, 1-based.
        asked: usize,
        /// How many iterations the file has.
        recorded: usize,
    },
}

impl std::str::FromStr for IterationSel {
    type Err = QueryError;
    fn from_str(s: &str) -> Result<Self, QueryError> {
        match s.to_ascii_lowercase().as_str() {
            "last" => Ok(IterationSel::Last),
            "all" => Ok(IterationSel::All),
            n => n
                .parse::<usize>()
                .ok()
                .filter(|&n| n >= 1)
                .map(IterationSel::One)
                .ok_or_else(|| QueryError::BadIteration(s.into())),
        }
    }
}

/// What to pick out of a record's module breakdown.
pub struct Query {
    /// Modules deeper than this are left out (`MLP` is depth 1, `MLP.blocks` 2).
    pub depth: usize,
    /// Empty: every state.
    pub states: Vec<ModState>,
    /// Which iterations to show.
    pub iteration: IterationSel,
}

/// The module breakdown picked by a `Query`.
#[derive(Debug, Serialize)]
pub struct ModulesView {
    /// How many iterations the file has.
    pub iterations_recorded: usize,
    /// The modules were called outside any iteration (other threads' calls, where the main
    /// thread ran none: analysis::threads).
    pub outside_iterations: bool,
    /// The iterations picked, in file order.
    pub iterations: Vec<IterationView>,
    /// Memory by category at the run's highest total.
    pub peak: Option<ModuleSnapshot>,
}

/// One iteration's modules.
#[derive(Debug, Serialize)]
pub struct IterationView {
    /// The iteration's number, 1-based.
    pub iteration: usize,
    /// Index of the op the iteration starts at.
    pub first_op: usize,
    /// Modules down to the query's depth, in natural order of their names.
    pub modules: Vec<ModuleView>,
    /// Memory by category at the iteration's highest total.
    pub peak: ModuleSnapshot,
}

/// One module's stats, with its depth in the module tree.
#[derive(Debug, Serialize)]
pub struct ModuleView {
    /// The module's stats, its states in life order and cut to those asked for.
    #[serde(flatten)]
    pub stats: ModuleStats,
    /// Depth in the module tree: `MLP` is 1, `MLP.blocks` 2.
    pub depth: usize,
}

/// Parse `--state` values (MemTracker's names, any case; `peak-forward` or `Peak-Forward`).
pub fn parse_states(names: &[String]) -> Result<Vec<ModState>, QueryError> {
    names
        .iter()
        .map(|n| {
            ModState::from_name(n.trim()).ok_or_else(|| {
                let all: Vec<String> = ModState::ALL
                    .iter()
                    .map(|s| s.name().to_ascii_lowercase())
                    .collect();
                QueryError::UnknownState {
                    name: n.clone(),
                    known: all.join(", "),
                }
            })
        })
        .collect()
}

/// Pick the iterations, modules and states `q` asks for out of `record`, modules in natural order
/// of their names; an error when the iteration asked for is not in the file.
pub fn select(record: &RecordInfo, q: &Query) -> Result<ModulesView, QueryError> {
    let all = &record.modules;
    let picked: Vec<&IterationModules> = match q.iteration {
        IterationSel::All => all.iter().collect(),
        IterationSel::Last => all.last().into_iter().collect(),
        IterationSel::One(n) => {
            vec![all
                .iter()
                .find(|i| i.iteration == n)
                .ok_or(QueryError::NoSuchIteration {
                    asked: n,
                    recorded: all.len(),
                })?]
        }
    };
    let iterations = picked
        .into_iter()
        .map(|it| {
            let mut modules: Vec<ModuleView> = it
                .modules
                .iter()
                .filter(|m| m.depth() <= q.depth)
                .map(|m| {
                    let mut stats = m.clone();
                    // a module's life in order; MemTracker keeps first-occurrence order
                    stats.states.sort_by_key(|s| s.state);
                    if !q.states.is_empty() {
                        stats.states.retain(|s| q.states.contains(&s.state));
                    }
                    ModuleView {
                        depth: m.depth(),
                        stats,
                    }
                })
                // asked for some states: modules that never reached them have nothing to show
                .filter(|m: &ModuleView| q.states.is_empty() || !m.stats.states.is_empty())
                .collect();
            modules.sort_by(|a, b| natural_cmp(&a.stats.fqn, &b.stats.fqn));
            IterationView {
                iteration: it.iteration,
                first_op: it.first_op,
                modules,
                peak: it.peak.clone(),
            }
        })
        .collect();
    Ok(ModulesView {
        iterations_recorded: all.len(),
        outside_iterations: super::threads::iteration_count(record) == 0,
        iterations,
        peak: record.peak.clone(),
    })
}

#[derive(PartialEq, Eq, PartialOrd, Ord)]
enum Part {
    /// Digits compare as numbers: by length (leading zeros stripped), then text.
    Num(usize, String),
    Text(String),
}

/// MemTracker's `natural_sort_key`: digit runs as numbers, the rest case-insensitively.
fn key(s: &str) -> Vec<Part> {
    let mut parts = Vec::new();
    let mut cur = String::new();
    let mut digits = false;
    for c in s.chars() {
        if c.is_ascii_digit() != digits && !cur.is_empty() {
            parts.push(part(std::mem::take(&mut cur), digits));
        }
        digits = c.is_ascii_digit();
        cur.push(c);
    }
    if !cur.is_empty() {
        parts.push(part(cur, digits));
    }
    parts
}

fn part(s: String, digits: bool) -> Part {
    if digits {
        let t = s.trim_start_matches('0').to_string();
        Part::Num(t.len(), t)
    } else {
        Part::Text(s.to_lowercase())
    }
}

/// Compare module names in natural order (MemTracker's), ties broken by plain text order.
pub fn natural_cmp(a: &str, b: &str) -> Ordering {
    key(a).cmp(&key(b)).then_with(|| a.cmp(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn natural_order_puts_10_after_2() {
        let mut v = vec![
            "Net.layers.10",
            "Net.layers.2",
            "Net",
            "Net.Head",
            "Net.layers.1",
        ];
        v.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(
            v,
            vec![
                "Net",
                "Net.Head",
                "Net.layers.1",
                "Net.layers.2",
                "Net.layers.10"
            ]
        );
    }

    #[test]
    fn iteration_and_state_parse() {
        assert_eq!("last".parse::<IterationSel>(), Ok(IterationSel::Last));
        assert_eq!("2".parse::<IterationSel>(), Ok(IterationSel::One(2)));
        assert!("0".parse::<IterationSel>().is_err());
        assert_eq!(
            parse_states(&["peak-forward".into()]).unwrap(),
            vec![ModState::PeakForward]
        );
        assert!(parse_states(&["peak".into()]).is_err());
    }
}
