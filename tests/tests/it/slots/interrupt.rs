//! Kill-point torture: a controller killed (dropped: no further call, its lease left to end) at
//! every persisted phase and inside the copy, the drain, the soak and the purge, each time
//! continued by a new controller with `resume`, and where it is allowed with `rollback` (or
//! `abort` before the flip), under load, on one range moving back and forth between two tables.
//! Every acknowledged write is read back from its owner at the end; once cleanup has begun a
//! rollback is refused with the command that finishes the move.
//!
//! Prints, per kill point, how long after the kill the moved slot's writes were acknowledged
//! again, and a summary line (kill points, acknowledged writes, lost).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use heatsink::slots::mover::{BatchFault, Budget, Mover, TailFaults};
use heatsink::slots::{MoveError, Path, Phase, slot_of};
use heatsink_sim::load::Sample;
use heatsink_testkit::fixture;

use super::{SERIAL, Scene, quarter, start_load};

/// Where a controller dies.
#[derive(Debug, Clone, Copy)]
enum At {
    /// Just after it persisted this phase.
    Reached(Phase),
    /// This long into the step that leaves this phase.
    Inside(Phase, u64),
}

/// What the next controller does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Then {
    Resume,
    Rollback,
    Abort,
}

/// Holds the tail back while armed (a drain that takes a while, so a kill lands inside it).
#[derive(Default)]
struct Slow(AtomicBool);

impl TailFaults for Slow {
    fn batch(&self, _shard: &str, _n: u64) -> BatchFault {
        if self.0.load(Ordering::Relaxed) {
            BatchFault::Lose
        } else {
            BatchFault::Deliver
        }
    }
}

/// One kill: where, on which path, and how it is continued.
#[derive(Debug, Clone, Copy)]
struct Kill {
    at: At,
    path: Path,
    then: Then,
}

const fn kill(at: At, path: Path, then: Then) -> Kill {
    Kill { at, path, then }
}

fn forward_points() -> Vec<Kill> {
    use At::*;
    use Phase::*;
    use Then::*;
    let f = Path::Forward;
    vec![
        kill(Reached(Planned), f, Resume),
        kill(Reached(Recorded), f, Abort),
        kill(Inside(Recorded, 400), f, Resume),
        kill(Reached(Copied), f, Resume),
        kill(Reached(CaughtUp), f, Resume),
        kill(Reached(Diffed), f, Abort),
        kill(Reached(Fenced), f, Resume),
        kill(Inside(Fenced, 300), f, Resume),
        kill(Reached(Fenced), f, Abort),
        kill(Reached(Flipped), f, Rollback),
        kill(Reached(Flipped), f, Resume),
        kill(Inside(Flipped, 300), f, Rollback),
        kill(Reached(Cleaning), f, Rollback),
        kill(Inside(Cleaning, 300), f, Rollback),
        kill(Reached(Cleaned), f, Resume),
    ]
}

fn rollback_points() -> Vec<Kill> {
    use At::*;
    use Phase::*;
    use Then::*;
    let r = Path::Rollback;
    vec![
        kill(Reached(RollingBack), r, Rollback),
        kill(Reached(RollbackFenced), r, Resume),
        kill(Inside(RollbackFenced, 300), r, Rollback),
        kill(Reached(RollbackFlipped), r, Rollback),
        kill(Inside(RollbackFlipped, 300), r, Resume),
        kill(Reached(RollbackCleaning), r, Resume),
        kill(Inside(RollbackCleaning, 300), r, Rollback),
    ]
}

/// What one kill cost the writers: ms from the kill to the next acknowledgement of a write of
/// the moved slot.
fn resumed_after(samples: &[Sample], killed_ms: u64) -> Option<u64> {
    samples
        .iter()
        .filter(|s| quarter().contains(s.slot))
        .map(|s| s.issued_ms + s.latency_us / 1_000)
        .filter(|acked| *acked >= killed_ms)
        .min()
        .map(|acked| acked - killed_ms)
}

/// How the torture runs on a lane.
///
/// On dynoxide (and any lane with isolated transactions) one scene holds every kill point: the
/// range moves back and forth between the same two tables under 20 writes/s.
///
/// On moto every kill point gets a scene of its own (fresh tables and directory), a smaller
/// preload and a lower rate. moto's `TransactWriteItems` deep-copies every table it names, and a
/// cancelled one (each fenced write refused, each tombstone purge that meets a live item) puts
/// the copy back, while every stream iterator issued before it (moto keeps each one it ever
/// issued) keeps the old table, with its whole stream history, alive. On one scene the copies
/// grow with the history they carry: moto grew by about 45 MB a second, past 10 GB in four
/// minutes, and was killed for memory. Fresh tables per kill point keep each copy small.
///
/// moto also runs a request to its end after its client has gone: a killed controller's last
/// transaction can still be deep-copying when the next controller takes the lease, and its
/// cancellation then puts back the directory as it was, token and all, so the next controller
/// finds its lease "taken over". DynamoDB isolates transactions; on moto the test waits
/// `after_kill` before the next controller starts.
///
/// LocalStack (moto inside) skips it: the moto lane runs the same code.
#[derive(Debug, Clone, Copy)]
struct Shape {
    /// Rows of the moved slot on the source before the load starts.
    preload: usize,
    /// Writes per second through the routers.
    rate: f64,
    /// One scene per kill point instead of one for all.
    scene_per_kill: bool,
    /// How long a killed controller's last request may still run inside the emulator.
    after_kill: Duration,
}

fn shape(fx: &heatsink_testkit::Fixture) -> Option<Shape> {
    match fx.stack.lane.as_str() {
        "localstack" => {
            eprintln!(
                "skip on the localstack lane: moto inside it, and the moto lane runs the torture one scene per kill point (see shape)"
            );
            None
        }
        "moto" => Some(Shape {
            preload: 40,
            rate: 8.0,
            scene_per_kill: true,
            after_kill: Duration::from_secs(3),
        }),
        _ => Some(ONE_SCENE),
    }
}

/// The shape on a lane with isolated transactions.
const ONE_SCENE: Shape = Shape {
    preload: 120,
    rate: 20.0,
    scene_per_kill: false,
    after_kill: Duration::ZERO,
};

/// What a run of kill points cost the writers.
#[derive(Debug, Default)]
struct Tally {
    kills: usize,
    acked: u64,
    moved: usize,
    failed: u64,
    worst_ms: u64,
}

impl Tally {
    fn add(&mut self, other: Tally) {
        self.kills += other.kills;
        self.acked += other.acked;
        self.moved += other.moved;
        self.failed += other.failed;
        self.worst_ms = self.worst_ms.max(other.worst_ms);
    }

    fn print(&self) {
        // `load.finish` checked every acknowledged write against its owner (and no slot owned twice).
        eprintln!(
            "kill-point torture on the {} lane: {} kill points, {} acknowledged writes ({} of the moved slot), 0 lost, {} not acknowledged; writes resumed at most {} ms after a kill (with the lane's wait after a kill, see Shape)",
            std::env::var("HEATSINK_LANE").unwrap_or_else(|_| "?".into()),
            self.kills,
            self.acked,
            self.moved,
            self.failed,
            self.worst_ms,
        );
    }
}

/// Runs `points` on this lane's shape: on one scene, or one scene (and fixture) per kill point.
async fn torture_on_lane(fx: &heatsink_testkit::Fixture, name: &str, points: Vec<Kill>) {
    let Some(shape) = shape(fx) else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let mut tally = Tally::default();
    if shape.scene_per_kill {
        for (i, k) in points.into_iter().enumerate() {
            // A fixture of its own: fresh tables and directory, deleted after this kill point.
            let own = heatsink_testkit::Fixture::with_stack(fx.stack.clone());
            eprintln!("{name}: kill point {i} on {}", own.prefix());
            let s = Scene::new(&own, false).await;
            tally.add(torture(&s, vec![k], shape).await);
        }
    } else {
        let s = Scene::new(fx, false).await;
        tally = torture(&s, points, shape).await;
    }
    tally.print();
}

async fn torture(s: &Scene, points: Vec<Kill>, shape: Shape) -> Tally {
    s.preload(shape.preload).await;
    let load = start_load(s.router.clone(), "key-", 16, shape.rate);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut owner = s.a.clone();
    let mut kills: Vec<(Kill, u64, Phase)> = vec![];
    for k in points.iter().copied() {
        let to = if owner == s.a {
            s.b.clone()
        } else {
            s.a.clone()
        };
        let mut spec = s.spec(false);
        spec.to = to.clone();
        // The steps a kill lands inside take a few seconds here.
        spec.budget = match k.at {
            At::Inside(Phase::Recorded, _) => Budget {
                wcu_per_sec: 60.0,
                ..spec.budget
            },
            At::Inside(Phase::Cleaning | Phase::RollbackCleaning, _) => Budget {
                wcu_per_sec: 40.0,
                ..spec.budget
            },
            At::Inside(Phase::Flipped | Phase::RollbackFlipped, _) => Budget {
                soak: Duration::from_secs(1),
                ..spec.budget
            },
            _ => spec.budget,
        };
        let slow = Arc::new(Slow::default());
        let mut m = s.start_spec(spec).await.with_faults(slow.clone());
        let id = m.record().id.clone();
        let (phase, inside) = match k.at {
            At::Reached(p) => (p, None),
            At::Inside(p, ms) => (p, Some(ms)),
        };
        // Drive to the phase (the rollback path starts from the flip).
        while m.record().phase != phase {
            let path = if k.path == Path::Rollback && m.record().phase.target_owns() {
                Path::Rollback
            } else {
                m.record().phase.path()
            };
            m.step_on(path).await.expect("step to the kill point");
        }
        if let Some(ms) = inside {
            if matches!(phase, Phase::Fenced | Phase::RollbackFenced) {
                slow.0.store(true, Ordering::Relaxed);
            }
            let path = if k.path == Path::Rollback {
                Path::Rollback
            } else {
                phase.path()
            };
            let res = tokio::time::timeout(Duration::from_millis(ms), m.step_on(path)).await;
            if let Ok(done) = res {
                done.expect("step");
                eprintln!("{id}: the step finished before the kill at {ms} ms");
            }
        }
        let reached = m.record().phase;
        let killed_ms = heatsink_now();
        drop(m);
        eprintln!(
            "{id}: killed at {:?} ({}), then {:?}",
            k.at,
            reached.name(),
            k.then
        );
        tokio::time::sleep(shape.after_kill).await;
        let mut next = s.open(&id).await;
        let refused_rollback = matches!(next.record().phase, Phase::Cleaning | Phase::Cleaned);
        let done = match k.then {
            Then::Resume => held!(next.run().await).map(|_| ()),
            Then::Abort => held!(next.abort().await),
            Then::Rollback if refused_rollback => {
                let err = held!(next.rollback().await).expect_err("rollback after cleanup began");
                assert!(
                    matches!(&err, MoveError::Refused(r) if r.command == format!("heatsink move resume {id}")),
                    "{err}"
                );
                held!(next.run().await).map(|_| ())
            }
            Then::Rollback => held!(next.rollback().await),
        };
        done.unwrap_or_else(|e| panic!("{id}: continuing after {k:?}: {e}"));
        let end = next.record().phase;
        assert!(end.is_final(), "{id} ended at {}", end.name());
        if end == Phase::Done {
            owner = to;
        }
        let map = s.dir.load().await.expect("map");
        assert_eq!(
            map.entry_of(quarter().first).owner,
            owner,
            "{id} after {k:?}"
        );
        kills.push((k, killed_ms, end));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (report, acks) = load.finish(&s.router).await;
    let moved = acks
        .iter()
        .filter(|a| quarter().contains(slot_of(&a.key)))
        .count();
    let mut worst = 0;
    for (k, killed_ms, end) in &kills {
        let after = resumed_after(&report.samples, *killed_ms);
        worst = worst.max(after.unwrap_or(0));
        eprintln!(
            "kill {:?} on {:?}, then {:?} ({}): writes to the slot acknowledged again after {} ms",
            k.at,
            k.path,
            k.then,
            end.name(),
            after.map_or("-".into(), |a| a.to_string())
        );
    }
    Tally {
        kills: kills.len(),
        acked: report.acked,
        moved,
        failed: report.failed,
        worst_ms: worst,
    }
}

fn heatsink_now() -> u64 {
    u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis(),
    )
    .unwrap_or(u64::MAX)
}

#[tokio::test]
async fn a_move_killed_at_every_phase_and_inside_copy_drain_soak_and_purge_loses_no_write() {
    let fx = fixture!(
        "a_move_killed_at_every_phase_and_inside_copy_drain_soak_and_purge_loses_no_write"
    );
    torture_on_lane(
        &fx,
        "a_move_killed_at_every_phase_and_inside_copy_drain_soak_and_purge_loses_no_write",
        forward_points(),
    )
    .await;
}

#[tokio::test]
async fn a_rollback_killed_at_every_phase_and_inside_its_drain_soak_and_purge_loses_no_write() {
    let fx = fixture!(
        "a_rollback_killed_at_every_phase_and_inside_its_drain_soak_and_purge_loses_no_write"
    );
    torture_on_lane(
        &fx,
        "a_rollback_killed_at_every_phase_and_inside_its_drain_soak_and_purge_loses_no_write",
        rollback_points(),
    )
    .await;
}

/// The headline: a mover killed during the purge of a three-hour cleanup, then the
/// documented recovery. `move rollback` is refused (the source's copy is partly gone) and
/// names `move resume`, which goes straight back to the purge: no soak, no tail reading the
/// purge's own deletes as changes, nothing lost.
#[tokio::test]
async fn killed_inside_the_purge_rollback_is_refused_and_resume_finishes_it_without_loss() {
    let fx =
        fixture!("killed_inside_the_purge_rollback_is_refused_and_resume_finishes_it_without_loss");
    let Some(lane) = shape(&fx) else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let s = Scene::new(&fx, false).await;
    let tally = torture(
        &s,
        vec![kill(
            At::Inside(Phase::Cleaning, 500),
            Path::Forward,
            Then::Rollback,
        )],
        // Enough rows that the purge outlives the kill at 500 ms on every lane.
        Shape {
            scene_per_kill: false,
            preload: 120,
            ..lane
        },
    )
    .await;
    tally.print();
    let moved = Mover::list(&s.dir).await.expect("list");
    assert_eq!(moved.len(), 1);
    assert_eq!(moved[0].phase, Phase::Done);
    assert!(moved[0].cleaned > 0);
}
