//! Sizing S and placing sub-keys so every shard stays under target: the shard-load sizing rule
//! (docs/write-sharding.md).
//!
//! Each shard's load is its background (other keys' traffic) plus, for each sub-key of the hot
//! key it holds, rate ÷ S. The planner tries S = `min_salts`, `min_salts + 1`, … up to
//! [`MAX_SALTS`] and returns the first S whose best placement keeps every shard at or under
//! `target × ceiling`. The best placement for a given S is water-filling: each sub-key goes to
//! the shard it leaves least loaded (ties: the lower index), which minimises the busiest shard;
//! with equal backgrounds it is the even spread, ⌊S/n⌋ or ⌈S/n⌉ sub-keys per shard.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::MAX_SALTS;
use super::error::KeyError;
use super::salt::check_salts;

/// The default fraction of a shard's ceiling a plan may use: every shard at or under 80%.
pub const DEFAULT_TARGET: f64 = 0.8;

/// Relative slack on "at or under target", so float rounding never rejects an exact fit.
const TOLERANCE: f64 = 1e-9;

/// What the planner needs to know: the hot key's rate, the shards' ceiling and their other load.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanRequest {
    /// The hot key's write rate, records/s.
    pub rate: f64,
    /// One shard's write ceiling, records/s (Kinesis: 1,000; a DynamoDB partition: 1,000 WCU).
    pub ceiling: f64,
    /// The fraction of `ceiling` each shard may reach, in (0, 1]; default 0.8.
    pub target: f64,
    /// Each shard's load from everything but the hot key, records/s; one entry per shard.
    pub background: Vec<f64>,
    /// The smallest S to consider (e.g. the shard count, to leave room for growth); default 1.
    pub min_salts: u16,
    /// Consider only S that are multiples of the shard count (so every shard holds S/n sub-keys).
    pub multiple_of_shards: bool,
}

impl PlanRequest {
    /// A request with per-shard background loads, target 0.8, smallest S from 1.
    pub fn new(rate: f64, ceiling: f64, background: Vec<f64>) -> Self {
        Self {
            rate,
            ceiling,
            target: DEFAULT_TARGET,
            background,
            min_salts: 1,
            multiple_of_shards: false,
        }
    }

    /// A request for `shards` shards that each carry `background` records/s.
    pub fn uniform(rate: f64, ceiling: f64, background: f64, shards: usize) -> Self {
        Self::new(rate, ceiling, vec![background; shards])
    }

    /// Set the target fraction of the ceiling.
    pub fn with_target(mut self, target: f64) -> Self {
        self.target = target;
        self
    }

    /// Set the smallest S to consider.
    pub fn with_min_salts(mut self, min_salts: u16) -> Self {
        self.min_salts = min_salts;
        self
    }

    /// Consider only multiples of the shard count.
    pub fn with_multiple_of_shards(mut self, on: bool) -> Self {
        self.multiple_of_shards = on;
        self
    }

    /// target × ceiling: the most a shard may carry, records/s.
    pub fn limit(&self) -> f64 {
        self.target * self.ceiling
    }
}

/// One shard's share of a plan.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardLoad {
    /// Index of the shard (into the request's `background`).
    pub shard: usize,
    /// Sub-keys of the hot key this shard holds.
    pub subkeys: u32,
    /// background + rate ÷ S × subkeys, records/s.
    pub load: f64,
    /// load ÷ ceiling (0.8 = 80%).
    pub utilisation: f64,
}

/// A salt count and a placement of its sub-keys, with every shard's resulting load.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The salt count S.
    pub salts: u16,
    /// Every shard's sub-keys and load, in shard order.
    pub per_shard: Vec<ShardLoad>,
    /// The busiest shard's utilisation.
    pub max_utilisation: f64,
}

impl Plan {
    /// Sub-keys per shard, in shard order (input for `place_salts_with_counts`).
    pub fn subkeys_per_shard(&self) -> Vec<u32> {
        self.per_shard.iter().map(|s| s.subkeys).collect()
    }
}

/// The smallest allowed S, and its placement, that keeps every shard at or under target.
///
/// Errors: a shard already over target on background alone ([`KeyError::ShardOverTarget`]),
/// total demand over `n × target × ceiling` ([`KeyError::OverCapacity`]), or no allowed S up to
/// [`MAX_SALTS`] fits ([`KeyError::NoPlanWithinMaxSalts`]).
pub fn plan(request: &PlanRequest) -> Result<Plan, KeyError> {
    validate(request)?;
    let limit = request.limit();
    if let Some((shard, &background)) = request
        .background
        .iter()
        .enumerate()
        .find(|(_, b)| !fits(**b, limit))
    {
        return Err(KeyError::ShardOverTarget {
            shard,
            background,
            limit,
        });
    }
    let n = request.background.len();
    let demand = request.rate + request.background.iter().sum::<f64>();
    let capacity = n as f64 * limit;
    if !fits(demand, capacity) {
        return Err(KeyError::OverCapacity { demand, capacity });
    }
    let mut best_utilisation = f64::INFINITY;
    for salts in request.min_salts..=MAX_SALTS {
        if request.multiple_of_shards && usize::from(salts) % n != 0 {
            continue;
        }
        let candidate = water_fill(request, salts);
        if candidate.per_shard.iter().all(|s| fits(s.load, limit)) {
            return Ok(candidate);
        }
        best_utilisation = best_utilisation.min(candidate.max_utilisation);
    }
    Err(KeyError::NoPlanWithinMaxSalts {
        min_salts: request.min_salts,
        max_salts: MAX_SALTS,
        best_utilisation,
    })
}

/// The best placement for exactly `salts` sub-keys, whether or not it stays under target.
///
/// Use it to see what a given S does, e.g. the naive S = ⌈rate ÷ ceiling⌉.
pub fn evaluate(request: &PlanRequest, salts: u16) -> Result<Plan, KeyError> {
    validate(request)?;
    check_salts(u32::from(salts))?;
    Ok(water_fill(request, salts))
}

/// Whether `load` is at or under `limit`, allowing [`TOLERANCE`] for rounding.
fn fits(load: f64, limit: f64) -> bool {
    load <= limit * (1.0 + TOLERANCE)
}

/// A shard's load with `subkeys` sub-keys of `per` records/s each (the one formula used).
fn load_of(background: f64, per: f64, subkeys: u32) -> f64 {
    background + per * f64::from(subkeys)
}

/// A candidate shard for the next sub-key, ordered so the heap pops the least loaded result.
#[derive(Debug, PartialEq)]
struct Next {
    load: f64,
    /// Sub-keys the shard holds already: the tie-break when loads are equal, so a zero-rate
    /// key (every load unchanged by a sub-key) still spreads evenly instead of piling on shard 0.
    held: u32,
    shard: usize,
}

impl Eq for Next {}

impl Ord for Next {
    fn cmp(&self, other: &Self) -> Ordering {
        // Reversed: BinaryHeap is a max-heap; we want the smallest load, then the fewest
        // sub-keys held, then the lowest index.
        other
            .load
            .total_cmp(&self.load)
            .then_with(|| other.held.cmp(&self.held))
            .then_with(|| other.shard.cmp(&self.shard))
    }
}

impl PartialOrd for Next {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Place `salts` sub-keys one at a time on the shard they leave least loaded.
fn water_fill(request: &PlanRequest, salts: u16) -> Plan {
    let per = request.rate / f64::from(salts);
    let mut subkeys = vec![0u32; request.background.len()];
    let mut heap: BinaryHeap<Next> = request
        .background
        .iter()
        .enumerate()
        .map(|(shard, &b)| Next {
            load: load_of(b, per, 1),
            held: 0,
            shard,
        })
        .collect();
    for _ in 0..salts {
        let Some(Next { shard, .. }) = heap.pop() else {
            break;
        };
        subkeys[shard] += 1;
        heap.push(Next {
            load: load_of(request.background[shard], per, subkeys[shard] + 1),
            held: subkeys[shard],
            shard,
        });
    }
    let per_shard: Vec<ShardLoad> = request
        .background
        .iter()
        .zip(&subkeys)
        .enumerate()
        .map(|(shard, (&b, &c))| {
            let load = load_of(b, per, c);
            ShardLoad {
                shard,
                subkeys: c,
                load,
                utilisation: load / request.ceiling,
            }
        })
        .collect();
    let max_utilisation = per_shard.iter().map(|s| s.utilisation).fold(0.0, f64::max);
    Plan {
        salts,
        per_shard,
        max_utilisation,
    }
}

/// Refuse non-finite, negative or out-of-range inputs.
fn validate(r: &PlanRequest) -> Result<(), KeyError> {
    let bad = |field, value, expected| {
        Err(KeyError::InvalidPlanInput {
            field,
            value,
            expected,
        })
    };
    if !(r.rate.is_finite() && r.rate >= 0.0) {
        return bad("rate", r.rate, "a finite rate ≥ 0 records/s");
    }
    if !(r.ceiling.is_finite() && r.ceiling > 0.0) {
        return bad("ceiling", r.ceiling, "a finite ceiling > 0 records/s");
    }
    if !(r.target.is_finite() && r.target > 0.0 && r.target <= 1.0) {
        return bad("target", r.target, "a fraction in (0, 1]");
    }
    if r.background.is_empty() {
        return Err(KeyError::NoShards);
    }
    if let Some(&b) = r.background.iter().find(|b| !(b.is_finite() && **b >= 0.0)) {
        return bad("background", b, "finite loads ≥ 0 records/s");
    }
    check_salts(u32::from(r.min_salts))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::{ShardRange, place_salts_with_counts};
    use proptest::prelude::*;

    /// The celebrity post (docs/hot-keys.md): 16 posts at 50 likes/s, four per shard; S2 holds
    /// p9, so its other traffic is three posts (150/s) and the others carry 200/s. p9 takes
    /// 2,400/s; the ceiling is 1,000/s.
    fn p9_request() -> PlanRequest {
        PlanRequest::new(2_400.0, 1_000.0, vec![200.0, 200.0, 150.0, 200.0])
    }

    fn loads(p: &Plan) -> Vec<f64> {
        p.per_shard.iter().map(|s| s.load).collect()
    }

    #[test]
    fn the_celebrity_post_needs_four_sub_keys_at_750_and_800_per_shard() {
        let p = plan(&p9_request()).unwrap();
        assert_eq!(p.salts, 4);
        assert_eq!(p.subkeys_per_shard(), vec![1, 1, 1, 1]);
        assert_eq!(loads(&p), vec![800.0, 800.0, 750.0, 800.0]);
        assert_eq!(p.max_utilisation, 0.8);
    }

    #[test]
    fn a_choice_of_eight_puts_two_sub_keys_on_every_shard() {
        let p = plan(&p9_request().with_min_salts(8)).unwrap();
        assert_eq!(p.salts, 8);
        assert_eq!(p.subkeys_per_shard(), vec![2, 2, 2, 2]);
        assert_eq!(loads(&p), vec![800.0, 800.0, 750.0, 800.0]);
    }

    #[test]
    fn with_uniform_background_every_shard_is_at_exactly_80_percent() {
        let p = plan(&PlanRequest::uniform(2_400.0, 1_000.0, 200.0, 4)).unwrap();
        assert_eq!(p.salts, 4);
        assert_eq!(loads(&p), vec![800.0; 4]);
        let p = plan(&PlanRequest::uniform(2_400.0, 1_000.0, 200.0, 4).with_min_salts(5)).unwrap();
        assert_eq!(
            p.salts, 8,
            "5, 6 and 7 would put two sub-keys on some shard"
        );
        let p =
            plan(&PlanRequest::uniform(2_400.0, 1_000.0, 200.0, 4).with_multiple_of_shards(true))
                .unwrap();
        assert_eq!(p.salts, 4);
    }

    #[test]
    fn a_zero_rate_key_still_spreads_its_sub_keys_evenly() {
        // Found by the even-spread property: with rate 0 every shard's load ties, and the old
        // tie-break (lowest index) put every sub-key on shard 0.
        let p = evaluate(&PlanRequest::uniform(0.0, 1_000.0, 0.0, 2), 2).unwrap();
        assert_eq!(p.subkeys_per_shard(), vec![1, 1]);
        let p = evaluate(&PlanRequest::uniform(0.0, 1_000.0, 300.0, 3), 7).unwrap();
        assert_eq!(p.subkeys_per_shard(), vec![3, 2, 2]);
    }

    #[test]
    fn the_naive_s_of_rate_over_ceiling_overloads_shards() {
        let naive = (2_400.0_f64 / 1_000.0).ceil() as u16;
        assert_eq!(naive, 3);
        let p = evaluate(&PlanRequest::uniform(2_400.0, 1_000.0, 200.0, 4), naive).unwrap();
        // Three sub-keys of 800/s on shards already carrying 200/s: exactly 1,000, 100%.
        assert_eq!(loads(&p), vec![1_000.0, 1_000.0, 1_000.0, 200.0]);
        assert_eq!(p.max_utilisation, 1.0);
        // The planner never returns it.
        let chosen = plan(&p9_request().with_min_salts(naive)).unwrap();
        assert_eq!(chosen.salts, 4);
        assert_eq!(evaluate(&p9_request(), naive).unwrap().max_utilisation, 1.0);
    }

    #[test]
    fn a_plan_can_be_placed_on_kinesis_shards() {
        let p = plan(&p9_request().with_min_salts(8)).unwrap();
        let shards = ShardRange::even_split(4).unwrap();
        let placed = place_salts_with_counts("likes:p9", &p.subkeys_per_shard(), &shards).unwrap();
        assert!(placed.on_target);
        assert_eq!(placed.per_shard, vec![2, 2, 2, 2]);
    }

    #[test]
    fn impossible_plans_say_why() {
        // 4 × 800 = 3,200 of target capacity; 3,300 of demand.
        assert!(matches!(
            plan(&PlanRequest::new(
                2_550.0,
                1_000.0,
                vec![200.0, 200.0, 150.0, 200.0]
            )),
            Err(KeyError::OverCapacity { .. })
        ));
        assert_eq!(
            plan(&PlanRequest::new(10.0, 1_000.0, vec![100.0, 900.0])),
            Err(KeyError::ShardOverTarget {
                shard: 1,
                background: 900.0,
                limit: 800.0
            })
        );
        assert!(matches!(
            // Fits in total (1,599.9 ≤ 1,600), but shard 1 has room for 0.5/s: S ≥ 1,601.
            plan(&PlanRequest::new(800.4, 1_000.0, vec![0.0, 799.5])),
            Err(KeyError::NoPlanWithinMaxSalts { .. })
        ));
        assert!(matches!(
            plan(&PlanRequest::uniform(1.0, 1_000.0, 0.0, 300).with_multiple_of_shards(true)),
            Err(KeyError::NoPlanWithinMaxSalts { .. })
        ));
    }

    #[test]
    fn invalid_inputs_are_refused() {
        let bad = [
            PlanRequest::uniform(f64::NAN, 1_000.0, 0.0, 4),
            PlanRequest::uniform(-1.0, 1_000.0, 0.0, 4),
            PlanRequest::uniform(1.0, 0.0, 0.0, 4),
            PlanRequest::uniform(1.0, 1_000.0, f64::INFINITY, 4),
            PlanRequest::uniform(1.0, 1_000.0, 0.0, 4).with_target(1.5),
            PlanRequest::uniform(1.0, 1_000.0, 0.0, 4).with_target(0.0),
        ];
        for r in bad {
            assert!(
                matches!(plan(&r), Err(KeyError::InvalidPlanInput { .. })),
                "{r:?}"
            );
        }
        assert_eq!(
            plan(&PlanRequest::new(1.0, 1_000.0, vec![])),
            Err(KeyError::NoShards)
        );
        assert_eq!(
            plan(&PlanRequest::uniform(1.0, 1_000.0, 0.0, 4).with_min_salts(0)),
            Err(KeyError::ZeroSalts)
        );
        assert_eq!(evaluate(&p9_request(), 0), Err(KeyError::ZeroSalts));
    }

    /// Independent oracle: S fits iff the shards' room for sub-keys of rate/S adds up to S.
    fn feasible(r: &PlanRequest, salts: u16) -> bool {
        let per = r.rate / f64::from(salts);
        let limit = r.limit() * (1.0 + TOLERANCE);
        let mut room = 0u32;
        for &b in &r.background {
            if b > limit {
                return false;
            }
            let fits_with = |c: u32| b + per * f64::from(c) <= limit;
            // Start near the answer, then step to the exact float boundary.
            let guess = ((limit - b) / per).floor().clamp(0.0, f64::from(salts));
            let mut c = guess as u32;
            while c < u32::from(salts) && fits_with(c + 1) {
                c += 1;
            }
            while c > 0 && !fits_with(c) {
                c -= 1;
            }
            room += c;
        }
        room >= u32::from(salts)
    }

    fn allowed(r: &PlanRequest, salts: u16) -> bool {
        salts >= r.min_salts
            && (!r.multiple_of_shards || usize::from(salts) % r.background.len() == 0)
    }

    fn any_request() -> impl Strategy<Value = PlanRequest> {
        (
            0u32..=5_000,
            proptest::collection::vec(0u32..=800, 1..=6),
            prop_oneof![Just(0.8), Just(0.7), Just(1.0)],
            1u16..=8,
            any::<bool>(),
        )
            .prop_map(|(rate, bg, target, min_salts, multiple)| {
                PlanRequest::new(
                    f64::from(rate),
                    1_000.0,
                    bg.into_iter().map(f64::from).collect(),
                )
                .with_target(target)
                .with_min_salts(min_salts)
                .with_multiple_of_shards(multiple)
            })
    }

    proptest! {
        #[test]
        fn a_returned_plan_never_exceeds_target(r in any_request()) {
            if let Ok(p) = plan(&r) {
                prop_assert!(allowed(&r, p.salts));
                prop_assert_eq!(p.per_shard.iter().map(|s| s.subkeys).sum::<u32>(), u32::from(p.salts));
                let per = r.rate / f64::from(p.salts);
                for s in &p.per_shard {
                    prop_assert_eq!(s.load, r.background[s.shard] + per * f64::from(s.subkeys));
                    prop_assert!(s.load <= r.limit() * (1.0 + TOLERANCE));
                    prop_assert!(s.utilisation <= r.target * (1.0 + TOLERANCE));
                }
                let max = p.per_shard.iter().map(|s| s.utilisation).fold(0.0, f64::max);
                prop_assert_eq!(p.max_utilisation, max);
            }
        }

        #[test]
        fn the_returned_s_is_the_smallest_that_fits(r in any_request()) {
            match plan(&r) {
                Ok(p) => {
                    prop_assert!(feasible(&r, p.salts));
                    for s in 1..p.salts {
                        prop_assert!(!(allowed(&r, s) && feasible(&r, s)), "S={} also fits", s);
                    }
                }
                Err(_) => {
                    for s in 1..=MAX_SALTS {
                        prop_assert!(!(allowed(&r, s) && feasible(&r, s)), "S={} fits", s);
                    }
                }
            }
        }

        #[test]
        fn with_equal_background_sub_keys_spread_evenly(
            rate in 0u32..=5_000, bg in 0u32..=800, n in 1usize..=8, salts in 1u16..=MAX_SALTS,
        ) {
            let r = PlanRequest::uniform(f64::from(rate), 1_000.0, f64::from(bg), n);
            let p = evaluate(&r, salts).unwrap();
            let s = u32::from(salts);
            let n = n as u32;
            for l in &p.per_shard {
                prop_assert!(l.subkeys == s / n || l.subkeys == s.div_ceil(n));
            }
        }
    }
}
