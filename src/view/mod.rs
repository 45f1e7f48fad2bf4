//! `memtrack view`: a local web UI over one capture, served as the user looks (the shape of
//! `go tool pprof -http`). An allocator snapshot shows its Active Memory Timeline at any zoom
//! (every allocation drawn or summed into a band, never dropped: [`index`], its events' x and
//! bytes in a temporary file, [`event_series`]), what is live at a moment and the segments
//! then ([`details`]); a torch.profiler trace the same timeline of its `[memory]` events, each
//! allocation named by the op it was made in ([`profile`]); a stats file its per-op series
//! ([`series`]).
//!
//! [`server`] answers HTTP: the page and its script ([`page`], embedded in the binary: no CDN,
//! works offline, nothing to build) and JSON. HTTP comes from `tiny_http`: one small,
//! maintained, synchronous crate (four small dependencies, no async runtime), where hyper or
//! axum would bring tokio and several times the compile time and binary size for a server that
//! answers one local user. A hand-written std::net server would be smaller still but would
//! parse HTTP itself, which is where the bugs are.
//!
//! Data flows one way: `commands::view` loads and indexes, then hands the result here;
//! [`server`] uses [`index`], [`details`], [`profile`], [`series`] and [`page`], which use
//! only `analysis`
//! and `model`.

pub mod details;
pub mod event_series;
pub mod index;
pub mod page;
pub mod profile;
pub mod series;
pub mod server;
