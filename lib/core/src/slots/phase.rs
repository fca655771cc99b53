//! The mover's state machine: phases, the three paths through them (forward, abort, rollback),
//! which tails may run in each, and when a delete is allowed.
//!
//! Every phase is persisted before the work of the next one starts, and the phases in which a
//! step deletes moved data (`cleaning`, `aborting`, `rollback_cleaning`) are persisted before
//! the first delete, so an interrupted purge resumes as the same purge: never as a rollback,
//! and never with a tail running that could read the purge's own deletes.

use serde::{Deserialize, Serialize};

/// How a move carries the data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum MoveMode {
    /// Snapshot, tail, diff, fence, flip: the target holds every item before it owns the slots.
    #[default]
    Copy,
    /// No copy, for TTL'd data: fence and flip at once; reads read the target, then the source,
    /// until the source's items have expired.
    Attrition,
}

/// Where a move is. Each phase is persisted before the next starts, and each step is
/// idempotent, so a mover killed anywhere resumes from the last persisted phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// The move record exists and the range is marked moving (routers switch to fenced writes).
    Planned,
    /// The source stream's positions are recorded (before the snapshot starts).
    Recorded,
    /// Every item of the slots was copied by the parallel scan.
    Copied,
    /// The tail has applied the stream to within the lag target.
    CaughtUp,
    /// Both sides were compared; the result is in the record.
    Diffed,
    /// The source's fence items are written: it refuses every write to the slots.
    Fenced,
    /// The drain proved every source stream shard read past the fence, and the directory names
    /// the target at epoch + 1; the target's stream is tailed back into the source.
    Flipped,
    /// The soak is over; the source's copy of the slots is being deleted. Persisted before the
    /// first delete: from here the move can only go forward (rollback is refused).
    Cleaning,
    /// The source's copy of the slots is deleted.
    Cleaned,
    /// Finished.
    Done,
    /// An abort has begun (before the flip): the target's copy and this move's fence items are
    /// being deleted; the range is unmarked last, in one transaction with `aborted`.
    Aborting,
    /// Abandoned before the flip; the source kept the slots.
    Aborted,
    /// A rollback has begun: the range is marked moving again on the target (the record and
    /// the mark in one transaction); routers switch to fenced writes.
    RollingBack,
    /// The target's fence items are written (to the source at epoch + 2).
    RollbackFenced,
    /// The drain proved every target stream shard read past its fence, and the directory names
    /// the source again at epoch + 2.
    RollbackFlipped,
    /// The reverse soak is over; the target's copy of the slots is being deleted (persisted
    /// before the first delete).
    RollbackCleaning,
    /// Returned to the source after the flip.
    RolledBack,
}

/// Which way through the phases a move is going.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Path {
    /// Towards `done`.
    Forward,
    /// Towards `aborted` (before the flip).
    Abort,
    /// Towards `rolled_back` (after the flip, before cleanup).
    Rollback,
}

/// A stream tail of a move.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Way {
    /// The source's stream into the target.
    Forward,
    /// The target's stream into the source.
    Reverse,
}

/// One of the two tables of a move.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    /// The table the slots leave.
    Source,
    /// The table the slots go to.
    Target,
}

/// A destructive step of a move.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Delete {
    /// Deleting one side's copy of the slots.
    Purge(Side),
    /// Deleting this move's fence items from the source.
    SourceFences,
}

/// What a delete must be shown before it runs ([`may_delete`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Evidence {
    /// The forward drain proved every source stream shard read past the fence.
    pub forward_proven: bool,
    /// The rollback's drain proved every target stream shard read past the target's fence.
    pub reverse_proven: bool,
    /// The directory, read for this decision, names the target as the owner.
    pub target_owns: bool,
    /// The directory, read for this decision, names the source as the owner.
    pub source_owns: bool,
    /// The range is still marked moving by this move in that read.
    pub marked_by_this_move: bool,
}

impl Phase {
    /// The path a move in this phase is on.
    pub fn path(self) -> Path {
        use Phase::*;
        match self {
            Aborting | Aborted => Path::Abort,
            RollingBack | RollbackFenced | RollbackFlipped | RollbackCleaning | RolledBack => {
                Path::Rollback
            }
            _ => Path::Forward,
        }
    }

    /// The phase after this one on the forward path, `None` at the end.
    pub fn next(self, mode: MoveMode) -> Option<Phase> {
        use Phase::*;
        match (mode, self) {
            (MoveMode::Copy, Planned) => Some(Recorded),
            (MoveMode::Copy, Recorded) => Some(Copied),
            (MoveMode::Copy, Copied) => Some(CaughtUp),
            (MoveMode::Copy, CaughtUp) => Some(Diffed),
            (MoveMode::Copy, Diffed) => Some(Fenced),
            (MoveMode::Attrition, Planned) => Some(Fenced),
            (_, Fenced) => Some(Flipped),
            (MoveMode::Copy, Flipped) => Some(Cleaning),
            (MoveMode::Copy, Cleaning) => Some(Cleaned),
            (MoveMode::Copy, Cleaned) => Some(Done),
            (MoveMode::Attrition, Flipped) => Some(Done),
            _ => None,
        }
    }

    /// The phase after this one on `path` (`None`: the path does not continue from here).
    pub fn next_on(self, path: Path, mode: MoveMode) -> Option<Phase> {
        use Phase::*;
        match path {
            Path::Forward if self.path() == Path::Forward => self.next(mode),
            Path::Forward => None,
            Path::Abort => match self {
                Planned | Recorded | Copied | CaughtUp | Diffed | Fenced => Some(Aborting),
                Aborting => Some(Aborted),
                _ => None,
            },
            Path::Rollback => match self {
                Flipped => Some(RollingBack),
                RollingBack => Some(RollbackFenced),
                RollbackFenced => Some(RollbackFlipped),
                RollbackFlipped => Some(RollbackCleaning),
                RollbackCleaning => Some(RolledBack),
                _ => None,
            },
        }
    }

    /// Whether the move has ended (done, aborted or rolled back).
    pub fn is_final(self) -> bool {
        matches!(self, Phase::Done | Phase::Aborted | Phase::RolledBack)
    }

    /// Whether the directory names the target (for the forward flip) in this phase: from
    /// `flipped` until the rollback's flip back.
    pub fn target_owns(self) -> bool {
        use Phase::*;
        matches!(
            self,
            Flipped | Cleaning | Cleaned | Done | RollingBack | RollbackFenced
        )
    }

    /// Whether the step that leaves this phase (on the path the phase is on, or the one named)
    /// may run the tail `way`. A tail runs only while both copies are kept: never in a step
    /// that deletes either copy, so the purge's own deletes are never read back as changes.
    pub fn may_tail(self, way: Way, path: Path) -> bool {
        use Phase::*;
        match (self, path, way) {
            // Catch-up, the diff's re-reads, the pre-fence catch-up and the drain.
            (Copied | CaughtUp | Diffed | Fenced, Path::Forward, Way::Forward) => true,
            // The soak after the flip: the target's writes go back to the source, so a
            // rollback loses nothing.
            (Flipped, Path::Forward | Path::Rollback, Way::Reverse) => true,
            // A flip an older mover recorded without the drain's proof is proven in the soak
            // (the source is fenced; nothing is deleted before `cleaning`).
            (Flipped, Path::Forward, Way::Forward) => true,
            // The rollback's catch-up, fence and drain.
            (RollingBack | RollbackFenced, Path::Rollback, Way::Reverse) => true,
            // The reverse soak: the source's writes reach the target, which stale readers may
            // still read until it is purged.
            (RollbackFlipped, Path::Rollback, Way::Forward) => true,
            _ => false,
        }
    }

    /// Which copy the step leaving this phase deletes, if any.
    pub fn purges(self) -> Option<Side> {
        use Phase::*;
        match self {
            Cleaning => Some(Side::Source),
            Aborting | RollbackCleaning => Some(Side::Target),
            _ => None,
        }
    }

    /// The phase's name, as `move status` prints it.
    pub fn name(self) -> &'static str {
        use Phase::*;
        match self {
            Planned => "planned",
            Recorded => "recorded",
            Copied => "copied",
            CaughtUp => "caught_up",
            Diffed => "diffed",
            Fenced => "fenced",
            Flipped => "flipped",
            Cleaning => "cleaning",
            Cleaned => "cleaned",
            Done => "done",
            Aborting => "aborting",
            Aborted => "aborted",
            RollingBack => "rolling_back",
            RollbackFenced => "rollback_fenced",
            RollbackFlipped => "rollback_flipped",
            RollbackCleaning => "rollback_cleaning",
            RolledBack => "rolled_back",
        }
    }

    /// Every phase, in declaration order.
    pub const ALL: [Phase; 17] = [
        Phase::Planned,
        Phase::Recorded,
        Phase::Copied,
        Phase::CaughtUp,
        Phase::Diffed,
        Phase::Fenced,
        Phase::Flipped,
        Phase::Cleaning,
        Phase::Cleaned,
        Phase::Done,
        Phase::Aborting,
        Phase::Aborted,
        Phase::RollingBack,
        Phase::RollbackFenced,
        Phase::RollbackFlipped,
        Phase::RollbackCleaning,
        Phase::RolledBack,
    ];
}

/// Why a requested transition was refused, with the command that gets the move out of it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("move {move_id} is {phase}: {reason}; next: {command}")]
pub struct Refusal {
    /// The move.
    pub move_id: String,
    /// Its phase.
    pub phase: &'static str,
    /// What is not allowed.
    pub reason: &'static str,
    /// The exact recovery command.
    pub command: String,
}

fn refusal(move_id: &str, phase: Phase, reason: &'static str, command: String) -> Refusal {
    Refusal {
        move_id: move_id.to_owned(),
        phase: phase.name(),
        reason,
        command,
    }
}

/// Whether `move abort` may run in `phase`: before the flip, or to finish an abort.
pub fn check_abort(move_id: &str, phase: Phase) -> Result<(), Refusal> {
    use Phase::*;
    let refuse = |reason, command: String| Err(refusal(move_id, phase, reason, command));
    match phase {
        Planned | Recorded | Copied | CaughtUp | Diffed | Fenced | Aborting => Ok(()),
        Flipped => refuse(
            "the directory already names the target, so abort would lose its writes",
            format!("heatsink move rollback {move_id}"),
        ),
        RollingBack | RollbackFenced | RollbackFlipped | RollbackCleaning => refuse(
            "a rollback is under way; finish it",
            format!("heatsink move rollback {move_id}"),
        ),
        Cleaning => refuse(
            "cleanup has begun (the source's copy is being deleted); finish it",
            format!("heatsink move resume {move_id}"),
        ),
        Cleaned | Done => refuse(
            "the source copy is gone; move the slots back with a new move",
            "heatsink move list --json".to_owned(),
        ),
        Aborted | RolledBack => refuse(
            "the move has already ended",
            "heatsink move list --json".to_owned(),
        ),
    }
}

/// Whether `move rollback` may run in `phase`: after the flip and before cleanup begins, or
/// to finish a rollback.
pub fn check_rollback(move_id: &str, phase: Phase) -> Result<(), Refusal> {
    use Phase::*;
    let refuse = |reason, command: String| Err(refusal(move_id, phase, reason, command));
    match phase {
        Flipped | RollingBack | RollbackFenced | RollbackFlipped | RollbackCleaning => Ok(()),
        Cleaning => refuse(
            "cleanup has begun: part of the source's copy may be deleted, so only the target holds every write; finish the move",
            format!("heatsink move resume {move_id}"),
        ),
        Cleaned | Done => refuse(
            "the source copy was cleaned up; start a move back to the source",
            "heatsink move list --json".to_owned(),
        ),
        Aborting => refuse(
            "an abort is under way; finish it",
            format!("heatsink move abort {move_id}"),
        ),
        Aborted | RolledBack => refuse(
            "the move has already ended",
            "heatsink move list --json".to_owned(),
        ),
        Planned | Recorded | Copied | CaughtUp | Diffed | Fenced => refuse(
            "the directory has not flipped yet, so there is nothing to roll back",
            format!("heatsink move abort {move_id}"),
        ),
    }
}

/// Whether `move resume` has work to do in `phase` (it continues whichever path the move is
/// on: forward, abort or rollback).
pub fn check_resume(move_id: &str, phase: Phase) -> Result<(), Refusal> {
    if phase.is_final() {
        return Err(refusal(
            move_id,
            phase,
            "the move has already ended",
            format!("heatsink move status {move_id}"),
        ));
    }
    Ok(())
}

/// Whether `delete` may run now, in `phase`, with `evidence` (read for this decision). The only
/// gate in front of the mover's destructive calls:
///
/// * the source's copy: only in `cleaning` (persisted first), with the target owning the slots
///   and the forward drain's proof recorded;
/// * the target's copy: in `aborting` while the range is still marked by this move on the
///   source (the target never owned it), or in `rollback_cleaning` with the source owning the
///   slots again and the rollback drain's proof recorded;
/// * this move's fence items on the source: in `aborting` (same condition), or in
///   `rollback_cleaning` (the source owns the slots again at a higher epoch).
pub fn may_delete(
    move_id: &str,
    phase: Phase,
    delete: Delete,
    evidence: Evidence,
) -> Result<(), Refusal> {
    let refuse = |reason, command: String| Err(refusal(move_id, phase, reason, command));
    let resume = format!("heatsink move resume {move_id}");
    let unflipped_abort =
        phase == Phase::Aborting && evidence.source_owns && evidence.marked_by_this_move;
    match delete {
        Delete::Purge(Side::Source) => {
            if phase != Phase::Cleaning {
                return refuse(
                    "the source's copy is deleted only in the cleaning phase",
                    resume,
                );
            }
            if !evidence.target_owns {
                return refuse(
                    "the directory does not name the target, so the source's copy is the only one",
                    format!("heatsink slots status; then heatsink move resume {move_id}"),
                );
            }
            if !evidence.forward_proven {
                return refuse(
                    "no proof that the forward tail read past the fence on every source stream shard",
                    resume,
                );
            }
            Ok(())
        }
        Delete::Purge(Side::Target) => {
            if unflipped_abort {
                return Ok(());
            }
            if phase == Phase::RollbackCleaning {
                if !evidence.source_owns {
                    return refuse(
                        "the directory does not name the source, so the target's copy is the only one",
                        format!("heatsink slots status; then heatsink move rollback {move_id}"),
                    );
                }
                if !evidence.reverse_proven {
                    return refuse(
                        "no proof that the rollback's tail read past the target's fence on every target stream shard",
                        format!("heatsink move rollback {move_id}"),
                    );
                }
                return Ok(());
            }
            refuse(
                "the target's copy is deleted only by an abort before the flip or at the end of a rollback",
                resume,
            )
        }
        Delete::SourceFences => {
            if unflipped_abort || (phase == Phase::RollbackCleaning && evidence.source_owns) {
                Ok(())
            } else {
                refuse(
                    "the source's fence is removed only by an abort before the flip or at the end of a rollback",
                    resume,
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_forward_path_visits_every_phase_once_and_ends() {
        for (mode, len) in [(MoveMode::Copy, 10), (MoveMode::Attrition, 4)] {
            let mut p = Phase::Planned;
            let mut seen = vec![p];
            while let Some(n) = p.next(mode) {
                assert!(n > p, "phases only go forward");
                p = n;
                seen.push(p);
            }
            assert_eq!(p, Phase::Done);
            assert_eq!(seen.len(), len, "{mode:?}: {seen:?}");
        }
    }

    #[test]
    fn abort_only_before_the_flip_and_rollback_only_after_it_and_before_cleanup() {
        use Phase::*;
        for p in [Planned, Recorded, Copied, CaughtUp, Diffed, Fenced] {
            assert!(check_abort("m", p).is_ok());
            let r = check_rollback("m", p).expect_err("before flip");
            assert_eq!(r.command, "heatsink move abort m");
        }
        let r = check_abort("m", Flipped).expect_err("after flip");
        assert_eq!(r.command, "heatsink move rollback m");
        assert!(r.to_string().contains("heatsink move rollback m"));
        assert!(check_rollback("m", Flipped).is_ok());
        // Once cleanup has begun, rollback is refused and resume is the way on.
        let r = check_rollback("m", Cleaning).expect_err("cleanup begun");
        assert_eq!(r.command, "heatsink move resume m");
        assert!(check_resume("m", Cleaning).is_ok());
        for p in [Cleaned, Done, Aborted, RolledBack] {
            assert!(check_abort("m", p).is_err() && check_rollback("m", p).is_err());
        }
        // An interrupted abort or rollback is finished by the same command (or resume).
        assert!(check_abort("m", Aborting).is_ok() && check_rollback("m", Aborting).is_err());
        for p in [
            RollingBack,
            RollbackFenced,
            RollbackFlipped,
            RollbackCleaning,
        ] {
            assert!(check_rollback("m", p).is_ok() && check_abort("m", p).is_err());
            assert!(check_resume("m", p).is_ok());
        }
        assert!(check_resume("m", Done).is_err() && check_resume("m", Copied).is_ok());
    }

    #[test]
    fn the_rollback_path_is_the_cut_over_in_reverse() {
        let mut p = Phase::Flipped;
        let mut seen = vec![];
        while let Some(n) = p.next_on(Path::Rollback, MoveMode::Copy) {
            p = n;
            seen.push(p);
        }
        use Phase::*;
        assert_eq!(
            seen,
            [
                RollingBack,
                RollbackFenced,
                RollbackFlipped,
                RollbackCleaning,
                RolledBack
            ]
        );
        // The rollback drains the target's stream (reverse) before its flip, and soaks with
        // the source's stream (forward) after it, before the target's purge.
        assert!(RollbackFenced.may_tail(Way::Reverse, Path::Rollback));
        assert!(RollbackFlipped.may_tail(Way::Forward, Path::Rollback));
        assert_eq!(RollbackCleaning.purges(), Some(Side::Target));
    }

    fn phase() -> impl Strategy<Value = Phase> {
        prop::sample::select(Phase::ALL.to_vec())
    }

    fn path() -> impl Strategy<Value = Path> {
        prop::sample::select(vec![Path::Forward, Path::Abort, Path::Rollback])
    }

    fn mode() -> impl Strategy<Value = MoveMode> {
        prop::sample::select(vec![MoveMode::Copy, MoveMode::Attrition])
    }

    fn evidence() -> impl Strategy<Value = Evidence> {
        (
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(|(f, r, t, s, m)| Evidence {
                forward_proven: f,
                reverse_proven: r,
                target_owns: t,
                source_owns: s && !t,
                marked_by_this_move: m,
            })
    }

    proptest! {
        /// No step that deletes a copy runs a tail: the purge's own deletes are never read back
        /// as changes (the forward tail would turn them into tombstones on the target).
        #[test]
        fn no_tail_runs_in_a_step_that_deletes_a_copy(p in phase(), path in path()) {
            if p.purges().is_some() {
                prop_assert!(!p.may_tail(Way::Forward, path) && !p.may_tail(Way::Reverse, path));
            }
        }

        /// Every path only moves on, ends in a final phase, and never leaves its own path;
        /// once a purge phase is reached, the only way on is the next phase of that path.
        #[test]
        fn every_path_ends_and_a_purge_phase_only_goes_on(start in phase(), path in path(), mode in mode()) {
            let mut p = start;
            let mut steps = 0;
            while let Some(n) = p.next_on(path, mode) {
                prop_assert!(n != p);
                if p.path() != Path::Forward || path != Path::Forward {
                    prop_assert_eq!(n.path(), path);
                }
                if p.purges().is_some() {
                    // Neither abort nor rollback can start from a purge phase.
                    let others: Vec<Path> = [Path::Forward, Path::Abort, Path::Rollback]
                        .into_iter().filter(|q| *q != p.path()).collect();
                    for q in others {
                        prop_assert_eq!(p.next_on(q, mode), None);
                    }
                }
                p = n;
                steps += 1;
                prop_assert!(steps < 20);
            }
            if steps > 0 {
                prop_assert!(p.is_final(), "{:?} from {:?} stops at {:?}", path, start, p);
            }
        }

        /// A copy is deleted only in the phase persisted for it, and only with the evidence
        /// that another complete copy owns the slots.
        #[test]
        fn a_delete_is_allowed_only_in_its_phase_with_its_proof(p in phase(), e in evidence()) {
            let src = may_delete("m", p, Delete::Purge(Side::Source), e).is_ok();
            prop_assert_eq!(src, p == Phase::Cleaning && e.target_owns && e.forward_proven);
            if src {
                prop_assert!(check_rollback("m", p).is_err(), "rollback after the purge began");
            }
            let dst = may_delete("m", p, Delete::Purge(Side::Target), e).is_ok();
            prop_assert_eq!(
                dst,
                (p == Phase::Aborting && e.source_owns && e.marked_by_this_move)
                    || (p == Phase::RollbackCleaning && e.source_owns && e.reverse_proven)
            );
            if dst {
                prop_assert!(!e.target_owns, "never the copy the directory names");
            }
            let fences = may_delete("m", p, Delete::SourceFences, e).is_ok();
            prop_assert!(!fences || e.source_owns, "fences go only where the source owns");
            for d in [Delete::Purge(Side::Source), Delete::Purge(Side::Target), Delete::SourceFences] {
                if let Err(r) = may_delete("m", p, d, e) {
                    prop_assert!(r.command.starts_with("heatsink "), "{}", r);
                }
            }
        }
    }
}
