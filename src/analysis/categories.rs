//! What kind of memory an allocation of a snapshot's trace is (`--group-by category`, the
//! colours of `view`), judged only from evidence: where the allocating event ran, and where
//! the freeing one did (or that the allocation was still live at the trace's end). Each
//! category comes from one rule the judgement names ([`Judgement::rule`]); where no rule
//! knows, the category is **other**, never a guess that reads as a fact.
//!
//! Where an event ran (its [`Phase`]) is what its frames say, first match wins:
//! a `torch/optim/` frame named `_init…` or `load_state_dict` (the optimizer's state set-up);
//! any other `torch/optim/` frame (the optimizer's step, `zero_grad`); `.to()`/`.cuda()`
//! (`Module._apply`), `torch/nn/parameter.py`, `torch/nn/init.py`, `reset_parameters`,
//! `_load_from_state_dict` (a parameter's set-up); backward (the autograd engine's C++ frames,
//! `torch/autograd/` `backward`/`grad`, `Tensor.backward`); a module's forward
//! (`Module._call_impl`); `torch/utils/data/`; the program's own code (with a `_to_copy` frame:
//! a copy to the device). An event with no frames at all, in a capture that records Python
//! frames, ran on a thread without Python: when the last event with frames before it was
//! backward's, the main thread was waiting in `backward()` for the autograd engine's threads
//! (CUDA's backward runs there), so it ran in backward; else nothing says where.
//!
//! The phases run in turns (forward, backward, the optimizer's step, ...): an allocation freed
//! in the same turn of the phase that made it did not outlive it. Rules, on (made, freed):
//!
//! | made in | freed | category |
//! |---|---|---|
//! | the optimizer's state set-up | any | optimizer state |
//! | the optimizer's step | in the same step | temporary |
//! | the optimizer's step | after it, or live at the end | optimizer state |
//! | a parameter's set-up | any | parameter |
//! | backward | in the same backward | temporary |
//! | backward | after it, or live at the end | gradient |
//! | a module's forward | in the same forward | temporary |
//! | a module's forward | after it (by backward, the program, …), or live at the end | activation |
//! | the program's code outside forward, backward and the optimizer | by backward | activation (saved for the gradient: a loss's intermediates) |
//! | `torch/utils/data/`, or the program's copy to the device | any | input |
//! | anything else, or freed where nothing says | | other |

use std::fmt;

use serde::Serialize;

use crate::model::snapshot::{Snapshot, StackId};

use crate::model::is_agent_file;

/// A category of memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    Parameter,
    OptimizerState,
    Gradient,
    Activation,
    Temporary,
    Input,
    Other,
}

impl Category {
    /// Every category, in the order a legend stacks them.
    pub const ALL: [Category; 7] = [
        Category::Parameter,
        Category::OptimizerState,
        Category::Gradient,
        Category::Activation,
        Category::Temporary,
        Category::Input,
        Category::Other,
    ];

    /// Its name in reports (`optimizer state`).
    pub const fn name(self) -> &'static str {
        match self {
            Category::Parameter => "parameter",
            Category::OptimizerState => "optimizer state",
            Category::Gradient => "gradient",
            Category::Activation => "activation",
            Category::Temporary => "temporary",
            Category::Input => "input",
            Category::Other => "other",
        }
    }

    /// Its place in [`Category::ALL`].
    pub fn index(self) -> u8 {
        self as u8
    }
}

/// Where an allocating or freeing event ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Phase {
    /// Nothing says (frames that match no rule, no frames outside backward).
    Unknown = 0,
    /// The program's own code outside forward, backward and the optimizer.
    Program,
    /// `torch/utils/data/`.
    DataLoader,
    /// The program's own code copying to the device (`_to_copy`).
    CopyIn,
    /// A parameter's set-up (`.to()`, `nn.init`, `reset_parameters`, loading a state dict).
    Parameter,
    /// The optimizer's state set-up (`_init_group`, `load_state_dict`).
    OptimizerInit,
    /// The optimizer's step (or `zero_grad`).
    Optimizer,
    /// A module's forward.
    Forward,
    /// Backward, as the frames say.
    Backward,
    /// No frames, while backward ran (the autograd engine's threads).
    BackwardThread,
    /// Before the trace began (an allocation the trace only frees).
    BeforeTrace,
}

impl Phase {
    const ALL: [Phase; 11] = [
        Phase::Unknown,
        Phase::Program,
        Phase::DataLoader,
        Phase::CopyIn,
        Phase::Parameter,
        Phase::OptimizerInit,
        Phase::Optimizer,
        Phase::Forward,
        Phase::Backward,
        Phase::BackwardThread,
        Phase::BeforeTrace,
    ];

    fn from_u8(v: u8) -> Phase {
        Phase::ALL
            .get(v as usize)
            .copied()
            .unwrap_or(Phase::Unknown)
    }

    /// The phase whose turns are counted: backward's threads run in backward's turn.
    fn turn_kind(self) -> Phase {
        match self {
            Phase::BackwardThread => Phase::Backward,
            Phase::OptimizerInit => Phase::Optimizer,
            p => p,
        }
    }

    /// How an allocating event in this phase reads.
    fn made_text(self) -> &'static str {
        match self {
            Phase::Unknown => "made where no frame says (no rule matches its stack)",
            Phase::Program => "made by the program's own code outside forward, backward and the optimizer",
            Phase::DataLoader => "made under torch.utils.data",
            Phase::CopyIn => "copied to the device by the program's own code (_to_copy)",
            Phase::Parameter => "made by a parameter's set-up (.to()/.cuda(), nn.init, reset_parameters, load_state_dict)",
            Phase::OptimizerInit => "made by the optimizer's state set-up (torch/optim _init_group or load_state_dict)",
            Phase::Optimizer => "made in the optimizer's step (torch/optim)",
            Phase::Forward => "made in a module's forward (nn.Module._call_impl)",
            Phase::Backward => "made by backward (autograd frames)",
            Phase::BackwardThread => "made on a thread without Python frames while backward ran (the autograd engine's)",
            Phase::BeforeTrace => "allocated before the trace began (no frames say what made it)",
        }
    }

    /// How a freeing event in this phase reads, of an allocation made in `made` (`same`: in
    /// the turn that made it; said only of the phase that made it).
    fn freed_text(self, made: Phase, same: bool) -> &'static str {
        let again = self.turn_kind() == made.turn_kind();
        match (self, again, same) {
            (Phase::Unknown, ..) => "freed where no frame says",
            (Phase::Program | Phase::CopyIn, ..) => "freed by the program's own code",
            (Phase::DataLoader, ..) => "freed under torch.utils.data",
            (Phase::Parameter, ..) => "freed by a parameter's set-up",
            (Phase::OptimizerInit | Phase::Optimizer, true, true) => {
                "freed in the same optimizer step"
            }
            (Phase::OptimizerInit | Phase::Optimizer, true, false) => {
                "freed in a later optimizer call"
            }
            (Phase::OptimizerInit | Phase::Optimizer, false, _) => {
                "freed by the optimizer (its step or zero_grad)"
            }
            (Phase::Forward, true, true) => "freed in the same forward",
            (Phase::Forward, true, false) => "freed in a later forward",
            (Phase::Forward, false, _) => "freed in a module's forward",
            (Phase::Backward, true, true) => "freed in the same backward",
            (Phase::Backward, true, false) => "freed by a later backward",
            (Phase::Backward, false, _) => "freed by backward",
            (Phase::BackwardThread, true, true) => {
                "freed in the same backward (on a thread without Python frames)"
            }
            (Phase::BackwardThread, true, false) => {
                "freed by a later backward (on a thread without Python frames)"
            }
            (Phase::BackwardThread, false, _) => {
                "freed by backward (on a thread without Python frames)"
            }
            (Phase::BeforeTrace, ..) => "freed before the trace",
        }
    }
}

/// Where one event ran: its phase, and which turn of that phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Place {
    /// The phase.
    pub phase: Phase,
    /// The turn: events of one phase with no event of another phase (with frames) between
    /// them share it.
    pub turn: u32,
}

impl Place {
    /// An event nothing is known of.
    pub const UNKNOWN: Place = Place {
        phase: Phase::Unknown,
        turn: 0,
    };
    /// What made an allocation older than the trace.
    pub const BEFORE_TRACE: Place = Place {
        phase: Phase::BeforeTrace,
        turn: 0,
    };
}

/// How an allocation was judged: where it was made and where it was freed (or that it was
/// still live), in 2 bytes; the category follows from them by the rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Judgement {
    made: u8,
    /// [`LIVE`], else the freeing phase, with [`SAME_TURN`] set when it was the making turn's.
    freed: u8,
}

const LIVE: u8 = 0xff;
const SAME_TURN: u8 = 0x80;

impl Judgement {
    /// An allocation made at `made`, freed at `freed` (None: live at the end of the trace).
    pub fn new(made: Place, freed: Option<Place>) -> Judgement {
        let freed = match freed {
            None => LIVE,
            Some(f) => {
                let same = f.turn == made.turn
                    && f.phase.turn_kind() == made.phase.turn_kind()
                    && made.phase != Phase::BeforeTrace;
                f.phase as u8 | if same { SAME_TURN } else { 0 }
            }
        };
        Judgement {
            made: made.phase as u8,
            freed,
        }
    }

    /// Its two bytes (for an index that stores them).
    pub fn to_bytes(self) -> [u8; 2] {
        [self.made, self.freed]
    }

    /// From [`Judgement::to_bytes`].
    pub fn from_bytes(b: [u8; 2]) -> Judgement {
        Judgement {
            made: b[0],
            freed: b[1],
        }
    }

    /// Where the allocation was made.
    pub fn made(self) -> Phase {
        Phase::from_u8(self.made)
    }

    /// Where it was freed and whether in the making turn; None: live at the end.
    pub fn freed(self) -> Option<(Phase, bool)> {
        (self.freed != LIVE).then(|| {
            (
                Phase::from_u8(self.freed & !SAME_TURN),
                self.freed & SAME_TURN != 0,
            )
        })
    }

    /// The category the rules give.
    pub fn category(self) -> Category {
        use Phase::*;
        let freed = self.freed();
        let outlived = match freed {
            None => true,
            Some((Unknown, _)) => return Category::Other,
            Some((_, same)) => !same,
        };
        match self.made() {
            OptimizerInit => Category::OptimizerState,
            Optimizer if outlived => Category::OptimizerState,
            Optimizer => Category::Temporary,
            Parameter => Category::Parameter,
            Backward | BackwardThread if outlived => Category::Gradient,
            Backward | BackwardThread => Category::Temporary,
            Forward if outlived => Category::Activation,
            Forward => Category::Temporary,
            DataLoader | CopyIn => Category::Input,
            Program if matches!(freed, Some((Backward | BackwardThread, _))) => {
                Category::Activation
            }
            Program | Unknown | BeforeTrace => Category::Other,
        }
    }

    /// The rule that decided, in words: the evidence and what it means.
    pub fn rule(self) -> String {
        let made = self.made();
        let freed = match self.freed() {
            None => "still live at the end of the trace",
            Some((p, same)) => p.freed_text(made, same),
        };
        let category = self.category();
        let meaning = match (category, made) {
            (Category::OptimizerState, Phase::OptimizerInit) => "the optimizer's state",
            (Category::OptimizerState, _) => "it outlived the step: the optimizer's state",
            (Category::Temporary, _) => "it did not outlive the step that made it: a temporary",
            (Category::Gradient, _) => "it outlived backward: a gradient",
            (Category::Activation, Phase::Program) => {
                "backward freed it: saved for the gradient (a loss's intermediates)"
            }
            (Category::Activation, _) => "it outlived the forward that made it: an activation",
            (Category::Parameter, _) => "a parameter (or buffer)",
            (Category::Input, _) => "the program's input",
            (Category::Other, _) => "no rule knows what this is",
        };
        format!("{}; {freed}: {meaning}", made.made_text())
    }
}

impl fmt::Display for Judgement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.rule())
    }
}

/// No frames at all (the phase of such a stack comes from the events around it).
const NO_FRAMES: u8 = 0xfe;

/// What each stack of a snapshot says of where it ran, read once for all.
#[derive(Debug, Default)]
pub struct PhaseTable {
    /// By stack id: a [`Phase`], or [`NO_FRAMES`].
    by_stack: Vec<u8>,
    /// Whether any stack has a Python frame: only then is a stack without one a thread
    /// without Python (a capture of C++ frames only says nothing by their absence).
    python_frames: bool,
}

impl PhaseTable {
    /// Every stack of `snap` read.
    pub fn new(snap: &Snapshot) -> PhaseTable {
        let stacks = &snap.stacks;
        // each frame read once: what it says, as bits
        let frame_bits: Vec<u16> = (0..stacks.frame_count())
            .map(|f| {
                let fr = stacks.frame(crate::model::snapshot::FrameId(f as u32));
                frame_bits(stacks.str(fr.filename), stacks.str(fr.name))
            })
            .collect();
        let mut python_frames = false;
        let by_stack = (0..stacks.stack_count())
            .map(|s| {
                let frames = stacks.stack(StackId(s as u32));
                if frames.is_empty() {
                    return NO_FRAMES;
                }
                let bits = (frames.iter()).fold(0, |b, f| b | frame_bits[f.0 as usize]);
                python_frames |= bits & PYTHON != 0;
                phase_of_bits(bits) as u8
            })
            .collect();
        PhaseTable {
            by_stack,
            python_frames,
        }
    }

    /// What `stack`'s frames say; None for a stack without frames.
    pub fn of(&self, stack: StackId) -> Option<Phase> {
        if stack.is_missing() {
            return None;
        }
        match self.by_stack.get(stack.0 as usize) {
            Some(&NO_FRAMES) | None => None,
            Some(&p) => Some(Phase::from_u8(p)),
        }
    }
}

const PY_OPT_INIT: u16 = 1;
const PY_OPT: u16 = 1 << 1;
const PARAM: u16 = 1 << 2;
const BACKWARD: u16 = 1 << 3;
const FORWARD: u16 = 1 << 4;
const DATA: u16 = 1 << 5;
const USER: u16 = 1 << 6;
const COPY: u16 = 1 << 7;
const PYTHON: u16 = 1 << 8;

/// What one frame says.
fn frame_bits(filename: &str, name: &str) -> u16 {
    let file = filename.replace('\\', "/");
    if !file.ends_with(".py") {
        let mut b = 0;
        if name.contains("autograd::Engine") {
            b |= BACKWARD;
        }
        if name.contains("_to_copy") {
            b |= COPY;
        }
        return b;
    }
    let mut b = PYTHON;
    if file.contains("torch/optim/") {
        b |= PY_OPT;
        if name.starts_with("_init") || name == "load_state_dict" {
            b |= PY_OPT_INIT;
        }
    }
    if (file.ends_with("torch/nn/modules/module.py") && name == "_apply")
        || file.ends_with("torch/nn/parameter.py")
        || file.ends_with("torch/nn/init.py")
        || name == "reset_parameters"
        || name == "_load_from_state_dict"
    {
        b |= PARAM;
    }
    if (file.contains("torch/autograd/")
        && matches!(name, "backward" | "_engine_run_backward" | "grad"))
        || (file.ends_with("torch/_tensor.py") && name == "backward")
    {
        b |= BACKWARD;
    }
    if file.ends_with("torch/nn/modules/module.py")
        && matches!(name, "_call_impl" | "_wrapped_call_impl")
    {
        b |= FORWARD;
    }
    if file.contains("torch/utils/data/") {
        b |= DATA;
    }
    if is_user_file(&file) {
        b |= USER;
    }
    b
}

/// A stack's phase from what its frames say together (the first rule that matches).
fn phase_of_bits(b: u16) -> Phase {
    if b & PY_OPT_INIT != 0 {
        Phase::OptimizerInit
    } else if b & PY_OPT != 0 {
        Phase::Optimizer
    } else if b & PARAM != 0 {
        Phase::Parameter
    } else if b & BACKWARD != 0 {
        Phase::Backward
    } else if b & FORWARD != 0 {
        Phase::Forward
    } else if b & DATA != 0 {
        Phase::DataLoader
    } else if b & USER != 0 && b & COPY != 0 {
        Phase::CopyIn
    } else if b & USER != 0 {
        Phase::Program
    } else {
        Phase::Unknown
    }
}

/// A device's allocating and freeing events walked in order (`alloc`, `free_requested`),
/// each placed: the phase its frames say, or for one without frames the context the events
/// with frames before it give, and the turn of that phase.
#[derive(Clone, Copy, Debug)]
pub struct PhaseWalk {
    /// The phase of the last event with frames, and the turn it is in.
    last: Phase,
    turn: u32,
}

impl Default for PhaseWalk {
    fn default() -> PhaseWalk {
        PhaseWalk {
            last: Phase::Unknown,
            turn: 0,
        }
    }
}

impl PhaseWalk {
    /// The next allocating or freeing event, made or freed at `stack` (`table`: the
    /// snapshot's stacks read).
    pub fn event(&mut self, table: &PhaseTable, stack: StackId) -> Place {
        match table.of(stack) {
            Some(phase) => {
                if phase.turn_kind() != self.last.turn_kind() {
                    self.turn += 1;
                }
                self.last = phase;
                Place {
                    phase,
                    turn: self.turn,
                }
            }
            None => {
                // without frames, in a capture of Python frames: a thread without Python; in
                // backward when the last event with frames was backward's (the main thread
                // waits in `backward()` while the engine's threads work)
                let in_backward = table.python_frames && self.last == Phase::Backward;
                Place {
                    phase: if in_backward {
                        Phase::BackwardThread
                    } else {
                        Phase::Unknown
                    },
                    turn: self.turn,
                }
            }
        }
    }
}

/// What an allocation live at the end and never seen in the trace was: its block's stack
/// read alone.
pub fn judge_block(table: &PhaseTable, stack: StackId) -> Judgement {
    let phase = table.of(stack).unwrap_or(Phase::Unknown);
    Judgement::new(Place { phase, turn: 0 }, None)
}

/// Files of the program's own code: not torch or another installed package, not the
/// standard library, not memtrack's agent, not generated code (`<string>`).
pub fn is_user_file(path: &str) -> bool {
    let p = path.replace('\\', "/");
    let lower = p.to_ascii_lowercase();
    lower.ends_with(".py")
        && !p.starts_with('<')
        && !is_agent_file(path)
        && !lower.contains("/site-packages/")
        && !lower.contains("/dist-packages/")
        && !lower.contains("/pytorch/torch/")
        && !is_stdlib(&lower)
}

/// `…/lib/python3.12/x.py` (not inside site-packages), `…/Lib/x.py` on Windows.
fn is_stdlib(lower: &str) -> bool {
    if let Some(i) = lower.find("/lib/python") {
        let rest = &lower[i + "/lib/python".len()..];
        return rest.starts_with(|c: char| c.is_ascii_digit());
    }
    lower.contains("/lib/") && lower.contains(":/") // C:/Python312/Lib/...
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::snapshot_fixture as fixture;
    use crate::model::snapshot::Action;

    /// Every allocation of device 0's trace judged: (size, made stack, judgement).
    fn judged(snap: &Snapshot) -> Vec<(u64, StackId, Judgement)> {
        let table = PhaseTable::new(snap);
        let mut walk = PhaseWalk::default();
        let mut open: rustc_hash::FxHashMap<u64, (u64, StackId, Place)> = Default::default();
        let mut out = Vec::new();
        for e in &snap.traces[0].events {
            match e.action {
                Action::Alloc => {
                    let p = walk.event(&table, e.stack);
                    open.insert(e.addr, (e.size, e.stack, p));
                }
                Action::FreeRequested => {
                    let p = walk.event(&table, e.stack);
                    if let Some((size, stack, made)) = open.remove(&e.addr) {
                        out.push((size, stack, Judgement::new(made, Some(p))));
                    }
                }
                _ => {}
            }
        }
        for (_, (size, stack, made)) in open {
            out.push((size, stack, Judgement::new(made, None)));
        }
        out
    }

    fn has_frame(snap: &Snapshot, stack: StackId, name: &str) -> bool {
        (snap.stacks.stack(stack).iter())
            .any(|&f| snap.stacks.str(snap.stacks.frame(f).name) == name)
    }

    /// The OOM capture (Python frames only: backward's events have none): nothing made under
    /// the loss's frames is "input", and the first step's activations, freed by backward on
    /// the engine's thread, are activations, not temporaries.
    #[test]
    fn the_loss_is_never_input_and_activations_freed_in_backward_are_activations() {
        let snap = fixture("h100/oom_default.pickle");
        let all = judged(&snap);
        let loss: Vec<_> = all
            .iter()
            .filter(|(_, s, _)| has_frame(&snap, *s, "cross_entropy"))
            .collect();
        assert!(loss.len() >= 3, "{loss:?}");
        for (size, _, j) in &loss {
            assert_ne!(j.category(), Category::Input, "{size} B: {}", j.rule());
        }
        // the log-softmax of the loss, freed by backward on the engine's thread
        assert!(
            loss.iter().any(|(size, _, j)| *size >= 200 << 20
                && j.category() == Category::Activation
                && j.freed() == Some((Phase::BackwardThread, false))),
            "{:?}",
            loss.iter()
                .map(|(s, _, j)| (s, j.rule()))
                .collect::<Vec<_>>()
        );
        // the linear layers' outputs of the first step's forward: freed by backward
        let forward_freed_in_backward = all
            .iter()
            .filter(|(_, _, j)| {
                j.made() == Phase::Forward && matches!(j.freed(), Some((Phase::BackwardThread, _)))
            })
            .count();
        assert!(
            forward_freed_in_backward >= 20,
            "{forward_freed_in_backward}"
        );
        assert!(all
            .iter()
            .filter(|(_, _, j)| j.made() == Phase::Forward
                && j.freed().is_some_and(|f| f.0 == Phase::BackwardThread))
            .all(|(_, _, j)| j.category() == Category::Activation));
        // backward's own allocations have no frames: placed in backward by the events around
        assert!(all.iter().any(
            |(_, _, j)| j.made() == Phase::BackwardThread && j.category() == Category::Gradient
        ));
    }

    /// cs336's hand-written AdamW (a torch.optim.Optimizer subclass): its state, made in the
    /// first step and live to the end (3.2 GiB), is optimizer state; the step's intermediates,
    /// freed in the same step, are temporaries.
    #[test]
    fn a_hand_written_optimizers_state_is_optimizer_state() {
        let snap = fixture("cs336_medium_512_training.pickle");
        let all = judged(&snap);
        let bytes = |c: Category, live: bool| -> u64 {
            (all.iter())
                .filter(|(_, _, j)| j.category() == c && j.freed().is_none() == live)
                .map(|(s, _, _)| s)
                .sum()
        };
        let state = bytes(Category::OptimizerState, true);
        assert!(state >= 3 << 30, "{state}");
        assert_eq!(bytes(Category::Temporary, true), 0);
        let in_step_temporaries = all
            .iter()
            .filter(|(_, _, j)| j.made() == Phase::Optimizer && j.category() == Category::Temporary)
            .count();
        assert!(in_step_temporaries > 0);
        for (_, _, j) in &all {
            if j.made() == Phase::Optimizer && j.freed().is_none() {
                assert_eq!(j.category(), Category::OptimizerState, "{}", j.rule());
            }
        }
    }

    #[test]
    fn user_files_are_the_programs_own() {
        assert!(is_user_file("/work/main/.devrun/progs/gpt2_train.py"));
        assert!(is_user_file("C:\\Users\\me\\proj\\train.py"));
        for not in [
            "/opt/v/lib/python3.12/site-packages/torch/nn/modules/module.py",
            "/usr/lib/python3/dist-packages/numpy/x.py",
            "/usr/lib/python3.12/runpy.py",
            "/tmp/memtrack-1/agent/_memtrack_agent.py",
            "<frozen runpy>",
            "CUDACachingAllocator.cpp",
            "C:\\Python312\\Lib\\runpy.py",
        ] {
            assert!(!is_user_file(not), "{not}");
        }
    }

    #[test]
    fn each_rule_says_its_evidence() {
        let at = |phase, turn| Place { phase, turn };
        let j = Judgement::new(at(Phase::Forward, 3), Some(at(Phase::Forward, 3)));
        assert_eq!(j.category(), Category::Temporary);
        assert!(
            j.rule().contains("freed in the same forward"),
            "{}",
            j.rule()
        );
        let j = Judgement::new(at(Phase::Forward, 3), Some(at(Phase::Forward, 7)));
        assert_eq!(j.category(), Category::Activation);
        let j = Judgement::new(at(Phase::Program, 3), None);
        assert_eq!(j.category(), Category::Other);
        assert!(j.rule().contains("no rule knows"), "{}", j.rule());
        let j = Judgement::new(at(Phase::Optimizer, 4), Some(at(Phase::Unknown, 4)));
        assert_eq!(j.category(), Category::Other);
        assert_eq!(Judgement::from_bytes(j.to_bytes()), j);
        let j = Judgement::new(Place::BEFORE_TRACE, Some(at(Phase::Forward, 0)));
        assert_eq!(j.category(), Category::Other);
        assert!(
            j.rule().starts_with("allocated before the trace"),
            "{}",
            j.rule()
        );
    }
}
