//! `memtrack view`: a local web UI over one capture, served as the user looks (the shape of
//! `go tool pprof -http`). An allocator snapshot shows its Active Memory Timeline at any zoom
//! (every allocation drawn or summed into a band, never dropped: [`index`], its events' x and
//! bytes in a temporary file, [`event_series`]), what is live at a moment and the segments
//! then ([`details`]); a torch.profiler trace the same timeline of its `[memory]` events, each
//! allocation named by the op it was made in ([`profile`]); a stats file its per-op series
//! ([`series`]).
//!
//! [`server`] answers HTTP: the page and its script ([`page`], embedded in the binary: no CDN,
//! works offline, nothing to build) and JSON, over [`http`]: a small HTTP/1.1 layer of its own
//! on std::net that bounds what a client can make it hold (head size, timeouts, connections,
//! `Host`). tiny_http, used before, read a request line or header of any size whole and kept
//! every idle connection and its thread, with no way to bound either; hyper or axum would bring
//! tokio and several times the compile time for a server that answers one local user.
//!
//! Data flows one way: `commands::view` loads and indexes, then hands the result here;
//! [`server`] uses [`index`], [`details`], [`profile`], [`series`] and [`page`], which use
//! only `analysis`
//! and `model`.

pub mod details;
pub mod event_series;
pub mod http;
pub mod index;
pub mod page;
pub mod profile;
pub mod ranges;
pub mod segment_index;
pub mod series;
pub mod server;
pub mod snapshot_index;
