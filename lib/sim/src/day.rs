//! A simulated day of moving load over an ordered key space, and the layouts three policies
//! keep under it: nothing moves (static), a threshold loop that moves whatever the balance
//! plan says every period (naive), and the autopilot (the same plan judged by the governor:
//! sustained for N periods, cooldown per span, hourly and daily budgets, one in flight).
//!
//! The key space is 1,024 cells in key order (time buckets, geohash prefixes, tenant ids),
//! each the first slot of a block of 16, so the slot directory's ranges are intervals of the
//! key's order. Load per cell per period is a uniform base plus [`Hotspot`]s: Gaussian bumps
//! whose centre moves linearly between two cells over their hours (a city waking up, the
//! newest time bucket) or stays put (the stadium at 10 pm). A period's moves complete within
//! it: the model judges *where the loop puts the load*, not the mover (its guarantees are
//! measured on its own; see the live-moves benchmarks).
//!
//! ```
//! use heatsink_sim::day::{simulate, DayConfig, Policy};
//! let report = simulate(&DayConfig::moving_city(5), &Policy::Static)?;
//! assert_eq!(report.ops, 0);
//! assert!(report.worst_ratio > 1.25, "a moving hotspot overloads a static layout");
//! # Ok::<(), heatsink_core::autopilot::PilotError>(())
//! ```

use std::collections::BTreeMap;

use heatsink_core::autopilot::propose::{self, Relative};
use heatsink_core::autopilot::{PilotConfig, PilotError, PilotState};
use heatsink_core::slots::balance;
use heatsink_core::slots::{RangeEntry, SlotMap, SlotRange};

/// Cells of the ordered key space.
pub const CELLS: usize = 1_024;
/// Slots per cell (16,384 slots ÷ 1,024 cells).
const SLOTS_PER_CELL: usize = 16;

/// A bump of load moving across the key space.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hotspot {
    /// First and last period it is present (inclusive).
    pub periods: (u32, u32),
    /// Its centre's cell at the first and at the last period (linear in between).
    pub centre: (f64, f64),
    /// Standard deviation, cells.
    pub width: f64,
    /// Its total load (units/s) while present.
    pub load: f64,
}

/// The day.
#[derive(Debug, Clone, PartialEq)]
pub struct DayConfig {
    /// Owners (tables), each starting with an equal share of the key space.
    pub owners: usize,
    /// Periods in the day.
    pub periods: u32,
    /// One period, ms (the compressed clock still counts real minutes for the governor).
    pub period_ms: u64,
    /// Load spread evenly over every cell, units/s.
    pub base: f64,
    /// The moving load.
    pub hotspots: Vec<Hotspot>,
    /// The balance line (relative to the mean).
    pub relative: Relative,
    /// The samples' threshold: `max/mean` above this counts as over.
    pub goal: f64,
}

impl DayConfig {
    /// 8 owners and a day of `period_min`-minute periods; a base of 1,600 units/s; a city's
    /// load (2,400 units/s, 20 cells wide) moving across a third of the key space from 06:00
    /// to 22:00, and a stadium (3,000 units/s, 4 cells wide, in another owner's range) from
    /// 19:00 to 23:00. `period_min` is clamped to 1–60.
    pub fn moving_city(period_min: u32) -> Self {
        let period_min = period_min.clamp(1, 60);
        let per_hour = 60 / period_min;
        Self {
            owners: 8,
            periods: 24 * per_hour,
            period_ms: u64::from(period_min) * 60_000,
            base: 1_600.0,
            hotspots: vec![
                Hotspot {
                    periods: (6 * per_hour, 22 * per_hour),
                    centre: (100.0, 420.0),
                    width: 20.0,
                    load: 2_400.0,
                },
                Hotspot {
                    periods: (19 * per_hour, 23 * per_hour),
                    centre: (800.0, 800.0),
                    width: 4.0,
                    load: 3_000.0,
                },
            ],
            relative: Relative::default(),
            goal: 1.25,
        }
    }

    /// The autopilot configuration the moving-hotspot figures use: the governor's defaults
    /// (sustained 2 periods, 30 min cooldown) with a budget of 30 operations an hour and 300 a
    /// day, each operation relieving up to 8 hot owners (every owner of the day).
    pub fn pilot() -> PilotConfig {
        PilotConfig {
            per_hour: 30,
            per_day: 300,
            per_operation: 8,
            act: true,
            ..PilotConfig::default()
        }
    }

    /// Load per cell at `period`.
    fn load(&self, period: u32) -> Vec<f64> {
        let base = self.base / CELLS as f64;
        let mut cells = vec![base; CELLS];
        for h in &self.hotspots {
            if period < h.periods.0 || period > h.periods.1 {
                continue;
            }
            let span = f64::from(h.periods.1.saturating_sub(h.periods.0).max(1));
            let t = f64::from(period - h.periods.0) / span;
            let centre = h.centre.0 + (h.centre.1 - h.centre.0) * t;
            let weights: Vec<f64> = (0..CELLS)
                .map(|c| (-((c as f64 - centre) / h.width).powi(2) / 2.0).exp())
                .collect();
            let sum: f64 = weights.iter().sum();
            for (cell, w) in cells.iter_mut().zip(weights) {
                *cell += h.load * w / sum;
            }
        }
        cells
    }
}

/// Who decides the layout.
#[derive(Debug, Clone, PartialEq)]
pub enum Policy {
    /// Nothing moves.
    Static,
    /// Every move the balance plan proposes runs the period it is proposed: no sustain, no
    /// cooldown, no budget.
    Naive,
    /// The plan's proposals judged by the governor with this configuration (its `act` is
    /// taken as true: the model runs what it decides).
    Pilot(PilotConfig),
}

impl Policy {
    /// A short name for tables.
    pub fn name(&self) -> &'static str {
        match self {
            Policy::Static => "static",
            Policy::Naive => "naive threshold loop",
            Policy::Pilot(_) => "autopilot",
        }
    }
}

/// What a policy did with the day.
#[derive(Debug, Clone, PartialEq)]
pub struct DayReport {
    /// Operations run (the naive loop: each move; the autopilot: each period's operation, the
    /// pieces of up to `per_operation` owners).
    pub ops: u32,
    /// Pieces moved.
    pub pieces: u32,
    /// `max/mean` owner load at every period (after that period's moves).
    pub ratios: Vec<f64>,
    /// The worst `max/mean` over the day.
    pub worst_ratio: f64,
    /// The first period the policy moved anything.
    pub first_reaction: Option<u32>,
    /// Periods over the goal, the whole day.
    pub over: u32,
    /// Periods over the goal after the first reaction.
    pub over_after_reaction: u32,
    /// The longest run of consecutive periods over the goal after the first reaction.
    pub longest_over: u32,
    /// Most times one cell went back to an owner it had left, over the day.
    pub flip_flops_max: u32,
    /// Times any cell went back to an owner it had left, summed over cells.
    pub flip_flops_total: u32,
}

/// The directory for `owner_of` (cell → index into `names`), its runs coalesced into ranges.
fn map_of(owner_of: &[usize], names: &[String]) -> SlotMap {
    let mut map = SlotMap::initial(names[0].clone(), 1_000, false);
    let mut ranges: Vec<RangeEntry> = vec![];
    for (cell, owner) in owner_of.iter().enumerate() {
        let first = (cell * SLOTS_PER_CELL) as u16;
        let last = first + (SLOTS_PER_CELL as u16 - 1);
        let name = &names[*owner];
        match ranges.last_mut() {
            Some(r) if r.owner == *name => r.range.last = last,
            _ => ranges.push(RangeEntry::stable(
                SlotRange { first, last },
                name.clone(),
                1,
            )),
        }
    }
    map.ranges = ranges;
    map
}

/// The `max/mean` owner load for `owner_of` under `cells`.
fn ratio(owner_of: &[usize], owners: usize, cells: &[f64]) -> f64 {
    let mut loads = vec![0.0; owners];
    for (owner, l) in owner_of.iter().zip(cells) {
        loads[*owner] += l;
    }
    let mean = loads.iter().sum::<f64>() / owners as f64;
    let max = loads.iter().copied().fold(0.0, f64::max);
    if mean > 0.0 { max / mean } else { 1.0 }
}

/// Runs the day under `policy`; a pilot configuration the governor refuses is refused here.
pub fn simulate(day: &DayConfig, policy: &Policy) -> Result<DayReport, PilotError> {
    let owners = day.owners.max(1);
    let names: Vec<String> = (0..owners).map(|o| format!("t{o}")).collect();
    let mut owner_of: Vec<usize> = (0..CELLS).map(|c| c * owners / CELLS).collect();
    // Per cell, the owners it has left (a return to one of them is a flip-flop).
    let mut left: Vec<Vec<usize>> = vec![vec![]; CELLS];
    let mut returns = vec![0u32; CELLS];
    let mut state = PilotState::default();
    let mut report = DayReport {
        ops: 0,
        pieces: 0,
        ratios: vec![],
        worst_ratio: 0.0,
        first_reaction: None,
        over: 0,
        over_after_reaction: 0,
        longest_over: 0,
        flip_flops_max: 0,
        flip_flops_total: 0,
    };
    let mut run_over = 0u32;
    for period in 0..day.periods {
        let cells = day.load(period);
        let now_ms = u64::from(period) * day.period_ms;
        let load: BTreeMap<u16, f64> = cells
            .iter()
            .enumerate()
            .map(|(c, l)| ((c * SLOTS_PER_CELL) as u16, *l))
            .collect();
        let map = map_of(&owner_of, &names);
        let runs: Vec<_> = match policy {
            Policy::Static => vec![],
            // The whole plan, every period it has moves.
            Policy::Naive => propose::line(&propose::owner_loads(&map, &load), &day.relative)
                .map(|cfg| balance::plan(&map, &[], &load, &cfg).moves)
                .unwrap_or_default(),
            Policy::Pilot(cfg) => {
                let cfg = PilotConfig { act: true, ..*cfg };
                let d = propose::directory_period(
                    &map,
                    &[],
                    &load,
                    &day.relative,
                    &cfg,
                    &state,
                    now_ms,
                )?;
                state.streaks = d.period.streaks.clone();
                let pieces: Vec<_> = d.pieces().into_iter().cloned().collect();
                if let Some(op) = d.operation {
                    let id = op.id.clone();
                    // What was operated on is the pieces moved: their cooldown keeps them
                    // from moving again (back, or on) for a while.
                    state.record(op);
                    // The model's moves finish within their period.
                    state.finished(&id);
                }
                pieces
            }
        };
        // The period's load fell on the layout it started with; the moves the loop decides
        // from that load serve the next period.
        let r = ratio(&owner_of, owners, &cells);
        report.worst_ratio = report.worst_ratio.max(r);
        report.ratios.push(r);
        report.over += u32::from(r > day.goal);
        if report.first_reaction.is_some_and(|f| period > f) && r > day.goal {
            report.over_after_reaction += 1;
            run_over += 1;
            report.longest_over = report.longest_over.max(run_over);
        } else {
            run_over = 0;
        }
        if !runs.is_empty() && report.first_reaction.is_none() {
            report.first_reaction = Some(period);
        }
        for m in &runs {
            let Some(to) = names.iter().position(|n| *n == m.to) else {
                continue;
            };
            // A cell's load sits on its first slot: the cells moved are those whose first slot
            // is in the piece (a piece may start or end inside a cell).
            let first = usize::from(m.slots.first).div_ceil(SLOTS_PER_CELL);
            let last = usize::from(m.slots.last) / SLOTS_PER_CELL;
            for cell in first..=last.min(CELLS - 1) {
                let from = owner_of[cell];
                if from == to {
                    continue;
                }
                if left[cell].contains(&to) {
                    returns[cell] += 1;
                }
                left[cell].push(from);
                owner_of[cell] = to;
            }
            report.pieces += 1;
        }
        // The naive loop runs each move as its own operation; the autopilot a period's pieces
        // as one.
        report.ops += match policy {
            Policy::Pilot(_) => u32::from(!runs.is_empty()),
            _ => u32::try_from(runs.len()).unwrap_or(u32::MAX),
        };
    }
    report.flip_flops_max = returns.iter().copied().max().unwrap_or(0);
    report.flip_flops_total = returns.iter().sum();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The three policies on the moving city at 1-minute periods: the static layout is over
    /// the goal for most of the day; the autopilot is over it for a few minutes around each
    /// onset, with fewer moves than the naive loop and at most one return per cell.
    #[test]
    fn the_autopilot_follows_a_moving_hotspot_with_fewer_moves_than_a_naive_loop() {
        let day = DayConfig::moving_city(1);
        let stat = simulate(&day, &Policy::Static).expect("static");
        let naive = simulate(&day, &Policy::Naive).expect("naive");
        let auto = simulate(&day, &Policy::Pilot(DayConfig::pilot())).expect("pilot");
        assert_eq!((stat.ops, stat.flip_flops_total), (0, 0));
        assert!(
            stat.over > 600,
            "the static layout is over most of the day: {}",
            stat.over
        );
        assert!(auto.over * 10 < stat.over, "{} vs {}", auto.over, stat.over);
        assert!(auto.ops <= 300, "the day budget holds: {}", auto.ops);
        assert!(
            auto.pieces < naive.pieces,
            "{} vs {}",
            auto.pieces,
            naive.pieces
        );
        assert!(auto.flip_flops_max <= 1, "{}", auto.flip_flops_max);
        // A step (the stadium) is over for the two periods the sustain rule takes and at most
        // one more; the moving city never holds an owner over for longer.
        assert!(auto.longest_over <= 3, "{}", auto.longest_over);
        assert!(auto.pieces > auto.ops, "operations carry several pieces");
    }

    /// At 5-minute periods the autopilot reacts within the 2 periods of its sustain rule at
    /// every step, and returns no cell to an owner it left more than once.
    #[test]
    fn at_five_minute_periods_the_autopilot_reacts_within_two_periods() {
        let day = DayConfig::moving_city(5);
        let auto = simulate(&day, &Policy::Pilot(DayConfig::pilot())).expect("pilot");
        assert!(auto.longest_over <= 2, "{}", auto.longest_over);
        assert!(auto.flip_flops_max <= 1, "{}", auto.flip_flops_max);
        let one = PilotConfig {
            per_operation: 1,
            ..DayConfig::pilot()
        };
        let single = simulate(&day, &Policy::Pilot(one)).expect("one owner an operation");
        assert!(
            single.over_after_reaction >= auto.over_after_reaction,
            "relieving one owner an operation is never better here: {} vs {}",
            single.over_after_reaction,
            auto.over_after_reaction
        );
    }

    #[test]
    fn a_paused_pilot_moves_nothing_like_the_static_layout() {
        let day = DayConfig::moving_city(15);
        let mut cfg = DayConfig::pilot();
        cfg.sustain = u32::MAX;
        let held = simulate(&day, &Policy::Pilot(cfg)).expect("pilot");
        let stat = simulate(&day, &Policy::Static).expect("static");
        assert_eq!(held.ops, 0);
        assert_eq!(held.ratios, stat.ratios);
    }
}
