//! A moving hotspot followed by the directory's autopilot through real moves: the load a
//! period samples moves from one group of tenants to the next, the loop (acting, sustain 1, no
//! cooldown) relieves the hot owner each period by moving slots through the mover, while a load
//! writes to every tenant through a router the whole time. Every acknowledged write is verified
//! at the end (the ack log against the owners the directory names, as `heatsink slots verify`
//! does). Each tenant's slot is a directory range of its own before the day starts, so every
//! piece is one slot (moto writes a fence item per slot a move fences, at seconds a hundred).

use std::collections::BTreeMap;

use heatsink::autopilot::directory::Load as PeriodLoad;
use heatsink::autopilot::propose::owner_loads;
use heatsink::autopilot::store::PilotStore;
use heatsink::slots::{SlotDirectory, SlotRange, slot_of};
use heatsink_sim::load::LoadSpec;
use heatsink_testkit::fixture;

use super::operation::pilot;
use super::{SERIAL, Scene, owner_table, start_load_spec};

/// Tenants the load writes (`{t0}` … `{t15}`), four hot at a time.
const TENANTS: usize = 16;
/// Periods of the day: the hotspot moves to the next four tenants each period.
const PERIODS: usize = 3;

fn tenant_slot(t: usize) -> u16 {
    slot_of(&format!("t{t}"))
}

/// Period `k`'s samples: tenants `4k` … `4k + 3` at 100 each (the hotspot), the others at 10.
fn samples(k: usize) -> BTreeMap<u16, f64> {
    (0..TENANTS)
        .map(|t| (tenant_slot(t), if t / 4 == k { 100.0 } else { 10.0 }))
        .collect()
}

/// Splits the directory so each tenant's slot is a range of its own (no data moves: one owner).
async fn one_range_per_tenant(dir: &SlotDirectory) {
    for t in 0..TENANTS {
        let s = tenant_slot(t);
        for at in [s, s.saturating_add(1)] {
            if at == 0 || at > SlotRange::ALL.last {
                continue;
            }
            let map = dir.load().await.expect("map");
            let r = map.entry_of(at).range;
            if r.first == at {
                continue;
            }
            let split = map.split(r, at).expect("split");
            dir.commit(&split).await.expect("commit split");
        }
    }
}

#[tokio::test]
async fn a_moving_hotspot_is_followed_by_real_moves_and_no_acknowledged_write_is_lost() {
    let fx =
        fixture!("a_moving_hotspot_is_followed_by_real_moves_and_no_acknowledged_write_is_lost");
    let _serial = SERIAL.lock().await;
    let s = Scene::new(&fx, false).await;
    let (c, d) = (owner_table(&fx, "c").await, owner_table(&fx, "d").await);
    one_range_per_tenant(&s.dir).await;
    let load = start_load_spec(
        s.router.clone(),
        LoadSpec {
            keys: 64,
            prefix: "key-".into(),
            tenants: Some(TENANTS as u64),
            rate: 20.0,
            duration: std::time::Duration::from_secs(600),
            max_in_flight: 32,
        },
    );
    let mut l = pilot(&s);
    l.spare = vec![s.b.clone(), c.clone(), d.clone()];
    let mut operations = 0;
    let mut moves = 0;
    for k in 0..PERIODS {
        let sampled = samples(k);
        let before = owner_loads(&s.dir.load().await.expect("map"), &sampled);
        let report = l
            .run(
                heatsink::clock::now_ms(),
                PeriodLoad::Slots(sampled.clone()),
            )
            .await
            .expect("period");
        let after = owner_loads(&s.dir.load().await.expect("map"), &sampled);
        let ratio = |o: &BTreeMap<String, f64>| {
            let max = o.values().copied().fold(0.0, f64::max);
            max / (o.values().sum::<f64>() / 4.0)
        };
        eprintln!(
            "period {k}: max/mean {:.2} -> {:.2} ({after:?}); {:?}",
            ratio(&before),
            ratio(&after),
            report.lines()
        );
        if report.started.is_some() {
            operations += 1;
            moves += report.moved.len();
            assert!(
                report.ended.is_some(),
                "ran to its end: {:?}",
                report.lines()
            );
            assert!(
                ratio(&after) < ratio(&before),
                "the operation relieved the hottest owner: {:?}",
                report.lines()
            );
        }
    }
    assert!(
        operations >= 2,
        "the loop followed the hotspot: {operations}"
    );
    let state = PilotStore::new(s.ddb.clone(), s.dir.table())
        .load()
        .await
        .expect("state");
    assert!(state.state.in_flight.is_none(), "{:?}", state.state);
    assert_eq!(state.state.history.len(), operations);
    eprintln!("{operations} operations, {moves} moves");
    load.finish(&s.router).await;
}
