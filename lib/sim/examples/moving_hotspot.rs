//! The moving-hotspot day (`heatsink_sim::day`) under three policies side by side: a static
//! layout, a naive threshold loop and the autopilot (relieving one hot owner an operation, and
//! up to 8; and up to 8 with half the hysteresis band), at 1- and 5-minute periods.
//!
//! `cargo run -p heatsink-sim --release --example moving_hotspot`

use heatsink_core::autopilot::PilotConfig;
use heatsink_sim::day::{DayConfig, DayReport, Policy, simulate};

fn quantile(ratios: &[f64], q: f64) -> f64 {
    let mut v = ratios.to_vec();
    v.sort_by(f64::total_cmp);
    let i = ((v.len() as f64 - 1.0) * q).round() as usize;
    v.get(i).copied().unwrap_or(1.0)
}

fn row(period: u32, name: &str, r: &DayReport) {
    println!(
        "| {period} min | {name} | {} / {} | {:.2} / {:.2} / {:.2} | {} of {} | {} | {} | {} / {} |",
        r.ops,
        r.pieces,
        quantile(&r.ratios, 0.5),
        quantile(&r.ratios, 0.95),
        r.worst_ratio,
        r.over,
        r.ratios.len(),
        r.over_after_reaction,
        r.longest_over,
        r.flip_flops_max,
        r.flip_flops_total,
    );
}

fn main() -> Result<(), heatsink_core::autopilot::PilotError> {
    println!(
        "| period | policy | operations / moves | max/mean p50 / p95 / worst | periods over 1.25 | over after the first reaction | longest run over | flip-flops max per cell / total |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for period in [1, 5] {
        let day = DayConfig::moving_city(period);
        let one = PilotConfig {
            per_operation: 1,
            ..DayConfig::pilot()
        };
        for (name, policy) in [
            ("static", Policy::Static),
            ("naive threshold loop", Policy::Naive),
            ("autopilot, 1 owner an operation", Policy::Pilot(one)),
            ("autopilot", Policy::Pilot(DayConfig::pilot())),
        ] {
            row(period, name, &simulate(&day, &policy)?);
        }
        // The same autopilot with half the hysteresis: relieved above 1.15 × the mean, filled
        // to 1.05 × (`--band 0.05`).
        let mut narrow = day.clone();
        narrow.relative.band = 0.05;
        row(
            period,
            "autopilot, band 0.05",
            &simulate(&narrow, &Policy::Pilot(DayConfig::pilot()))?,
        );
    }
    Ok(())
}
