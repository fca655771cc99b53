//! The reference photo app, built on heatsink: what a team's own application looks like when
//! it uses the toolkit.
//!
//! One celebrity post takes 10,000 likes/s and 66,667 reads/s, while one DynamoDB partition
//! takes 1,000 WCU/s and 3,000 RCU/s (see docs/hot-keys.md). The app survives it with the
//! toolkit's pieces, and names every one of its own concepts here, never in `heatsink`:
//!
//! - [`api`]: `POST /posts/{post}/likes` writes one durable `liked[user, post]` item (idempotent);
//!   `GET /posts/{post}` reads the count through the micro-cache; likes pass the admission gate.
//! - [`mapper`]: the like-event mapper (`liked` change → `likes#<post>` ± 1) for the toolkit's
//!   stream-batch aggregator, [`aggregator`](mod@aggregator).
//! - [`rebuild`]: the rebuild rule over a recount of `liked`.
//! - [`schema`]: the app's tables (`liked`, `posts`) beside the toolkit's own.
//! - [`metrics`] and [`dashboard`]: which function emits which metric, and the dashboard.
//! - [`lambda`]: the functions' cold start.
//!
//! The Lambda binaries in `functions/` parse the event and call these; `heatsink-demo` and
//! `heatsink rebuild` drive the same code locally.

pub mod aggregator;
pub mod api;
pub mod api_limits;
pub mod counting;
pub mod dashboard;
pub mod esm;
pub mod id;
pub mod lambda;
pub mod mapper;
pub mod metrics;
pub mod rebuild;
pub mod schema;

pub use aggregator::{Aggregator, aggregator};
pub use api::{LikeOutcome, LikesApi, LikesError};
pub use schema::{Schema, Table};
