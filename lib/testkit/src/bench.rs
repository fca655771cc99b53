//! Setup shared by the benches that drive the partition simulator over the local stack.

use aws_config::SdkConfig;
use aws_sdk_dynamodb::Client;
use heatsink::schema::{self, Schema, Table};
use heatsink_sim::{SimConfig, Simulator};

/// The number in the environment variable `name`, else `default`.
pub fn env_or(name: &str, default: u32) -> u32 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The local stack, a client straight to it, and fresh tables under a random `bench-…-` prefix.
pub struct Stack {
    upstream: String,
    config: SdkConfig,
    /// A DynamoDB client straight to the emulator (not through a simulator).
    pub direct: Client,
    /// The bench's tables, under its random prefix.
    pub schema: Schema,
    tables: Vec<Table>,
}

impl Stack {
    /// Creates `tables`; `None`, after a skip line, without `AWS_ENDPOINT_URL_DYNAMODB`.
    pub async fn up(bench: &str, tables: &[Table]) -> Option<Self> {
        let Ok(upstream) = std::env::var("AWS_ENDPOINT_URL_DYNAMODB") else {
            println!(
                "skip: {bench} bench needs the local stack (eval \"$(localstack/stack env)\")"
            );
            return None;
        };
        let config = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
        let direct = Client::new(&config);
        let schema = Schema::new(format!("bench-{:08x}-", rand::random::<u32>()));
        for &t in tables {
            let spec = schema.table(t);
            schema::ensure_table(&direct, &spec)
                .await
                .expect("create table");
        }
        Some(Self {
            upstream,
            config,
            direct,
            schema,
            tables: tables.to_vec(),
        })
    }

    /// A simulator of `partitions` partitions in front of the stack, and a client through it.
    pub async fn simulator(&self, partitions: u32) -> (Simulator, Client) {
        self.simulator_with(
            partitions,
            SimConfig::new(&self.upstream).limits.burst_seconds,
        )
        .await
    }

    /// [`Stack::simulator`] with partitions that bank `burst_seconds` of their ceiling.
    pub async fn simulator_with(&self, partitions: u32, burst_seconds: f64) -> (Simulator, Client) {
        let mut sim_config = SimConfig::new(&self.upstream);
        sim_config.limits.partitions = partitions;
        sim_config.limits.burst_seconds = burst_seconds;
        let sim = Simulator::start(sim_config).await.expect("start simulator");
        let conf = aws_sdk_dynamodb::config::Builder::from(&self.config);
        let via_sim = Client::from_conf(conf.endpoint_url(sim.endpoint()).build());
        (sim, via_sim)
    }

    /// Deletes the tables (best effort).
    pub async fn down(self) {
        for t in self.tables {
            let name = self.schema.table_name(t);
            let _ = self.direct.delete_table().table_name(name).send().await;
        }
    }
}
