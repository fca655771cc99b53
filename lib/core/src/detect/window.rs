//! A sliding window of one partition: a ring of `W + 1` sub-windows, each a read and a write sketch.
//!
//! Time is cut into sub-windows of `sub = window / W`; sub-window `e` covers
//! `[e × sub, (e + 1) × sub)` and lives in ring slot `e mod (W + 1)`. Recording into a slot that
//! still holds an older sub-window clears it first, so the ring holds the current sub-window and
//! the `W` before it, nothing older. A report at `now` merges those (see
//! [`super::space_saving::merge`]): the last `W` complete sub-windows plus the current partial
//! one, a span between `window` and `window + sub`.

use std::time::Duration;

use super::space_saving::SpaceSaving;
use super::{DetectError, Kind, Offered};

/// Epoch marker of a ring slot that was never used.
const UNUSED: u64 = u64::MAX;

/// One sub-window: its epoch and a sketch per kind.
#[derive(Debug, Clone)]
struct SubWindow {
    epoch: u64,
    reads: SpaceSaving,
    writes: SpaceSaving,
}

impl SubWindow {
    fn sketch(&self, kind: Kind) -> &SpaceSaving {
        match kind {
            Kind::Read => &self.reads,
            Kind::Write => &self.writes,
        }
    }
}

/// The live sketches of one kind and the time they cover.
#[derive(Debug)]
pub(crate) struct Live<'a> {
    /// Sketches of the sub-windows inside the window ending at `now`.
    pub(crate) sketches: Vec<&'a SpaceSaving>,
    /// Time covered: from the start of the oldest live (or first ever) sub-window to `now`, at
    /// least one sub-window.
    pub(crate) span: Duration,
}

/// The ring of sub-windows of one partition.
#[derive(Debug, Clone)]
pub(crate) struct Window {
    sub_nanos: u64,
    ring: Vec<SubWindow>,
    first_epoch: u64,
    latest_epoch: u64,
}

impl Window {
    /// An empty ring for `subs` sub-windows of `sub_nanos` each, sketches of `capacity` counters.
    pub(crate) fn new(
        sub_nanos: u64,
        subs: u32,
        capacity: usize,
        max_key_bytes: usize,
    ) -> Result<Self, DetectError> {
        let sketch = SpaceSaving::new(capacity, max_key_bytes)?;
        let slot = SubWindow {
            epoch: UNUSED,
            reads: sketch.clone(),
            writes: sketch,
        };
        Ok(Self {
            sub_nanos,
            ring: vec![slot; subs as usize + 1],
            first_epoch: UNUSED,
            latest_epoch: 0,
        })
    }

    /// Ring slots: `W + 1`.
    fn slots(&self) -> u64 {
        self.ring.len() as u64
    }

    /// Whether every sub-window this ring holds has left the window ending at `now_nanos`.
    pub(crate) fn is_expired(&self, now_nanos: u64) -> bool {
        self.first_epoch == UNUSED || self.latest_epoch + self.slots() <= now_nanos / self.sub_nanos
    }

    /// Counts `units` of `key` at time `now_nanos` (the key length is checked by the caller).
    pub(crate) fn record(
        &mut self,
        kind: Kind,
        key: &str,
        units: u64,
        now_nanos: u64,
    ) -> Result<Offered, DetectError> {
        let epoch = now_nanos / self.sub_nanos;
        if self.first_epoch != UNUSED && epoch + self.slots() <= self.latest_epoch {
            return Ok(Offered::TooOld);
        }
        let at = (epoch % self.slots()) as usize;
        let slot = &mut self.ring[at];
        if slot.epoch != epoch {
            slot.reads.clear();
            slot.writes.clear();
            slot.epoch = epoch;
        }
        match kind {
            Kind::Read => slot.reads.observe(key, units)?,
            Kind::Write => slot.writes.observe(key, units)?,
        }
        if self.first_epoch == UNUSED {
            self.first_epoch = epoch;
            self.latest_epoch = epoch;
        } else {
            self.first_epoch = self.first_epoch.min(epoch);
            self.latest_epoch = self.latest_epoch.max(epoch);
        }
        Ok(Offered::Recorded)
    }

    /// The sketches of `kind` inside the window that ends at `now_nanos`, and the time they cover.
    pub(crate) fn live(&self, kind: Kind, now_nanos: u64) -> Live<'_> {
        let now_epoch = now_nanos / self.sub_nanos;
        let oldest = now_epoch.saturating_sub(self.slots() - 1);
        let sketches = self
            .ring
            .iter()
            .filter(|slot| slot.epoch != UNUSED && (oldest..=now_epoch).contains(&slot.epoch))
            .map(|slot| slot.sketch(kind))
            .collect();
        let start = oldest.max(self.first_epoch).saturating_mul(self.sub_nanos);
        let span = now_nanos.saturating_sub(start).max(self.sub_nanos);
        Live {
            sketches,
            span: Duration::from_nanos(span),
        }
    }

    /// Approximate bytes used by this ring.
    pub(crate) fn footprint_bytes(&self) -> usize {
        size_of::<Self>()
            + self.ring.capacity() * size_of::<SubWindow>()
            + self
                .ring
                .iter()
                .map(|slot| {
                    slot.reads.footprint_bytes() + slot.writes.footprint_bytes()
                        - 2 * size_of::<SpaceSaving>()
                })
                .sum::<usize>()
    }

    /// Upper bound of [`Self::footprint_bytes`] for a ring of this shape.
    pub(crate) fn max_footprint_bytes(subs: u32, capacity: usize, max_key_bytes: usize) -> usize {
        size_of::<Self>()
            + (subs as usize + 1)
                * (size_of::<SubWindow>()
                    + 2 * (SpaceSaving::max_footprint_bytes(capacity, max_key_bytes)
                        - size_of::<SpaceSaving>()))
    }
}
