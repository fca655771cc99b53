//! How far a directory's operation got, proven from the directory's move records.
//!
//! A directory's operation moves its pieces one after another ([`Started::pieces`], each to
//! its [`Started::to`]). The executor that started it may die between two moves, inside one,
//! or after the last; a later period must then know what to do without trusting a timer or
//! its own memory. The move records are the proof: each move the operation made is the latest
//! record of its piece's slots to its target marked at or after the operation started.
//!
//! Walking the pieces in order, [`progress`] returns the first that is not done:
//!
//! | the piece's latest record | what it proves | [`Progress`] |
//! |---|---|---|
//! | `done` | the piece moved | next piece |
//! | another phase on its way (forward, abort or rollback) | a move of it runs or stopped mid-way | [`Progress::Running`]: continue it (`move resume`, or the abort or rollback it is in) |
//! | `aborted` or `rolled_back` | the piece did not move, and someone decided so | [`Progress::Stopped`]: the operation ended; the rest are not started |
//! | none | the piece was never started (every piece before it is done) | [`Progress::Next`]: start it |
//!
//! and [`Progress::Ended`] once every piece is done. An operation recorded without targets
//! (before they were kept) proves nothing: [`Progress::Unknown`] holds until an operator says.
//!
//! ```
//! use heatsink_core::autopilot::progress::{progress, MoveSeen, Progress};
//! use heatsink_core::autopilot::{Kind, Span, Started};
//! use heatsink_core::slots::{Phase, SlotRange};
//!
//! let op = Started {
//!     id: "autopilot-1000".into(),
//!     span: Span::new(0, 199)?,
//!     kind: Kind::Move,
//!     at_ms: 1_000,
//!     op: None,
//!     pieces: vec![Span::new(0, 99)?, Span::new(100, 199)?],
//!     to: vec!["b".into(), "c".into()],
//! };
//! // The first piece moved; the executor died before starting the second.
//! let seen = [MoveSeen {
//!     id: "mv-1".into(),
//!     slots: SlotRange::new(0, 99)?,
//!     to: "b".into(),
//!     marked_ms: 1_010,
//!     phase: Phase::Done,
//! }];
//! assert_eq!(progress(&op, &seen), Progress::Next { index: 1 });
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Limits: the operation's start and its moves' marks are read from the clock of the executor
//! that made them (a move marked before its operation's recorded start is not counted as
//! its); a piece whose slots an operator moved by hand to the same target after the operation
//! started counts as the operation's.

use serde::{Deserialize, Serialize};

use super::Started;
use crate::slots::{Phase, SlotRange};

/// What a move record says, as far as [`progress`] needs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MoveSeen {
    /// The move's id.
    pub id: String,
    /// The slots it moves.
    pub slots: SlotRange,
    /// Its target table.
    pub to: String,
    /// When it marked the range moving (Unix ms).
    pub marked_ms: u64,
    /// Its phase.
    pub phase: Phase,
}

/// How far an operation in flight got ([`progress`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Progress {
    /// Every piece's move is done: the operation ended.
    Ended {
        /// Pieces moved.
        moved: usize,
    },
    /// Piece `index`'s move ended without moving (aborted or rolled back): the operation
    /// ended there, and the pieces after it are not started.
    Stopped {
        /// The piece (0-based).
        index: usize,
        /// Its move.
        id: String,
        /// How it ended.
        phase: Phase,
    },
    /// Piece `index`'s move has not ended: it is running, or stopped part-way and waits to be
    /// continued on the path it is on.
    Running {
        /// The piece (0-based).
        index: usize,
        /// Its move.
        id: String,
        /// Its phase.
        phase: Phase,
    },
    /// Every piece before `index` moved and piece `index` has no move: it is the next to
    /// start.
    Next {
        /// The piece (0-based).
        index: usize,
    },
    /// The operation keeps no targets for its pieces (or they disagree in number): nothing
    /// proves how far it got; hold until an operator finishes it.
    Unknown,
}

impl Progress {
    /// Whether the operation ended ([`Progress::Ended`] or [`Progress::Stopped`]).
    pub fn ended(&self) -> bool {
        matches!(self, Progress::Ended { .. } | Progress::Stopped { .. })
    }
}

/// How far `started` got, from the directory's move records `seen` (see the module docs).
/// Pure: the executor lists the records, and continues, starts or ends from the answer.
pub fn progress(started: &Started, seen: &[MoveSeen]) -> Progress {
    if started.pieces.is_empty() || started.pieces.len() != started.to.len() {
        return Progress::Unknown;
    }
    for (index, (piece, to)) in started.pieces.iter().zip(&started.to).enumerate() {
        let latest = seen
            .iter()
            .filter(|m| {
                u128::from(m.slots.first) == piece.lo()
                    && u128::from(m.slots.last) == piece.hi()
                    && &m.to == to
                    && m.marked_ms >= started.at_ms
            })
            .max_by_key(|m| m.marked_ms);
        let Some(m) = latest else {
            return Progress::Next { index };
        };
        match m.phase {
            Phase::Done => {}
            Phase::Aborted | Phase::RolledBack => {
                return Progress::Stopped {
                    index,
                    id: m.id.clone(),
                    phase: m.phase,
                };
            }
            phase => {
                return Progress::Running {
                    index,
                    id: m.id.clone(),
                    phase,
                };
            }
        }
    }
    Progress::Ended {
        moved: started.pieces.len(),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::autopilot::{Kind, Span};

    const PHASES: [Phase; 17] = Phase::ALL;

    /// An operation of `n` pieces of 10 slots each, to `t0`, `t1`, …, started at 1,000.
    fn op(n: usize) -> Started {
        Started {
            id: "op".into(),
            span: Span::new(0, 10 * n as u128).unwrap(),
            kind: Kind::Move,
            at_ms: 1_000,
            op: None,
            pieces: (0..n as u128)
                .map(|i| Span::new(10 * i, 10 * i + 9).unwrap())
                .collect(),
            to: (0..n).map(|i| format!("t{i}")).collect(),
        }
    }

    fn seen(i: usize, phase: Phase, marked_ms: u64) -> MoveSeen {
        let first = 10 * i as u16;
        MoveSeen {
            id: format!("mv-{i}-{marked_ms}"),
            slots: SlotRange::new(first, first + 9).unwrap(),
            to: format!("t{i}"),
            marked_ms,
            phase,
        }
    }

    #[test]
    fn an_operation_without_targets_proves_nothing() {
        let mut o = op(2);
        o.to.clear();
        assert_eq!(
            progress(&o, &[seen(0, Phase::Done, 2_000)]),
            Progress::Unknown
        );
        assert_eq!(progress(&op(0), &[]), Progress::Unknown);
    }

    #[test]
    fn a_move_marked_before_the_operation_or_of_other_slots_or_target_is_not_its() {
        let o = op(1);
        let before = seen(0, Phase::Done, 999);
        let mut elsewhere = seen(0, Phase::Done, 2_000);
        elsewhere.to = "other".into();
        let mut wider = seen(0, Phase::Done, 2_000);
        wider.slots = SlotRange::new(0, 10).unwrap();
        assert_eq!(
            progress(&o, &[before, elsewhere, wider]),
            Progress::Next { index: 0 }
        );
    }

    #[test]
    fn the_latest_record_of_a_piece_decides() {
        let o = op(1);
        // Aborted by an operator, then moved again by hand: the later record says done.
        let recs = [seen(0, Phase::Aborted, 2_000), seen(0, Phase::Done, 3_000)];
        assert_eq!(progress(&o, &recs), Progress::Ended { moved: 1 });
        let recs = [seen(0, Phase::Done, 2_000), seen(0, Phase::Copied, 3_000)];
        assert!(matches!(progress(&o, &recs), Progress::Running { .. }));
    }

    proptest! {
        /// The walk stops at the first piece not done, and says what its record proves: every
        /// piece before it is done, none after it is looked at, and the operation ends only
        /// when every piece is done (or one was aborted or rolled back).
        #[test]
        fn progress_is_the_first_piece_not_done(
            n in 1usize..6,
            phases in proptest::collection::vec(proptest::option::of(0usize..PHASES.len()), 6),
        ) {
            let o = op(n);
            let recs: Vec<MoveSeen> = phases
                .iter()
                .take(n)
                .enumerate()
                .filter_map(|(i, p)| p.map(|p| seen(i, PHASES[p], 2_000 + i as u64)))
                .collect();
            let phase_of = |i: usize| phases[i].map(|p| PHASES[p]);
            let first = (0..n).find(|&i| phase_of(i) != Some(Phase::Done));
            let got = progress(&o, &recs);
            match first {
                None => prop_assert_eq!(got, Progress::Ended { moved: n }),
                Some(i) => match phase_of(i) {
                    None => prop_assert_eq!(got, Progress::Next { index: i }),
                    Some(p @ (Phase::Aborted | Phase::RolledBack)) => {
                        prop_assert!(got.ended());
                        let id = recs.iter().find(|r| r.to == format!("t{i}")).unwrap().id.clone();
                        prop_assert_eq!(got, Progress::Stopped { index: i, id, phase: p });
                    }
                    Some(p) => {
                        prop_assert!(!got.ended());
                        let running = matches!(got, Progress::Running { index, phase, .. } if index == i && phase == p);
                        prop_assert!(running, "{:?}", got);
                    }
                },
            }
        }
    }
}
