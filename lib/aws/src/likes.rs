//! The reference application's handlers (the seed's photo app): likes API, aggregator, rebuilder.
//!
//! A like is acknowledged only once it is durable: `liked[user, post]` is written with
//! `attribute_not_exists`, so a repeated like is idempotent and says so. The count is a view:
//! the aggregator reads the `liked` table's change stream (DynamoDB Streams locally, Kinesis Data
//! Streams for DynamoDB in production), sums each batch per post and flushes absolute totals per
//! stream shard ([`crate::counter`]); the rebuilder recounts `liked` and writes the difference
//! into the `fix` sub-key. The Lambda binaries in `functions/` only parse the event and call these.
//!
//! Poison records: the aggregator stops at the first record it cannot read, flushes the records
//! before it, and reports that record as the batch item failure, so Lambda retries from it and
//! no later record is counted ahead of an earlier one (which would hide it from the seq check).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use aws_lambda_events::apigw::{ApiGatewayV2httpRequest, ApiGatewayV2httpResponse};
use aws_lambda_events::dynamodb::Event as DynamoDbEvent;
use aws_lambda_events::encodings::Body;
use aws_lambda_events::kinesis::KinesisEvent;
use aws_lambda_events::streams::{
    DynamoDbBatchItemFailure, DynamoDbEventResponse, KinesisBatchItemFailure, KinesisEventResponse,
};
use aws_sdk_dynamodb::types::AttributeValue;
use heatsink_core::counter::{CounterKey, Deltas, Seq, WriterId};
use heatsink_core::guard::{Decision, Scope};
use serde::Serialize;
use serde_json::{Value, json};

use crate::admission::Gate;
use crate::cache::{CacheError, MicroCache, Source};
use crate::counter::{CounterStore, CounterStoreError, FlushReport};
use crate::error::describe;
use crate::schema::{Schema, Table};
use crate::stream::now_ms;

/// The counter name of a post's likes (`likes#<post>`).
pub const COUNTER: &str = "likes";
/// The header carrying the liking user's id.
pub const USER_HEADER: &str = "x-user-id";
/// Longest post or user id accepted.
pub const MAX_ID_LEN: usize = 128;
/// The response header telling how `GET /posts/{post}` was served: `hit`, `stale` or `miss`.
pub const CACHE_HEADER: &str = "x-heatsink-cache";
/// The `liked` attribute holding when the like was stored, Unix milliseconds.
pub const LIKED_AT: &str = "liked_at";

/// Errors of the likes application.
#[derive(Debug, thiserror::Error)]
pub enum LikesError {
    /// The request is malformed (HTTP 400).
    #[error("{0}")]
    BadRequest(String),
    /// The post does not exist (HTTP 404).
    #[error("post {0} does not exist")]
    UnknownPost(String),
    /// A stream record lacks the attributes of a like, or has the wrong types.
    #[error("record {id}: {reason}")]
    BadRecord {
        /// The record's sequence number or event id.
        id: String,
        /// What is wrong.
        reason: String,
    },
    /// The counters could not be flushed or read.
    #[error(transparent)]
    Counter(#[from] CounterStoreError),
    /// A count read through the micro-cache failed (the store's error, shared by its waiters).
    #[error(transparent)]
    Cache(#[from] CacheError<CounterStoreError>),
    /// DynamoDB refused the request or could not be reached.
    #[error("DynamoDB: {0}")]
    Dynamo(String),
}

fn dynamo<E: std::error::Error>(e: E) -> LikesError {
    LikesError::Dynamo(describe(&e))
}

/// Checks a post or user id: 1–128 characters of `A-Za-z0-9_-.`.
pub fn valid_id(kind: &str, id: &str) -> Result<(), LikesError> {
    if id.is_empty() || id.len() > MAX_ID_LEN {
        return Err(LikesError::BadRequest(format!(
            "{kind} id must be 1 to {MAX_ID_LEN} characters"
        )));
    }
    if !id
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    {
        return Err(LikesError::BadRequest(format!(
            "{kind} id may only contain letters, digits, '_', '-' and '.'"
        )));
    }
    Ok(())
}

/// Whether a like was new.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LikeOutcome {
    /// The like was recorded now.
    Liked,
    /// The user had already liked the post; nothing changed.
    AlreadyLiked,
}

/// The likes API: `POST /posts/{post}/likes`, `GET /posts/{post}`.
#[derive(Debug)]
pub struct LikesApi {
    ddb: aws_sdk_dynamodb::Client,
    liked: String,
    posts: String,
    counters: Arc<CounterStore>,
    known_posts: Mutex<HashSet<String>>,
    /// Post → count, for `GET /posts/{post}`; `None`: every GET reads the counter.
    cache: Option<MicroCache<String, i64>>,
    /// Per-post and per-user admission for `POST`; `None`: every like is admitted.
    gate: Option<Gate>,
}

impl LikesApi {
    /// The API over the tables of `schema`.
    pub fn new(ddb: aws_sdk_dynamodb::Client, schema: &Schema) -> Self {
        Self {
            counters: Arc::new(CounterStore::new(
                ddb.clone(),
                schema.table_name(Table::Counters),
            )),
            liked: schema.table_name(Table::Liked),
            posts: schema.table_name(Table::Posts),
            ddb,
            known_posts: Mutex::new(HashSet::new()),
            cache: None,
            gate: None,
        }
    }

    /// Admits `POST` likes through `gate` (key = post, tenant = user): a refused like is
    /// answered 429 with `Retry-After` and nothing is written.
    pub fn with_gate(mut self, gate: Gate) -> Self {
        self.gate = Some(gate);
        self
    }

    /// Serves `GET /posts/{post}` through `cache` ([`crate::cache`]; the Lambda uses TTL 1 s,
    /// stale until 3 s), so a hot post costs about one counter Query per second per instance.
    /// A new like through this API drops that post's entry: no count cached before the like is
    /// served afterwards (the count itself moves when the aggregator flushes the like).
    pub fn with_cache(mut self, cache: MicroCache<String, i64>) -> Self {
        self.cache = Some(cache);
        self
    }

    /// The micro-cache in front of count reads, if any.
    pub fn cache(&self) -> Option<&MicroCache<String, i64>> {
        self.cache.as_ref()
    }

    /// `None` when the like may go ahead; the 429 (or 400 for an id the gate refuses) if not.
    async fn admit(&self, post: &str, user: &str) -> Option<ApiGatewayV2httpResponse> {
        let gate = self.gate.as_ref()?;
        match gate.check(post, user).await {
            Ok(Decision::Admit) => None,
            Ok(refused @ Decision::Reject { scope, .. }) => {
                let secs = refused.retry_after_secs().unwrap_or(1);
                let which = match scope {
                    Scope::Key => format!("post {post}"),
                    Scope::Tenant => format!("user {user}"),
                };
                let mut resp = response(
                    429,
                    json!({"error": format!("too many likes for {which}; retry after {secs} s"), "retry_after": secs}),
                );
                if let Ok(v) = secs.to_string().parse() {
                    resp.headers
                        .insert(aws_lambda_events::http::header::RETRY_AFTER, v);
                }
                Some(resp)
            }
            Err(e) => Some(response(400, json!({"error": e.to_string()}))),
        }
    }

    /// Posts never disappear in this model, so a post seen once is remembered for the process.
    async fn ensure_post(&self, post: &str) -> Result<(), LikesError> {
        if self.known_posts.lock().is_ok_and(|k| k.contains(post)) {
            return Ok(());
        }
        let found = self
            .ddb
            .get_item()
            .table_name(&self.posts)
            .key("post", AttributeValue::S(post.to_owned()))
            .projection_expression("post")
            .send()
            .await
            .map_err(dynamo)?;
        if found.item.is_none() {
            return Err(LikesError::UnknownPost(post.to_owned()));
        }
        if let Ok(mut k) = self.known_posts.lock() {
            k.insert(post.to_owned());
        }
        Ok(())
    }

    /// Records `user` liking `post` durably; a repeated like changes nothing.
    pub async fn like(&self, user: &str, post: &str) -> Result<LikeOutcome, LikesError> {
        valid_id("user", user)?;
        valid_id("post", post)?;
        self.ensure_post(post).await?;
        let put = self
            .ddb
            .put_item()
            .table_name(&self.liked)
            .item("user", AttributeValue::S(user.to_owned()))
            .item("post", AttributeValue::S(post.to_owned()))
            // When the like became durable: the rebuilder leaves a post alone until its newest
            // like is old enough that the aggregator has flushed it (see `RebuildOptions`).
            .item(LIKED_AT, AttributeValue::N(now_ms().to_string()))
            .condition_expression("attribute_not_exists(#u)")
            .expression_attribute_names("#u", "user")
            .send()
            .await;
        match put {
            Ok(_) => {
                if let Some(cache) = &self.cache {
                    cache.invalidate(post).await;
                }
                Ok(LikeOutcome::Liked)
            }
            Err(e)
                if e.as_service_error()
                    .is_some_and(|se| se.is_conditional_check_failed_exception()) =>
            {
                Ok(LikeOutcome::AlreadyLiked)
            }
            Err(e) => Err(dynamo(e)),
        }
    }

    /// A post's like count (one Query of its counter partition).
    pub async fn count(&self, post: &str) -> Result<i64, LikesError> {
        valid_id("post", post)?;
        self.ensure_post(post).await?;
        let key = CounterKey::new(COUNTER, post).map_err(CounterStoreError::from)?;
        Ok(self.counters.read(&key).await?.total())
    }

    /// A post's like count through the micro-cache when there is one, with how it was served
    /// (`None`: no cache, read from the counter).
    pub async fn cached_count(&self, post: &str) -> Result<(i64, Option<Source>), LikesError> {
        let Some(cache) = &self.cache else {
            return Ok((self.count(post).await?, None));
        };
        valid_id("post", post)?;
        self.ensure_post(post).await?;
        let counters = Arc::clone(&self.counters);
        let read = cache
            .get_or_load(post, move |post: String| async move {
                let key = CounterKey::new(COUNTER, &post)?;
                Ok(counters.read(&key).await?.total())
            })
            .await?;
        Ok((read.value, Some(read.source)))
    }

    /// Handles one API Gateway v2 / Function URL request.
    pub async fn handle(&self, req: ApiGatewayV2httpRequest) -> ApiGatewayV2httpResponse {
        let method = req.request_context.http.method.as_str().to_owned();
        let path = req
            .raw_path
            .clone()
            .or_else(|| req.request_context.http.path.clone())
            .unwrap_or_default();
        let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
        // How a GET was served, for the `x-heatsink-cache` header (`None`: not through a cache).
        let mut served: Option<Source> = None;
        let result = match (method.as_str(), parts.as_slice()) {
            ("POST", ["posts", post, "likes"]) => {
                let user = req
                    .headers
                    .get(USER_HEADER)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_owned();
                if user.is_empty() {
                    Err(LikesError::BadRequest(format!(
                        "the {USER_HEADER} header names the liking user"
                    )))
                } else if let Some(refused) = self.admit(post, &user).await {
                    return refused;
                } else {
                    self.like(&user, post).await.map(|outcome| {
                        let status = if outcome == LikeOutcome::Liked {
                            201
                        } else {
                            200
                        };
                        (
                            status,
                            json!({"post": post, "user": user, "result": outcome}),
                        )
                    })
                }
            }
            ("GET", ["posts", post]) => self.cached_count(post).await.map(|(n, source)| {
                served = source;
                (200, json!({"post": post, "likes": n}))
            }),
            (_, ["posts", _, "likes"]) | (_, ["posts", _]) => {
                return response(
                    405,
                    json!({"error": format!("{method} is not allowed here")}),
                );
            }
            _ => {
                return response(
                    404,
                    json!({"error": format!("no route for {method} {path}")}),
                );
            }
        };
        match result {
            Ok((status, body)) => {
                let mut resp = response(status, body);
                if let Some(source) = served {
                    resp.headers.insert(
                        CACHE_HEADER,
                        aws_lambda_events::http::HeaderValue::from_static(source.as_header()),
                    );
                }
                resp
            }
            Err(e @ LikesError::BadRequest(_)) => response(400, json!({"error": e.to_string()})),
            Err(e @ LikesError::UnknownPost(_)) => response(404, json!({"error": e.to_string()})),
            Err(e) => {
                tracing::error!(error = %e, "likes-api request failed");
                response(500, json!({"error": "internal error; retry"}))
            }
        }
    }
}

/// A JSON response with `status`.
pub fn response(status: i64, body: Value) -> ApiGatewayV2httpResponse {
    let mut resp = ApiGatewayV2httpResponse::default();
    resp.status_code = status;
    resp.headers.insert(
        aws_lambda_events::http::header::CONTENT_TYPE,
        aws_lambda_events::http::HeaderValue::from_static("application/json"),
    );
    resp.body = Some(Body::Text(body.to_string()));
    resp
}

/// One like event read from a change record: +1 for a new like, −1 for a removed one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LikeEvent {
    /// The post.
    pub post: String,
    /// +1 or −1 (0 for a modification that is neither).
    pub delta: i64,
}

fn attr_s(image: &Value, attr: &str) -> Option<String> {
    image.get(attr)?.get("S")?.as_str().map(str::to_owned)
}

/// Reads a like event from DynamoDB change-record JSON (`eventName`, `dynamodb.NewImage/OldImage`).
pub fn like_event(id: &str, record: &Value) -> Result<LikeEvent, LikesError> {
    let bad = |reason: &str| LikesError::BadRecord {
        id: id.to_owned(),
        reason: reason.to_owned(),
    };
    let name = record
        .get("eventName")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("no eventName"))?;
    let change = record
        .get("dynamodb")
        .ok_or_else(|| bad("no dynamodb change"))?;
    let (image, delta) = match name {
        "INSERT" => (change.get("NewImage"), 1),
        "REMOVE" => (change.get("OldImage"), -1),
        "MODIFY" => (change.get("NewImage"), 0),
        other => return Err(bad(&format!("unknown eventName {other}"))),
    };
    let image = image.ok_or_else(|| bad("no image; the stream must carry NEW_AND_OLD_IMAGES"))?;
    let post = attr_s(image, "post").ok_or_else(|| bad("`post` missing or not a string"))?;
    attr_s(image, "user").ok_or_else(|| bad("`user` missing or not a string"))?;
    valid_id("post", &post).map_err(|e| bad(&e.to_string()))?;
    Ok(LikeEvent { post, delta })
}

/// What one aggregator invocation did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AggregateReport {
    /// Records read before the first failure.
    pub records: u64,
    /// Posts touched.
    pub posts: u64,
    /// What the flush did.
    pub flush: FlushReport,
    /// The record the batch failed at, if any (Lambda retries from it).
    pub failed_at: Option<String>,
    /// Why the batch failed, if it did.
    pub error: Option<String>,
    /// Like events applied to the in-memory aggregate that did not reach `counters` (the flush
    /// failed; Lambda retries them): the `CounterLagEvents` metric.
    pub unflushed: u64,
    /// Milliseconds from the oldest counted like's `ApproximateCreationDateTime` to the end of
    /// its flush: the `CounterFlushDelaySeconds` metric. `None` when nothing new was counted.
    pub flush_delay_ms: Option<u64>,
}

/// A change record's `dynamodb.ApproximateCreationDateTime` in ms since the epoch. DynamoDB
/// Streams events give seconds, Kinesis Data Streams for DynamoDB ms or µs (per the table's
/// `ApproximateCreationDateTimePrecision`); the magnitude tells which for any date in 2001–2286.
pub fn approximate_creation_ms(record: &Value) -> Option<u64> {
    let t = record
        .pointer("/dynamodb/ApproximateCreationDateTime")?
        .as_f64()?;
    let ms = match t {
        t if !t.is_finite() || t <= 0.0 => return None,
        t if t < 1e11 => t * 1e3,
        t if t < 1e14 => t,
        t => t / 1e3,
    };
    Some(ms as u64)
}

/// A stream shard and the sequence numbers it holds (`None` end: still open).
type ShardSpan = (String, Seq, Option<Seq>);

/// The likes aggregator: change records → per-post deltas → conditional absolute flushes.
#[derive(Debug)]
pub struct Aggregator {
    counters: CounterStore,
    streams: Option<aws_sdk_dynamodbstreams::Client>,
    shard_cache: Mutex<HashMap<String, Vec<ShardSpan>>>,
}

impl Aggregator {
    /// An aggregator flushing into `counters`; `streams` resolves DynamoDB Streams shard ids.
    pub fn new(counters: CounterStore, streams: Option<aws_sdk_dynamodbstreams::Client>) -> Self {
        Self {
            counters,
            streams,
            shard_cache: Mutex::new(HashMap::new()),
        }
    }

    /// Aggregates `records` (id, seq, change JSON) of one shard and flushes them as `writer`.
    async fn aggregate(
        &self,
        writer: &WriterId,
        records: Vec<(String, String, Result<Value, String>)>,
    ) -> AggregateReport {
        let mut report = AggregateReport::default();
        let mut deltas = Deltas::new();
        let mut posts = BTreeMap::new();
        let mut oldest_ms: Option<u64> = None;
        for (id, seq, change) in records {
            let parsed = change
                .map_err(|reason| LikesError::BadRecord {
                    id: id.clone(),
                    reason,
                })
                .and_then(|c| Ok((like_event(&id, &c)?, approximate_creation_ms(&c))))
                .and_then(|(ev, created)| {
                    let seq = Seq::parse(&seq).map_err(|e| LikesError::BadRecord {
                        id: id.clone(),
                        reason: e.to_string(),
                    })?;
                    let key =
                        CounterKey::new(COUNTER, &ev.post).map_err(CounterStoreError::from)?;
                    Ok((key, seq, ev.delta, created))
                });
            match parsed {
                Ok((key, seq, delta, created)) => {
                    *posts.entry(key.clone()).or_insert(0) += 1;
                    if let Err(e) = deltas.add_record(key, seq, delta) {
                        tracing::error!(record = %id, error = %e, "unusable record");
                        report.failed_at = Some(id);
                        break;
                    }
                    report.records += 1;
                    if let Some(t) = created {
                        oldest_ms = Some(oldest_ms.map_or(t, |o| o.min(t)));
                    }
                }
                Err(e) => {
                    tracing::error!(record = %id, error = %e, "unusable record; failing the batch from it");
                    report.error = Some(e.to_string());
                    report.failed_at = Some(id);
                    break;
                }
            }
        }
        report.posts = posts.len() as u64;
        if deltas.is_empty() {
            return report;
        }
        match self.counters.flush(writer, &deltas).await {
            Ok(flush) => {
                if flush.counted > 0 {
                    report.flush_delay_ms =
                        oldest_ms.map(|t| crate::stream::now_ms().saturating_sub(t));
                }
                report.flush = flush;
            }
            Err(e) => {
                tracing::error!(error = %e, "flush failed; the whole batch will be retried");
                report.error = Some(e.to_string());
                report.unflushed = report.records;
                report.records = 0;
                report.flush = FlushReport::default();
                report.failed_at = Some(String::new());
            }
        }
        report
    }

    /// Handles a Kinesis event carrying DynamoDB change records (Kinesis Data Streams for DynamoDB).
    pub async fn handle_kinesis(
        &self,
        event: KinesisEvent,
    ) -> (KinesisEventResponse, AggregateReport) {
        let mut resp = KinesisEventResponse::default();
        let Some(first) = event.records.first() else {
            return (resp, AggregateReport::default());
        };
        let first_seq = first.kinesis.sequence_number.clone();
        // Kinesis event ids are `shardId-…:<sequence number>`: the shard is the writer.
        let shard = first
            .event_id
            .as_deref()
            .and_then(|id| id.split(':').next())
            .unwrap_or("");
        let writer = match WriterId::new(shard) {
            Ok(w) => w,
            Err(e) => {
                tracing::error!(error = %e, "Kinesis event without a shard id; retrying the batch");
                resp.batch_item_failures.push(kinesis_failure(first_seq));
                return (resp, AggregateReport::default());
            }
        };
        let records = event
            .records
            .iter()
            .map(|r| {
                let seq = r.kinesis.sequence_number.clone();
                let change = serde_json::from_slice::<Value>(&r.kinesis.data.0)
                    .map_err(|e| format!("data is not a JSON change record: {e}"));
                (seq.clone(), seq, change)
            })
            .collect();
        let report = self.aggregate(&writer, records).await;
        if let Some(at) = &report.failed_at {
            resp.batch_item_failures
                .push(kinesis_failure(if at.is_empty() {
                    first_seq
                } else {
                    at.clone()
                }));
        }
        (resp, report)
    }

    /// Handles a DynamoDB Streams event.
    pub async fn handle_dynamodb(
        &self,
        event: DynamoDbEvent,
    ) -> (DynamoDbEventResponse, AggregateReport) {
        let mut resp = DynamoDbEventResponse::default();
        let Some(first) = event.records.first() else {
            return (resp, AggregateReport::default());
        };
        let first_seq = first.change.sequence_number.clone().unwrap_or_default();
        let arn = first.event_source_arn.clone().unwrap_or_default();
        let writer = match self.resolve_shard(&arn, &first_seq).await {
            Ok(w) => w,
            Err(e) => {
                tracing::error!(error = %e, "cannot tell which shard this batch is from; retrying it");
                resp.batch_item_failures.push(dynamodb_failure(first_seq));
                let report = AggregateReport {
                    error: Some(e.to_string()),
                    ..AggregateReport::default()
                };
                return (resp, report);
            }
        };
        let records = event
            .records
            .iter()
            .map(|r| {
                let seq = r.change.sequence_number.clone().unwrap_or_default();
                let change = serde_json::to_value(r)
                    .map_err(|e| format!("record does not serialise: {e}"))
                    .map(|mut v| {
                        // aws_lambda_events names the change `dynamodb` in JSON, as Lambda does.
                        if let Some(obj) = v.as_object_mut()
                            && !obj.contains_key("dynamodb")
                            && let Some(c) = obj.remove("change")
                        {
                            obj.insert("dynamodb".into(), c);
                        }
                        v
                    });
                (seq.clone(), seq, change)
            })
            .collect();
        let report = self.aggregate(&writer, records).await;
        if let Some(at) = &report.failed_at {
            resp.batch_item_failures
                .push(dynamodb_failure(if at.is_empty() {
                    first_seq
                } else {
                    at.clone()
                }));
        }
        (resp, report)
    }

    /// DynamoDB Streams events do not name their shard; find the shard whose sequence range
    /// holds `seq` (DescribeStream, cached per stream and refreshed once on a miss). An
    /// ambiguous or unknown answer is an error, never a guess: a wrong writer would skip records.
    async fn resolve_shard(&self, arn: &str, seq: &str) -> Result<WriterId, LikesError> {
        let bad = |reason: String| LikesError::BadRecord {
            id: seq.to_owned(),
            reason,
        };
        let seq = Seq::parse(seq).map_err(|e| bad(e.to_string()))?;
        for refresh in [false, true] {
            if refresh || !self.shard_cache.lock().is_ok_and(|c| c.contains_key(arn)) {
                let shards = self.describe_shards(arn).await?;
                if let Ok(mut c) = self.shard_cache.lock() {
                    c.insert(arn.to_owned(), shards);
                }
            }
            let hits: Vec<String> = self
                .shard_cache
                .lock()
                .map(|c| {
                    c.get(arn)
                        .into_iter()
                        .flatten()
                        .filter(|(_, start, end)| {
                            *start <= seq && end.as_ref().is_none_or(|e| seq <= *e)
                        })
                        .map(|(id, _, _)| id.clone())
                        .collect()
                })
                .unwrap_or_default();
            if hits.len() == 1 {
                return WriterId::new(&hits[0]).map_err(|e| bad(e.to_string()));
            }
            if hits.len() > 1 && refresh {
                return Err(bad(format!(
                    "sequence number lies in {} shards: {}",
                    hits.len(),
                    hits.join(", ")
                )));
            }
        }
        Err(bad(
            "no shard of the stream holds this sequence number".into()
        ))
    }

    async fn describe_shards(
        &self,
        arn: &str,
    ) -> Result<Vec<(String, Seq, Option<Seq>)>, LikesError> {
        let Some(streams) = &self.streams else {
            return Err(LikesError::BadRecord {
                id: arn.to_owned(),
                reason: "no DynamoDB Streams client to resolve shards".into(),
            });
        };
        let mut out = vec![];
        let mut parents = HashSet::new();
        let mut start: Option<String> = None;
        loop {
            let desc = streams
                .describe_stream()
                .stream_arn(arn)
                .set_exclusive_start_shard_id(start)
                .send()
                .await
                .map_err(dynamo)?;
            let Some(d) = desc.stream_description else {
                break;
            };
            for sh in d.shards() {
                let (Some(id), Some(range)) = (sh.shard_id(), sh.sequence_number_range()) else {
                    continue;
                };
                let Some(first) = range
                    .starting_sequence_number()
                    .and_then(|s| Seq::parse(s).ok())
                else {
                    continue;
                };
                let last = range
                    .ending_sequence_number()
                    .and_then(|s| Seq::parse(s).ok());
                if let Some(p) = sh.parent_shard_id() {
                    parents.insert(p.to_owned());
                }
                out.push((id.to_owned(), first, last));
            }
            start = d.last_evaluated_shard_id;
            if start.is_none() {
                break;
            }
        }
        // The newest shard of each lineage (no child yet) is still open and takes new records,
        // whatever ending number an emulator reports for it (dynoxide reports the string-largest
        // seq it holds, e.g. "9" after "30").
        for (id, _, end) in &mut out {
            if !parents.contains(id.as_str()) {
                *end = None;
            }
        }
        Ok(out)
    }
}

fn kinesis_failure(id: String) -> KinesisBatchItemFailure {
    let mut f = KinesisBatchItemFailure::default();
    f.item_identifier = Some(id);
    f
}

fn dynamodb_failure(id: String) -> DynamoDbBatchItemFailure {
    let mut f = DynamoDbBatchItemFailure::default();
    f.item_identifier = Some(id);
    f
}

/// What a rebuild corrected.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RebuildReport {
    /// Durable like records scanned.
    pub likes_scanned: u64,
    /// Posts whose counter was checked.
    pub posts_checked: u64,
    /// Posts whose `fix` changed, with the change.
    pub corrected: BTreeMap<String, i64>,
    /// Posts left for a later run: liked within the quiet period, or their counter moved while
    /// this run counted (a correction then would be off by the likes in flight).
    pub unsettled: Vec<String>,
    /// Posts whose id or counter items are malformed; reported, left alone.
    pub skipped: Vec<String>,
}

/// How a rebuild decides that a post's counter can be compared with its durable likes.
#[derive(Debug, Clone, PartialEq)]
pub struct RebuildOptions {
    /// A post is corrected only if its newest like is at least this old: every like the count
    /// compares against must have had time to be flushed by the aggregator. Without it, a like
    /// still in the stream would be counted once by the `fix` and again by its flush.
    pub quiet: std::time::Duration,
}

impl Default for RebuildOptions {
    /// One minute: well beyond the aggregator's normal lag (a batching window of seconds).
    fn default() -> Self {
        Self {
            quiet: std::time::Duration::from_secs(60),
        }
    }
}

/// Calls `each` with the attributes `attrs` of every item of `table` (a consistent, paginated
/// Scan that projects only those attributes).
async fn scan_items(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
    attrs: &[&str],
    mut each: impl FnMut(&HashMap<String, AttributeValue>),
) -> Result<(), LikesError> {
    let names: Vec<String> = (0..attrs.len()).map(|i| format!("#a{i}")).collect();
    let mut start = None;
    loop {
        let out = ddb
            .scan()
            .table_name(table)
            .projection_expression(names.join(", "))
            .set_expression_attribute_names(Some(
                names
                    .iter()
                    .cloned()
                    .zip(attrs.iter().map(|a| (*a).to_owned()))
                    .collect(),
            ))
            .consistent_read(true)
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(dynamo)?;
        out.items().iter().for_each(&mut each);
        start = out.last_evaluated_key;
        if start.is_none() {
            return Ok(());
        }
    }
}

/// A malformed counter's error as text (the post is reported and left alone); any other
/// error (DynamoDB unreachable, throttled) stops the rebuild.
fn unrepairable(e: CounterStoreError) -> Result<String, LikesError> {
    match e {
        CounterStoreError::Counter(_) | CounterStoreError::Malformed { .. } => Ok(e.to_string()),
        e => Err(e.into()),
    }
}

/// A rebuild in progress: the counters as they were before the durable likes were counted.
///
/// [`rebuild`] runs [`Rebuild::begin`] then [`Rebuild::finish`]; they are separate so a test
/// can land a flush in between and see the post left alone rather than mis-corrected.
#[derive(Debug)]
pub struct Rebuild {
    ddb: aws_sdk_dynamodb::Client,
    counters: CounterStore,
    liked: String,
    options: RebuildOptions,
    /// Each existing counter's total without `fix`, read before the durable likes are counted.
    before: BTreeMap<String, Result<i64, String>>,
    report: RebuildReport,
}

impl Rebuild {
    /// Reads every existing counter (one Query each) before anything is counted.
    pub async fn begin(
        ddb: &aws_sdk_dynamodb::Client,
        schema: &Schema,
        options: RebuildOptions,
    ) -> Result<Self, LikesError> {
        let counters = CounterStore::new(ddb.clone(), schema.table_name(Table::Counters));
        let prefix = format!("{COUNTER}#");
        let mut posts = std::collections::BTreeSet::new();
        scan_items(ddb, &schema.table_name(Table::Counters), &["pk"], |item| {
            if let Some(post) = item
                .get("pk")
                .and_then(|v| v.as_s().ok())
                .and_then(|pk| pk.strip_prefix(&prefix))
            {
                posts.insert(post.to_owned());
            }
        })
        .await?;
        let mut before = BTreeMap::new();
        for post in posts {
            // An unreadable counter is remembered as such: `finish` reports it and moves on.
            let sum = match CounterKey::new(COUNTER, &post) {
                Ok(key) => match counters.read(&key).await {
                    Ok(sum) => Ok(sum.without_fix()),
                    Err(e) => Err(unrepairable(e)?),
                },
                Err(e) => Err(e.to_string()),
            };
            before.insert(post, sum);
        }
        Ok(Self {
            ddb: ddb.clone(),
            counters,
            liked: schema.table_name(Table::Liked),
            options,
            before,
            report: RebuildReport::default(),
        })
    }

    /// Counts the durable likes and corrects every settled post's `fix`.
    pub async fn finish(mut self) -> Result<RebuildReport, LikesError> {
        let ddb = self.ddb.clone();
        let mut truth: BTreeMap<String, (i64, u64)> = BTreeMap::new();
        let report = &mut self.report;
        scan_items(&ddb, &self.liked, &["post", LIKED_AT], |item| {
            let Some(post) = item.get("post").and_then(|v| v.as_s().ok()) else {
                return;
            };
            // A like stored before `liked_at` existed counts as old.
            let at = item
                .get(LIKED_AT)
                .and_then(|v| v.as_n().ok())
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0);
            let (count, newest) = truth.entry(post.to_owned()).or_insert((0, 0));
            *count += 1;
            *newest = (*newest).max(at);
            report.likes_scanned += 1;
        })
        .await?;
        // Posts whose likes were all removed still have counter items: check those too.
        for post in self.before.keys() {
            truth.entry(post.clone()).or_insert((0, 0));
        }
        let quiet_ms = u64::try_from(self.options.quiet.as_millis()).unwrap_or(u64::MAX);
        let cutoff = now_ms().saturating_sub(quiet_ms);
        for (post, (count, newest)) in truth {
            let key = match CounterKey::new(COUNTER, &post) {
                Ok(k) => k,
                Err(e) => {
                    tracing::warn!(post = %post, error = %e, "not a counter key; left alone");
                    self.report.skipped.push(post);
                    continue;
                }
            };
            let settled = quiet_ms == 0 || newest <= cutoff;
            let outcome = match self.before.get(&post) {
                Some(Err(e)) => Err(e.clone()),
                _ if !settled => Ok(None),
                before => {
                    let before = before.and_then(|b| b.as_ref().ok()).copied().unwrap_or(0);
                    match self.counters.correct_if_unmoved(&key, count, before).await {
                        Ok(fix) => Ok(fix),
                        Err(e) => Err(unrepairable(e)?),
                    }
                }
            };
            match outcome {
                Ok(Some(fix)) => {
                    self.report.posts_checked += 1;
                    if fix.change != 0 {
                        self.report.corrected.insert(post, fix.change);
                    }
                }
                // Liked within the quiet period, or the counter moved while counting.
                Ok(None) => self.report.unsettled.push(post),
                // One malformed counter (an item edited by hand) must not stop the others' repair.
                Err(e) => {
                    tracing::warn!(post = %post, error = %e, "counter not repairable; left alone");
                    self.report.skipped.push(post);
                }
            }
        }
        Ok(self.report)
    }
}

/// Recounts every post's likes from `liked` and writes the difference into `fix`.
///
/// Only settled posts are corrected: no like newer than `options.quiet`, and a counter that did
/// not move while the likes were counted (read before and again at the correction). A post
/// still being liked is reported as `unsettled` and left for a later run, so the rebuilder never
/// turns a hot post's in-flight likes into a lasting error. A flush that lands between the
/// second read and the `fix` write (milliseconds) can still leave an error; the next run that
/// finds the post settled removes it.
pub async fn rebuild(
    ddb: &aws_sdk_dynamodb::Client,
    schema: &Schema,
    options: RebuildOptions,
) -> Result<RebuildReport, LikesError> {
    Rebuild::begin(ddb, schema, options).await?.finish().await
}

/// Builds the Lambda event Lambda would deliver for `records` read from the stream `arn`, so the
/// demo and the tests drive [`Aggregator::handle_dynamodb`] with exactly what AWS sends.
pub fn dynamodb_event(
    arn: &str,
    records: &[aws_sdk_dynamodbstreams::types::Record],
) -> Result<DynamoDbEvent, LikesError> {
    let records: Vec<Value> = records
        .iter()
        .map(|r| {
            let change = r.dynamodb();
            let image =
                |m: Option<&HashMap<String, aws_sdk_dynamodbstreams::types::AttributeValue>>| {
                    Value::Object(
                        m.into_iter()
                            .flatten()
                            .map(|(k, v)| (k.clone(), stream_attr_json(v)))
                            .collect(),
                    )
                };
            json!({
                "eventID": r.event_id().unwrap_or_default(),
                "eventName": r.event_name().map(|n| n.as_str()).unwrap_or_default(),
                "eventVersion": "1.1",
                "eventSource": "aws:dynamodb",
                "awsRegion": r.aws_region().unwrap_or("us-east-1"),
                "eventSourceARN": arn,
                "dynamodb": {
                    "ApproximateCreationDateTime": change
                        .and_then(|c| c.approximate_creation_date_time())
                        .map(|t| t.secs())
                        .unwrap_or_default(),
                    "Keys": image(change.and_then(|c| c.keys.as_ref())),
                    "NewImage": image(change.and_then(|c| c.new_image.as_ref())),
                    "OldImage": image(change.and_then(|c| c.old_image.as_ref())),
                    "SequenceNumber": change.and_then(|c| c.sequence_number()).unwrap_or_default(),
                    "SizeBytes": change.and_then(|c| c.size_bytes()).unwrap_or_default(),
                    "StreamViewType": change
                        .and_then(|c| c.stream_view_type())
                        .map(|v| v.as_str())
                        .unwrap_or("NEW_AND_OLD_IMAGES"),
                }
            })
        })
        .collect();
    serde_json::from_value(json!({ "Records": records })).map_err(|e| LikesError::BadRecord {
        id: arn.to_owned(),
        reason: format!("cannot build the Lambda event: {e}"),
    })
}

fn stream_attr_json(v: &aws_sdk_dynamodbstreams::types::AttributeValue) -> Value {
    use aws_sdk_dynamodbstreams::types::AttributeValue as A;
    match v {
        A::S(s) => json!({ "S": s }),
        A::N(n) => json!({ "N": n }),
        A::Bool(b) => json!({ "BOOL": b }),
        A::Null(b) => json!({ "NULL": b }),
        A::Ss(v) => json!({ "SS": v }),
        A::Ns(v) => json!({ "NS": v }),
        A::L(l) => json!({ "L": l.iter().map(stream_attr_json).collect::<Vec<_>>() }),
        A::M(m) => {
            json!({ "M": m.iter().map(|(k, v)| (k.clone(), stream_attr_json(v))).collect::<serde_json::Map<_, _>>() })
        }
        _ => json!({ "NULL": true }),
    }
}

#[cfg(test)]
mod cache_tests {
    use aws_lambda_events::http::{HeaderValue, Method};
    use aws_sdk_dynamodb::operation::get_item::GetItemOutput;
    use aws_sdk_dynamodb::operation::put_item::PutItemOutput;
    use aws_sdk_dynamodb::operation::query::QueryOutput;
    use aws_smithy_mocks::{Rule, mock};

    use super::*;
    use crate::testing::mocked;

    /// DynamoDB answering: post `p9` exists, its counter holds 10 (one `fix` sub-key), and every
    /// like is new. The returned rule counts the counter Queries.
    fn ddb() -> (aws_sdk_dynamodb::Client, Rule) {
        let get = mock!(aws_sdk_dynamodb::Client::get_item).then_output(|| {
            GetItemOutput::builder()
                .item("post", AttributeValue::S("p9".into()))
                .build()
        });
        let query = mock!(aws_sdk_dynamodb::Client::query).then_compute_output(|_| {
            QueryOutput::builder()
                .items(HashMap::from([
                    ("pk".to_owned(), AttributeValue::S("likes#p9".into())),
                    ("sk".to_owned(), AttributeValue::S("fix".into())),
                    ("total".to_owned(), AttributeValue::N("10".into())),
                ]))
                .build()
        });
        let put = mock!(aws_sdk_dynamodb::Client::put_item)
            .then_output(|| PutItemOutput::builder().build());
        (mocked!(aws_sdk_dynamodb, get, query, put), query)
    }

    fn request(method: Method, path: &str) -> ApiGatewayV2httpRequest {
        let mut req = ApiGatewayV2httpRequest::default();
        req.request_context.http.method = method;
        req.raw_path = Some(path.to_owned());
        req.headers
            .insert(USER_HEADER, HeaderValue::from_static("u1"));
        req
    }

    fn served(resp: &ApiGatewayV2httpResponse) -> Option<&str> {
        resp.headers.get(CACHE_HEADER).and_then(|v| v.to_str().ok())
    }

    #[tokio::test]
    async fn a_cached_get_queries_the_counter_once_and_a_local_like_drops_the_entry() {
        let (client, query) = ddb();
        let api =
            LikesApi::new(client, &Schema::default()).with_cache(MicroCache::builder().build());
        let first = api.handle(request(Method::GET, "/posts/p9")).await;
        assert_eq!((first.status_code, served(&first)), (200, Some("miss")));
        let second = api.handle(request(Method::GET, "/posts/p9")).await;
        assert_eq!((second.status_code, served(&second)), (200, Some("hit")));
        assert_eq!(
            query.num_calls(),
            1,
            "the second GET was answered from memory"
        );
        let like = api.handle(request(Method::POST, "/posts/p9/likes")).await;
        assert_eq!(like.status_code, 201);
        let after = api.handle(request(Method::GET, "/posts/p9")).await;
        assert_eq!(
            served(&after),
            Some("miss"),
            "a local like drops the cached count"
        );
        assert_eq!(query.num_calls(), 2);
    }

    #[tokio::test]
    async fn without_a_cache_every_get_queries_the_counter_and_has_no_cache_header() {
        let (client, query) = ddb();
        let api = LikesApi::new(client, &Schema::default());
        for _ in 0..2 {
            let resp = api.handle(request(Method::GET, "/posts/p9")).await;
            assert_eq!((resp.status_code, served(&resp)), (200, None));
        }
        assert_eq!(query.num_calls(), 2);
    }
}
