//! The mover's state machine: phases, the forward path, and when abort and rollback are allowed.

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
    /// The directory names the target at epoch + 1; reverse replication is recorded.
    Flipped,
    /// After the soak, the source's copy of the slots was deleted at a bounded rate.
    Cleaned,
    /// Finished.
    Done,
    /// Abandoned before the flip; the source kept the slots.
    Aborted,
    /// Returned to the source after the flip.
    RolledBack,
}

impl Phase {
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
            (MoveMode::Copy, Flipped) => Some(Cleaned),
            (MoveMode::Copy, Cleaned) => Some(Done),
            (MoveMode::Attrition, Flipped) => Some(Done),
            _ => None,
        }
    }

    /// Whether the move has ended (done, aborted or rolled back).
    pub fn is_final(self) -> bool {
        matches!(self, Phase::Done | Phase::Aborted | Phase::RolledBack)
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
            Cleaned => "cleaned",
            Done => "done",
            Aborted => "aborted",
            RolledBack => "rolled_back",
        }
    }
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

/// Whether `move abort` may run in `phase`: only before the flip.
pub fn check_abort(move_id: &str, phase: Phase) -> Result<(), Refusal> {
    let refuse = |reason, command: String| {
        Err(Refusal {
            move_id: move_id.to_owned(),
            phase: phase.name(),
            reason,
            command,
        })
    };
    match phase {
        Phase::Flipped => refuse(
            "the directory already names the target, so abort would lose its writes",
            format!("heatsink move rollback {move_id}"),
        ),
        Phase::Cleaned | Phase::Done => refuse(
            "the source copy is gone; move the slots back with a new move",
            "heatsink move list --json".to_owned(),
        ),
        Phase::Aborted | Phase::RolledBack => refuse(
            "the move has already ended",
            "heatsink move list --json".to_owned(),
        ),
        _ => Ok(()),
    }
}

/// Whether `move rollback` may run in `phase`: only after the flip and before cleanup.
pub fn check_rollback(move_id: &str, phase: Phase) -> Result<(), Refusal> {
    let refuse = |reason, command: String| {
        Err(Refusal {
            move_id: move_id.to_owned(),
            phase: phase.name(),
            reason,
            command,
        })
    };
    match phase {
        Phase::Flipped => Ok(()),
        Phase::Cleaned | Phase::Done => refuse(
            "the source copy was cleaned up; start a move back to the source",
            "heatsink move list --json".to_owned(),
        ),
        Phase::Aborted | Phase::RolledBack => refuse(
            "the move has already ended",
            "heatsink move list --json".to_owned(),
        ),
        _ => refuse(
            "the directory has not flipped yet, so there is nothing to roll back",
            format!("heatsink move abort {move_id}"),
        ),
    }
}

/// Whether `move resume` has work to do in `phase`.
pub fn check_resume(move_id: &str, phase: Phase) -> Result<(), Refusal> {
    if phase.is_final() {
        return Err(Refusal {
            move_id: move_id.to_owned(),
            phase: phase.name(),
            reason: "the move has already ended",
            command: format!("heatsink move status {move_id}"),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_forward_path_visits_every_phase_once_and_ends() {
        for (mode, len) in [(MoveMode::Copy, 9), (MoveMode::Attrition, 4)] {
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
    fn abort_only_before_the_flip_and_rollback_only_after_it() {
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
        for p in [Cleaned, Done, Aborted, RolledBack] {
            assert!(check_abort("m", p).is_err() && check_rollback("m", p).is_err());
        }
        assert!(check_resume("m", Done).is_err() && check_resume("m", Copied).is_ok());
    }
}
