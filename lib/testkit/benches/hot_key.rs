//! One hot key at 2,400 writes/s for 10 s through the partition simulator: naive (every write
//! on one key) vs salted (S = 8 sub-keys, round-robin), side by side in one run.
//!
//! Needs the local stack: `eval "$(localstack/stack env --lane dynoxide)"` then
//! `cargo bench -p heatsink-testkit --bench hot_key` (env `HOT_KEY_RATE`, `HOT_KEY_SECONDS` override).
//! Without `AWS_ENDPOINT_URL_DYNAMODB` it prints a skip line and exits 0.

use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use heatsink::keys::SaltedKey;
use heatsink::schema::Table;
use heatsink_sim::load::{LoadReport, OpenLoop};
use heatsink_sim::{Simulator, Stats};
use heatsink_testkit::bench::{Stack, env_or};

async fn run(
    sim: &Simulator,
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
    load: OpenLoop,
    key: impl Fn(u64) -> String,
) -> (LoadReport, Stats) {
    sim.reset();
    let report = load
        .run(
            |i| {
                ddb.update_item()
                    .table_name(table)
                    .key("pk", AttributeValue::S(key(i)))
                    .key("sk", AttributeValue::S("total".into()))
                    .update_expression("ADD #t :one")
                    .expression_attribute_names("#t", "total")
                    .expression_attribute_values(":one", AttributeValue::N("1".into()))
                    .send()
            },
            |_| {},
        )
        .await;
    (report, sim.stats())
}

#[tokio::main]
async fn main() {
    let Some(stack) = Stack::up("hot_key", &[Table::Counters]).await else {
        return;
    };
    let rate = env_or("HOT_KEY_RATE", 2400);
    let seconds = env_or("HOT_KEY_SECONDS", 10);
    let spec = stack.schema.table(Table::Counters);
    let (sim, ddb) = stack.simulator(8).await;
    let load = OpenLoop::new(rate, Duration::from_secs(u64::from(seconds)));
    let salted = SaltedKey::new("likes#p9", 8).expect("valid key");
    let naive = run(&sim, &ddb, &spec.name, load.clone(), |_| "likes#p9".into()).await;
    let spread = run(&sim, &ddb, &spec.name, load, |i| {
        salted.sub_key((i % 8) as u16).unwrap_or_default()
    })
    .await;
    println!(
        "hot key: {rate} writes/s for {seconds} s through the simulator (8 partitions, 1,000 WCU/s each, 1 s burst); SDK standard retries on"
    );
    println!(
        "{:<10} {:>8} {:>10} {:>16} {:>10} {:>22} {:>9}",
        "strategy", "sent", "ok", "failed (retried)", "throttled", "max partition util.", "shed"
    );
    for (name, (r, s)) in [("naive", &naive), ("salted S=8", &spread)] {
        println!(
            "{:<10} {:>8} {:>10} {:>16} {:>10} {:>21.0}% {:>9}",
            name,
            r.sent,
            r.ok,
            r.failed,
            s.table_throttled(&spec.name),
            s.max_utilisation(&spec.name) * 100.0,
            r.shed
        );
    }
    sim.stop();
    stack.down().await;
}
