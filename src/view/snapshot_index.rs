//! A snapshot device's indexes, made in one pass over its events: the allocations
//! ([`AllocIndex`], paired by address) and the segments ([`SegmentIndex`]), each given its
//! site, and each allocation its category. The two indexes are tiled alike; this file joins
//! them, so that neither imports the other.

use super::event_series::EventSeries;
use super::index::{AllocIndex, Marks, Pairing};
use super::segment_index::{SegmentIndex, SegmentPairing};
use crate::analysis::categories::{PhaseTable, PhaseWalk};
use crate::analysis::sites::Sites;
use crate::analysis::timeline::Timeline;
use crate::model::snapshot::{Action, Snapshot, StackId};
use crate::model::trace::TraceEvents;

/// The whole of a snapshot device's events seen once: alloc paired with free by address.
/// With it, the segment timeline of the same events ([`SegmentIndex`]: reserved bytes by
/// segment), paired in the same pass.
pub fn build(
    snap: &Snapshot,
    device: u32,
    timeline: Timeline,
    events: &mut dyn TraceEvents,
) -> std::io::Result<(AllocIndex, SegmentIndex)> {
    // the Active Memory Timeline is allocated memory only; the segment timeline reserved
    let series = EventSeries::write(timeline.points().map(|p| (p.x, p.allocated)))?;
    let reserved = EventSeries::write(timeline.points().map(|p| (p.x, p.reserved)))?;
    let Timeline {
        series: timeline_series,
        x_is_time,
        peak_allocated,
        peak_reserved,
        ooms,
        annotations,
        ..
    } = timeline;
    // the timeline's own series goes before the pairing's table grows (what a pattern leaves
    // in `timeline` would live to the end of the function)
    drop(timeline_series);
    let mut pairing = Pairing::judging();
    let mut segments = SegmentPairing::default();
    // where each allocating and freeing event ran: the categories' evidence
    let phases = PhaseTable::new(snap);
    let mut walk = PhaseWalk::default();
    events.visit(device, &mut |i, e, stream, _| {
        let stack = e.stack.0;
        match e.action {
            Action::Alloc => {
                let made = walk.event(&phases, e.stack);
                pairing.alloc(i, e.addr, e.size, stack, made)
            }
            Action::FreeRequested => {
                let freed = walk.event(&phases, e.stack);
                pairing.free(i, e.addr, e.size, stack, freed)
            }
            Action::SegmentAlloc => segments.made(i, e.addr, e.size, stream, stack, false),
            Action::SegmentMap => segments.made(i, e.addr, e.size, stream, stack, true),
            Action::SegmentFree | Action::SegmentUnmap => {
                segments.freed(i, e.addr, e.size, stream, stack)
            }
            _ => {}
        }
        Ok(())
    })?;
    let mut sites = Sites::new(snap);
    let (allocs, labels) = pairing.finish(|origin| {
        let key = sites.site(StackId(origin));
        sites.label(key, false)
    });
    let segments = segments.finish(snap, device, &mut sites, reserved, x_is_time, peak_reserved);
    let index = AllocIndex {
        series,
        device,
        device_label: format!("cuda:{device}"),
        allocs,
        sites: labels,
        marks: Marks {
            x_is_time,
            peak_allocated,
            ooms,
            annotations,
        },
    };
    Ok((index, segments))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::timeline::timeline;
    use crate::formats::snapshot_fixture as fixture;
    use crate::view::index::{Axis, BandBy, Tile, CATEGORIES};

    #[test]
    fn every_sample_adds_up_to_allocated_and_zooming_in_draws_more() {
        let snap = fixture("cs336_medium_512_training.pickle");
        let (index, _) = build(&snap, 0, timeline(&snap, 0, true), &mut &snap).unwrap();
        let (a, b) = index.overview().x_range;
        let whole = index.tile(a, b, 800, 400);
        let narrow = index.tile(a + (b - a) * 0.4, a + (b - a) * 0.45, 800, 400);
        for t in [&whole, &narrow] {
            assert!(!t.samples.x.is_empty());
            assert_samples_add_up(t);
        }
        // the peak is a sample of the whole view
        let peak = index.marks.peak_allocated.as_ref().unwrap();
        assert_eq!(whole.samples.total.iter().max(), Some(&peak.bytes));
        // a narrower window resolves smaller allocations: its threshold is no higher and
        // its samples are closer together
        assert!(narrow.events < whole.events);
        let step = |t: &Tile| (t.x1 - t.x0) / t.samples.x.len() as f64;
        assert!(step(&narrow) < step(&whole));
    }

    /// Each sample's total is what is drawn, banded and untracked there: nothing dropped.
    fn assert_samples_add_up(t: &Tile) {
        for j in 0..t.samples.x.len() {
            let drawn: i64 = (t.drawn.iter())
                .filter(|d| (d.j0 as usize..d.j1 as usize).contains(&j))
                .map(|d| d.size as i64)
                .sum();
            let banded: i64 = t.bands.iter().map(|b| b.bytes[j]).sum();
            assert_eq!(
                drawn + banded + t.untracked[j],
                t.samples.total[j],
                "sample {j}"
            );
        }
    }

    #[test]
    fn on_the_event_axis_banded_by_category_samples_still_add_up() {
        let snap = fixture("cs336_medium_512_training.pickle");
        let (index, _) = build(&snap, 0, timeline(&snap, 0, true), &mut &snap).unwrap();
        let n = index.events();
        // every allocation has the category its details name (top --group-by category's)
        for id in (0..index.allocs.len()).step_by(97) {
            let a = &index.allocs[id];
            let detail = crate::view::details::alloc(&snap, &index, id).unwrap();
            assert_eq!(
                CATEGORIES[a.category as usize], detail.category,
                "allocation {id}"
            );
        }
        let t = index.tile_on(0.0, (n - 1) as f64, 700, 300, Axis::Event, BandBy::Category);
        assert_eq!(t.events, n);
        // x is the event index: each sample's x is its event
        assert!((t.samples.x.iter().zip(&t.samples.event)).all(|(&x, &e)| x == e as f64));
        assert!(t.bands.iter().all(|b| b.site.is_none()));
        assert!(t.bands.len() <= CATEGORIES.len() + 1);
        assert_samples_add_up(&t);
        // a window of events 100..=199 holds those events and the one before
        let w = index.tile_on(100.0, 199.0, 50, 300, Axis::Event, BandBy::Site);
        assert_eq!(w.events, 101);
        assert!(w.samples.event.iter().all(|&e| (99..=199).contains(&e)));
    }

    /// Reserved bytes at each sample: the segments drawn, the bands and what no segment holds.
    fn parts(t: &Tile, j: usize) -> (i64, i64, i64) {
        let drawn: i64 = (t.drawn.iter())
            .filter(|d| (d.j0 as usize..d.j1 as usize).contains(&j))
            .map(|d| d.size as i64)
            .sum();
        let banded: i64 = t.bands.iter().map(|b| b.bytes[j]).sum();
        (drawn, banded, t.untracked[j])
    }

    /// Every reserved byte is in a segment the index knows, at every sample: segments made
    /// and freed in the trace (`empty_cache`), mapped and unmapped in pieces (expandable
    /// segments), made before it; and the hover's facts are the segment's.
    #[test]
    fn every_reserved_byte_is_in_a_segment_at_every_sample() {
        for (name, device) in [
            ("cs336_medium_512_training.pickle", 0),
            ("cs336_ctx256_forward_empty_cache_start.pickle", 0),
            ("reference_expandable.pickle", 0),
            ("code_location_expandable_oom_device1.pickle", 1),
            ("h100_gpt2_train_exit.pickle", 0),
        ] {
            let snap = fixture(name);
            let (index, segments) =
                build(&snap, device, timeline(&snap, device, true), &mut &snap).unwrap();
            assert_eq!(segments.index.events(), index.events(), "{name}");
            assert_eq!(segments.facts.len(), segments.index.allocs.len());
            let n = index.events() as f64;
            let t = segments.tile(0.0, n - 1.0, 900, 400, Axis::Event);
            assert!(!t.tile.samples.total.is_empty(), "{name}");
            for j in 0..t.tile.samples.total.len() {
                let (drawn, banded, untracked) = parts(&t.tile, j);
                assert_eq!(untracked, 0, "{name}: sample {j} has bytes in no segment");
                assert_eq!(
                    drawn + banded,
                    t.tile.samples.total[j],
                    "{name}: sample {j}"
                );
            }
            // the last sample: the snapshot's own segments, by bytes
            let end: u64 = snap.segments_on(device).map(|s| s.total_size).sum();
            assert_eq!(*t.tile.samples.total.last().unwrap() as u64, end, "{name}");
            for (d, f) in t.tile.drawn.iter().zip(&t.facts) {
                assert_eq!(segments.facts[d.id as usize].address, f.address);
            }
        }
    }
}
