//! Warm throughput for a predicted spike: what to ask DynamoDB for, and what it cannot give.
//!
//! A table's (or index's) **warm throughput** is the read and write units per second it can
//! serve instantly; DynamoDB raises it on its own as usage grows, and `UpdateTable` raises it
//! ahead of a known peak (a launch, a sale, a celebrity's post), asynchronously, and never
//! lowers it. [`plan`] takes the predicted peak, the table as `DescribeTable` shows it and a
//! headroom, and returns the decision as data: the warm throughput to set (never below today's),
//! whether anything changes, and every reason the peak would be throttled *anyway*:
//!
//! - an **on-demand maximum** below the peak (`OnDemandThroughput`): requests over it fail with
//!   `MaxOnDemandThroughputExceeded` however warm the table is; the plan refuses to apply until
//!   the maximum is raised;
//! - warm throughput is a table figure: **one partition still serves at most 1,000 WCU/s and
//!   3,000 RCU/s**, so a hot key needs salting (`keys::plan`) or caching whatever the table's
//!   warm throughput is; the plan says so when the peak is concentrated on one key.
//!
//! ```
//! use heatsink_core::warm::{Capacity, TableCapacity, WarmRequest, plan};
//!
//! // A table warm at 12,000 reads and 4,000 writes (an on-demand table's floor) before a
//! // spike of 10,000 writes/s: ask for 12,500 writes (80 % headroom), keep the reads.
//! let table = TableCapacity {
//!     warm: Capacity { read: 12_000, write: 4_000 },
//!     on_demand: true,
//!     max: Capacity::UNBOUNDED,
//! };
//! let p = plan(&WarmRequest::new(Capacity { read: 0, write: 10_000 }), &table);
//! assert_eq!(p.target, Capacity { read: 12_000, write: 12_500 });
//! assert!(p.update.is_some() && p.refusals.is_empty());
//! ```
//!
//! # Guarantees and limits
//! - The target is at least today's warm throughput and at least `peak ÷ headroom` per kind
//!   (rounded up); it is exactly the larger of the two. `update` is `None` when today's covers
//!   the need (nothing to call).
//! - A refusal is listed for every kind whose on-demand maximum is below the peak; a caller
//!   must not apply a plan with refusals (`WarmPlan::applicable`).
//! - AWS bounds warm throughput by account and table quotas (40,000 units per table by default,
//!   more on request); the plan does not know them: `UpdateTable` answers with the limit.

use serde::{Deserialize, Serialize};

/// Read and write units per second.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capacity {
    /// Read units per second.
    pub read: u64,
    /// Write units per second.
    pub write: u64,
}

impl Capacity {
    /// Rates per second (a peak, a budget) as whole units, each rounded up; a negative or NaN
    /// rate is 0, one over `u64::MAX` is `u64::MAX`.
    pub fn per_second(read: f64, write: f64) -> Self {
        let units = |v: f64| v.max(0.0).ceil() as u64;
        Self {
            read: units(read),
            write: units(write),
        }
    }

    /// No maximum (an on-demand table whose `OnDemandThroughput` is unset or `-1`).
    pub const UNBOUNDED: Self = Self {
        read: u64::MAX,
        write: u64::MAX,
    };

    fn get(&self, kind: Kind) -> u64 {
        match kind {
            Kind::Read => self.read,
            Kind::Write => self.write,
        }
    }

    fn set(&mut self, kind: Kind, v: u64) {
        match kind {
            Kind::Read => self.read = v,
            Kind::Write => self.write = v,
        }
    }
}

/// Reads or writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Read units.
    Read,
    /// Write units.
    Write,
}

impl Kind {
    /// Both kinds, reads first.
    pub const ALL: [Kind; 2] = [Kind::Read, Kind::Write];

    /// `reads` or `writes`.
    pub fn noun(self) -> &'static str {
        match self {
            Kind::Read => "reads",
            Kind::Write => "writes",
        }
    }
}

/// The table (or index) as `DescribeTable` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableCapacity {
    /// Today's warm throughput (0 for a kind DynamoDB did not report).
    pub warm: Capacity,
    /// Whether the table bills on demand (the maximum applies only then).
    pub on_demand: bool,
    /// The on-demand maximum per kind ([`Capacity::UNBOUNDED`] where none is set).
    pub max: Capacity,
}

/// The predicted peak and how much of the warm throughput it may use.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WarmRequest {
    /// The peak, units per second, per kind (0: no change asked for that kind).
    pub peak: Capacity,
    /// Fraction of the warm throughput the peak may use, in (0, 1] (default 0.8).
    pub headroom: f64,
}

impl WarmRequest {
    /// `peak` at the default 80 % headroom.
    pub fn new(peak: Capacity) -> Self {
        Self {
            peak,
            headroom: DEFAULT_HEADROOM,
        }
    }
}

/// The peak may use 80 % of the warm throughput by default.
pub const DEFAULT_HEADROOM: f64 = 0.8;

/// Why the peak would be throttled whatever the warm throughput.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    /// Reads or writes.
    pub kind: Kind,
    /// The table's on-demand maximum for that kind.
    pub max: u64,
    /// The predicted peak.
    pub peak: u64,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the on-demand maximum of {} {}/s is below the peak of {}: requests over it fail with MaxOnDemandThroughputExceeded however warm the table is (raise OnDemandThroughput first)",
            self.max,
            self.kind.noun(),
            self.peak
        )
    }
}

/// What [`plan`] decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WarmPlan {
    /// The warm throughput the peak needs: per kind the larger of today's and peak ÷ headroom.
    pub target: Capacity,
    /// What to send with `UpdateTable` (`None`: today's warm throughput covers the peak).
    pub update: Option<Capacity>,
    /// Reasons the peak would be throttled anyway (an on-demand maximum below it).
    pub refusals: Vec<Refusal>,
}

impl WarmPlan {
    /// Whether the plan may be applied: something to change and nothing refused.
    pub fn applicable(&self) -> bool {
        self.update.is_some() && self.refusals.is_empty()
    }
}

/// The warm throughput `request`'s peak needs on `table` (see the module docs).
pub fn plan(request: &WarmRequest, table: &TableCapacity) -> WarmPlan {
    let headroom = if request.headroom.is_finite() && request.headroom > 0.0 {
        request.headroom.min(1.0)
    } else {
        DEFAULT_HEADROOM
    };
    let mut target = table.warm;
    let mut refusals = vec![];
    for kind in Kind::ALL {
        let peak = request.peak.get(kind);
        let needed = (peak as f64 / headroom).ceil();
        let needed = if needed >= u64::MAX as f64 {
            u64::MAX
        } else {
            needed as u64
        };
        target.set(kind, table.warm.get(kind).max(needed));
        if table.on_demand && table.max.get(kind) < peak {
            refusals.push(Refusal {
                kind,
                max: table.max.get(kind),
                peak,
            });
        }
    }
    WarmPlan {
        target,
        update: (target != table.warm).then_some(target),
        refusals,
    }
}

/// What a slot move's copy into `target` needs before it starts: refused when the target's
/// on-demand maximum is below the copy's rates (`copy`: the copy's and diff's units per second;
/// the copy would be throttled for its whole run). With `prewarm`, the warm throughput that
/// covers the source's warm throughput and the copy's rates, each capped at the target's
/// maximum (the moved slots carry at most what the source is warm for; more than the target's
/// maximum could not be served anyway); without it, no update.
pub fn copy_plan(
    copy: Capacity,
    source: &TableCapacity,
    target: &TableCapacity,
    prewarm: bool,
) -> WarmPlan {
    let check = plan(
        &WarmRequest {
            peak: copy,
            headroom: 1.0,
        },
        target,
    );
    if !prewarm || !check.refusals.is_empty() {
        return WarmPlan {
            target: target.warm,
            update: None,
            refusals: check.refusals,
        };
    }
    let mut peak = Capacity::default();
    for kind in Kind::ALL {
        let cap = if target.on_demand {
            target.max.get(kind)
        } else {
            u64::MAX
        };
        peak.set(kind, source.warm.get(kind).max(copy.get(kind)).min(cap));
    }
    plan(
        &WarmRequest {
            peak,
            headroom: 1.0,
        },
        target,
    )
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const PROVISIONED: TableCapacity = TableCapacity {
        warm: Capacity {
            read: 100,
            write: 100,
        },
        on_demand: false,
        max: Capacity { read: 1, write: 1 },
    };

    #[test]
    fn a_warm_enough_table_needs_no_call_and_a_maximum_below_the_peak_is_refused() {
        let table = TableCapacity {
            warm: Capacity {
                read: 12_000,
                write: 4_000,
            },
            on_demand: true,
            max: Capacity {
                read: 40_000,
                write: 3_000,
            },
        };
        let calm = plan(
            &WarmRequest::new(Capacity {
                read: 9_000,
                write: 2_000,
            }),
            &table,
        );
        assert_eq!((calm.update, calm.applicable()), (None, false));
        let spike = plan(
            &WarmRequest::new(Capacity {
                read: 0,
                write: 10_000,
            }),
            &table,
        );
        assert_eq!(spike.target.write, 12_500);
        assert_eq!(spike.refusals.len(), 1);
        assert_eq!(spike.refusals[0].kind, Kind::Write);
        assert!(!spike.applicable(), "refused: the maximum throttles first");
        assert!(spike.refusals[0].to_string().contains("3000 writes/s"));
        // A provisioned table has no on-demand maximum, whatever DescribeTable left there.
        let p = plan(
            &WarmRequest::new(Capacity {
                read: 800,
                write: 0,
            }),
            &PROVISIONED,
        );
        assert!(p.applicable(), "{p:?}");
        assert_eq!(
            p.target,
            Capacity {
                read: 1_000,
                write: 100
            }
        );
    }

    #[test]
    fn a_headroom_out_of_range_is_the_default() {
        for h in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let p = plan(
                &WarmRequest {
                    peak: Capacity {
                        read: 0,
                        write: 800,
                    },
                    headroom: h,
                },
                &PROVISIONED,
            );
            assert_eq!(p.target.write, 1_000, "headroom {h}");
        }
    }

    proptest! {
        #[test]
        fn a_copy_is_refused_only_by_the_targets_maximum_and_prewarmed_within_it(
            copy in (0u64..50_000, 0u64..50_000),
            source in (0u64..100_000, 0u64..100_000),
            warm in (0u64..100_000, 0u64..100_000),
            max in (0u64..100_000, 0u64..100_000),
            on_demand: bool,
            prewarm: bool,
        ) {
            let copy = Capacity { read: copy.0, write: copy.1 };
            let src = TableCapacity {
                warm: Capacity { read: source.0, write: source.1 },
                on_demand: true,
                max: Capacity::UNBOUNDED,
            };
            let dst = TableCapacity {
                warm: Capacity { read: warm.0, write: warm.1 },
                on_demand,
                max: Capacity { read: max.0, write: max.1 },
            };
            let p = copy_plan(copy, &src, &dst, prewarm);
            for kind in Kind::ALL {
                let over = on_demand && dst.max.get(kind) < copy.get(kind);
                prop_assert_eq!(p.refusals.iter().any(|r| r.kind == kind), over);
            }
            if !prewarm || !p.refusals.is_empty() {
                prop_assert_eq!(p.update, None);
                return Ok(());
            }
            for kind in Kind::ALL {
                let t = p.target.get(kind);
                prop_assert!(t >= dst.warm.get(kind) && t >= copy.get(kind));
                prop_assert!(
                    t == dst.warm.get(kind) || !on_demand || t <= dst.max.get(kind),
                    "raised over the maximum"
                );
                let cap = if on_demand { dst.max.get(kind) } else { u64::MAX };
                prop_assert!(t >= src.warm.get(kind).min(cap), "covers the source within the maximum");
            }
        }

        #[test]
        fn the_target_is_exactly_the_larger_of_today_and_the_need_and_refusals_are_exact(
            warm in (0u64..100_000, 0u64..100_000),
            peak in (0u64..1_000_000_000, 0u64..1_000_000_000),
            max in (0u64..200_000, 0u64..200_000),
            on_demand: bool,
            headroom in 0.01f64..=1.0,
        ) {
            let table = TableCapacity {
                warm: Capacity { read: warm.0, write: warm.1 },
                on_demand,
                max: Capacity { read: max.0, write: max.1 },
            };
            let request = WarmRequest { peak: Capacity { read: peak.0, write: peak.1 }, headroom };
            let p = plan(&request, &table);
            for kind in Kind::ALL {
                let (today, target, peak) =
                    (table.warm.get(kind), p.target.get(kind), request.peak.get(kind));
                prop_assert!(target >= today, "never lowered");
                prop_assert!(target as f64 * headroom >= peak as f64 - 1e-6, "covers the peak");
                prop_assert!(
                    target == today || ((target - 1) as f64) * headroom < peak as f64,
                    "no more than the need: {target} for {peak} at {headroom}"
                );
                let refused = p.refusals.iter().any(|r| r.kind == kind);
                prop_assert_eq!(refused, on_demand && table.max.get(kind) < peak);
            }
            prop_assert_eq!(p.update.is_none(), p.target == table.warm);
        }
    }
}
