//! The wire protocol between the agent and the collector (docs/record.md, "Wire format"): every
//! constant both sides share. The agent's copy is `python/memtrack/_memtrack_agent/protocol.py`;
//! the tests below read both files and fail when they differ.

// ---- record codes (i64 stream); an op is any value >= 0: (func id << 2) | mutable << 1 | bw
pub const ADD: i64 = -1;
pub const DEL: i64 = -2;
pub const REF: i64 = -3;
pub const SIZE: i64 = -4;
pub const PUSH: i64 = -5;
pub const POP: i64 = -6;
pub const RESET: i64 = -7;
pub const MOD: i64 = -8;
pub const SNAP: i64 = -9;
pub const INPUT: i64 = -10;
pub const OUTPUT: i64 = -11;
pub const ITER: i64 = -12;
pub const MARK: i64 = -13;
pub const OPT_BEGIN: i64 = -14;
pub const OPT_END: i64 = -15;
pub const CYCLE: i64 = -16;
pub const TIME: i64 = -17;
pub const JSON: i64 = -18;
pub const NOTE: i64 = -19;
pub const THREAD: i64 = -20;

// ---- how a module became active (PUSH's `how`)
pub const PUSH_FORWARD: i64 = 0;
pub const PUSH_BACKWARD: i64 = 1;
/// Pushed in backward by a module whose outputs are its inputs (nn.Identity, Dropout(p=0)):
/// active for MemTracker's peaks, but it runs no node, so no op is named after it.
pub const PUSH_PASS_THROUGH: i64 = 2;

// ---- why a tensor was noted (NOTE's `why`): how its memory was measured, if at all
pub const WHY_SPARSE: i64 = 0;
pub const WHY_NESTED: i64 = 1;
pub const WHY_META: i64 = 2;
pub const WHY_NO_STORAGE: i64 = 3;
pub const WHY_ERROR: i64 = 4;
pub const WHY_HOST: i64 = 5;

// ---- socket frame kinds: u32 little-endian payload length, u8 kind, payload
pub const FRAME_ALIVE: u8 = 0;
pub const FRAME_JSON: u8 = 1;
pub const FRAME_RECORDS: u8 = 2;

// ---- JSON message kinds (the message's "t")
pub const MSG_HELLO: &str = "hello";
pub const MSG_OP: &str = "op";
pub const MSG_NAME: &str = "name";
pub const MSG_DEVICE: &str = "device";
pub const MSG_CYCLES: &str = "cycles";
pub const MSG_EXCEPTION: &str = "exception";
pub const MSG_SIGNAL: &str = "signal";
pub const MSG_OOM: &str = "oom";
pub const MSG_SNAPSHOT: &str = "snapshot";
pub const MSG_AGENT_ERROR: &str = "agent_error";
pub const MSG_BYE: &str = "bye";
pub const MSG_NO_TORCH: &str = "no_torch";
pub const MSG_TORCH_NOT_IMPORTED: &str = "torch_not_imported";
pub const MSG_CUDA_UNAVAILABLE: &str = "cuda_unavailable";
pub const MSG_TORCH_UNSUPPORTED: &str = "torch_unsupported";
pub const MSG_THREAD: &str = "thread";
pub const MSG_THREADS_BEFORE: &str = "threads_before";
pub const MSG_ESTIMATE_READ: &str = "read";
pub const MSG_ESTIMATE_BOUND: &str = "bound";
pub const MSG_ESTIMATE_UNWRITTEN: &str = "unwritten";
pub const MSG_ESTIMATE_STOPPED: &str = "stopped";
pub const MSG_ESTIMATE_GROUP: &str = "group";
pub const MSG_ESTIMATE_RANK: &str = "rank";

/// The agent's pseudo-op sampled after each compiled graph call (its name in files).
pub const COMPILED_GRAPH: &str = "compiled_graph";

// MemTracker's categories and module states are the model's: `model::CATEGORIES` (in code
// order) and `model::ModState` (discriminants are the codes); the tests check the agent's.

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use crate::model::{ModState, CATEGORIES};

    const PYTHON: &str = include_str!("../../python/memtrack/_memtrack_agent/protocol.py");
    const RUST: &str = include_str!("protocol.rs");

    /// `NAME = value` lines at the top level of protocol.py (comments dropped).
    fn python_constants() -> BTreeMap<String, String> {
        PYTHON
            .lines()
            .filter(|l| !l.starts_with([' ', '#', '"']))
            .filter_map(|l| {
                let l = l.split(" #").next().unwrap().trim();
                let (name, value) = l.split_once(" = ")?;
                let constant = name.bytes().all(|b| b.is_ascii_uppercase() || b == b'_');
                constant.then(|| (name.to_string(), value.trim().to_string()))
            })
            .collect()
    }

    /// `pub const NAME: type = value;` lines of this file.
    fn rust_constants() -> BTreeMap<String, String> {
        RUST.lines()
            .filter_map(|l| {
                let rest = l.strip_prefix("pub const ")?;
                let (name, rest) = rest.split_once(':')?;
                let (_, value) = rest.split_once(" = ")?;
                Some((name.to_string(), value.trim_end_matches(';').to_string()))
            })
            .collect()
    }

    const PYTHON_ONLY: [(&str, &str); 7] = [
        ("PARAM", "Parameter"),
        ("BUFFER", "Buffer"),
        ("GRAD", "Gradient"),
        ("ACT", "Activation"),
        ("TEMP", "Temp"),
        ("OPT", "Optstate"),
        ("OTH", "Other"),
    ];

    const STATES: [(&str, ModState); 8] = [
        ("PRE_FW", ModState::PreForward),
        ("POST_FW", ModState::PostForward),
        ("PEAK_FW", ModState::PeakForward),
        ("PRE_BW", ModState::PreBackward),
        ("POST_BW", ModState::PostBackward),
        ("PEAK_BW", ModState::PeakBackward),
        ("PRE_FW_AC", ModState::PreForwardAc),
        ("POST_FW_AC", ModState::PostForwardAc),
    ];

    #[test]
    fn agent_and_collector_share_every_constant() {
        let mut python = python_constants();
        let rust = rust_constants();
        assert!(rust.len() >= 35, "rust constants not found: {rust:?}");
        // categories and states: the model's
        for (name, category) in PYTHON_ONLY {
            let code: usize = python
                .remove(name)
                .unwrap_or_else(|| panic!("{name}"))
                .parse()
                .unwrap();
            assert_eq!(CATEGORIES[code], category, "{name}");
        }
        for (name, state) in STATES {
            let code: i64 = python
                .remove(name)
                .unwrap_or_else(|| panic!("{name}"))
                .parse()
                .unwrap();
            assert_eq!(ModState::from_code(code), Some(state), "{name}");
        }
        for (name, value) in &rust {
            assert_eq!(
                python.get(name),
                Some(value),
                "{name}: protocol.rs says {value}"
            );
        }
        for (name, value) in &python {
            assert_eq!(
                rust.get(name),
                Some(value),
                "{name}: protocol.py says {value}"
            );
        }
    }

    /// The reasons a NOTE carries are the model's, in code order.
    #[test]
    fn note_reasons_are_the_models() {
        use super::{WHY_ERROR, WHY_HOST, WHY_META, WHY_NESTED, WHY_NO_STORAGE, WHY_SPARSE};
        use crate::model::Unmeasured;
        let reasons: Vec<&str> = Unmeasured::REASONS.iter().map(|(r, _)| *r).collect();
        for (code, name) in [
            (WHY_SPARSE, "sparse"),
            (WHY_NESTED, "nested"),
            (WHY_META, "meta"),
            (WHY_NO_STORAGE, "no_storage"),
            (WHY_ERROR, "error"),
            (WHY_HOST, "host"),
        ] {
            assert_eq!(reasons[code as usize], name);
        }
        assert_eq!(reasons.len(), 6);
    }

    /// Every message the agent sends names its kind through protocol.py, never a literal.
    #[test]
    fn agent_sends_no_literal_message_kind() {
        for (path, text) in crate::record::agent::FILES {
            assert!(
                !text.contains("\"t\": \""),
                "{path}: a message kind written as a literal; use protocol.MSG_*"
            );
        }
    }
}
