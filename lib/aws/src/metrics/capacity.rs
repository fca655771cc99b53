//! The capacity log: one JSON log line per DynamoDB item key a call touched, with the consumed
//! capacity, for CloudWatch Contributor Insights rules and for finding a hot key after the fact.
//!
//! [`CapacityLog`] is an SDK interceptor: it asks every data-plane call for
//! `ReturnConsumedCapacity=INDEXES` and logs the table, the index, the partition key value and
//! the consumed WCU or RCU. It must know each table's partition key (and each GSI's), so it is
//! built from the [`TableSpec`]s of the tables you call: the toolkit's and your own. Batch calls
//! report capacity per table, not per key, so a batch's capacity is split evenly over its keys
//! (exact for items of the same size class, which counter sub-keys are). With the JSON logger
//! of `heatsink::lambda` the fields nest under `fields` (`$.fields.partition_key`), which is
//! where heatsink's insight rules look.
//!
//! # Sampling and personal data
//! [`CapacityLog::sampled`] logs 1 call in N (the others are sent unchanged, without even
//! asking for their capacity) and multiplies each logged line's capacity by N, so an insight
//! rule's sums stay unbiased estimates; the line carries `sample_rate = N`.
//! [`CapacityLog::pseudonymized_except`] logs the partition keys of every table but the named
//! ones as `h:<16 hex digits>` (64-bit SipHash-1-3 with fixed keys): one key still maps to one
//! contributor, but the value (a user id) is not in the log. That is pseudonymous, not
//! anonymous: whoever can guess an id can check it. [`dynamodb_client`] (what the Lambda
//! functions use) reads both from the environment: `HEATSINK_CAPACITY_LOG_SAMPLE` (N, default
//! 100) and `HEATSINK_CAPACITY_LOG_CLEAR_TABLES` (comma-separated tables logged in clear;
//! default none: every key hashed).

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use aws_sdk_dynamodb::config::interceptors::{
    BeforeSerializationInterceptorContextMut, FinalizerInterceptorContextRef,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::operation::batch_get_item::{
    BatchGetItemError, BatchGetItemInput, BatchGetItemOutput,
};
use aws_sdk_dynamodb::operation::batch_write_item::{
    BatchWriteItemError, BatchWriteItemInput, BatchWriteItemOutput,
};
use aws_sdk_dynamodb::operation::delete_item::{
    DeleteItemError, DeleteItemInput, DeleteItemOutput,
};
use aws_sdk_dynamodb::operation::get_item::{GetItemError, GetItemInput, GetItemOutput};
use aws_sdk_dynamodb::operation::put_item::{PutItemError, PutItemInput, PutItemOutput};
use aws_sdk_dynamodb::operation::query::{QueryError, QueryInput, QueryOutput};
use aws_sdk_dynamodb::operation::scan::{ScanError, ScanInput, ScanOutput};
use aws_sdk_dynamodb::operation::update_item::{
    UpdateItemError, UpdateItemInput, UpdateItemOutput,
};
use aws_sdk_dynamodb::types::{AttributeValue, Capacity, ConsumedCapacity, ReturnConsumedCapacity};
use aws_smithy_types::config_bag::{Storable, StoreReplace};

use aws_smithy_runtime_api::client::interceptors::context::Error as InterceptorError;
use aws_smithy_runtime_api::client::orchestrator::OrchestratorError;
use heatsink_core::throttle::{Class, Remedy, classify};

use crate::ddb::value::scalar_text as key_string;
use crate::schema::TableSpec;

/// Names of the structured log fields of a capacity line, which Contributor Insights rules read;
/// the JSON logger nests them under `fields`, e.g. `$.fields.table`.
pub mod log_field {
    /// Full table name, e.g. `heatsink-counters`.
    pub const TABLE: &str = "table";
    /// GSI name on index operations; absent on base-table operations.
    pub const INDEX: &str = "index";
    /// The partition key value a call touched (salted sub-keys included).
    pub const PARTITION_KEY: &str = "partition_key";
    /// Write capacity units the call consumed.
    pub const CONSUMED_WCU: &str = "consumed_wcu";
    /// Read capacity units the call consumed.
    pub const CONSUMED_RCU: &str = "consumed_rcu";
    /// Full Kinesis stream name, on PutRecord(s) lines.
    pub const STREAM: &str = "stream";
    /// Every field.
    pub const ALL: [&str; 6] = [
        TABLE,
        INDEX,
        PARTITION_KEY,
        CONSUMED_WCU,
        CONSUMED_RCU,
        STREAM,
    ];
}

/// A DynamoDB client for `config` that logs the consumed capacity of every data-plane call on
/// `tables` ([`CapacityLog`]).
pub fn dynamodb_client(
    config: &aws_types::SdkConfig,
    tables: &[TableSpec],
) -> aws_sdk_dynamodb::Client {
    let log = CapacityLog::from_lookup(tables, |name| std::env::var(name).ok());
    let conf = aws_sdk_dynamodb::config::Builder::from(config)
        .interceptor(log)
        .build();
    // No call waits forever: a config without a bound of its own gets the policy's.
    crate::timeouts::bounded!(
        aws_sdk_dynamodb,
        aws_sdk_dynamodb::Client::from_conf(conf),
        crate::timeouts::Timeouts::CALL
    )
}

/// The partition key attributes of one table and of its GSIs.
#[derive(Debug, Clone)]
struct TableKeys {
    partition_key: String,
    gsis: Vec<(String, String)>,
}

/// Reads which keys a call touches from its input, knowing each table's key attributes (shared
/// by the capacity log and the throttle watch).
#[derive(Debug, Clone)]
pub(crate) struct KeyReader {
    tables: Arc<HashMap<String, TableKeys>>,
}

/// SDK interceptor: requests `ReturnConsumedCapacity=INDEXES` (unless the caller chose a value)
/// and logs one `info` line per key a call touched, with the [`log_field`] fields and `op`.
///
/// Covers GetItem, PutItem, UpdateItem, DeleteItem, Query, Scan, BatchGetItem and BatchWriteItem
/// (what heatsink calls); other operations pass through unlogged. A Scan has no partition key and
/// logs none. A failed call logs its keys with `error` (the error code) and no capacity.
#[derive(Debug, Clone)]
pub struct CapacityLog {
    keys: KeyReader,
    /// Log 1 call in this many (≥ 1).
    sample: u64,
    /// Calls seen, for the 1-in-N choice.
    seen: Arc<AtomicU64>,
    /// `Some(clear)`: hash the partition keys of every table not in `clear`.
    clear: Option<Arc<HashSet<String>>>,
}

/// Calls logged per call made by [`dynamodb_client`] when `HEATSINK_CAPACITY_LOG_SAMPLE` is unset.
pub const DEFAULT_SAMPLE: u32 = 100;

impl CapacityLog {
    /// An interceptor that knows the key attributes of `tables` (calls on other tables are
    /// logged without their partition key).
    pub fn new(tables: &[TableSpec]) -> Self {
        Self {
            keys: KeyReader::new(tables),
            sample: 1,
            seen: Arc::new(AtomicU64::new(0)),
            clear: None,
        }
    }

    /// Logs 1 call in `n` (0 is taken as 1), each line's capacity multiplied by `n`.
    #[must_use]
    pub fn sampled(mut self, n: u32) -> Self {
        self.sample = u64::from(n.max(1));
        self
    }

    /// Hashes the partition keys of every table but `clear` (tables keyed by non-personal ids).
    #[must_use]
    pub fn pseudonymized_except<I, S>(mut self, clear: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.clear = Some(Arc::new(clear.into_iter().map(Into::into).collect()));
        self
    }

    /// The log [`dynamodb_client`] builds: sampled by `HEATSINK_CAPACITY_LOG_SAMPLE` (default
    /// [`DEFAULT_SAMPLE`]; a value that is not a positive whole number is the default), keys
    /// hashed but for `HEATSINK_CAPACITY_LOG_CLEAR_TABLES`.
    pub fn from_lookup(tables: &[TableSpec], lookup: impl Fn(&str) -> Option<String>) -> Self {
        let sample = lookup("HEATSINK_CAPACITY_LOG_SAMPLE")
            .and_then(|v| v.trim().parse::<u32>().ok())
            .filter(|n| *n >= 1)
            .unwrap_or(DEFAULT_SAMPLE);
        let clear = lookup("HEATSINK_CAPACITY_LOG_CLEAR_TABLES").unwrap_or_default();
        Self::new(tables).sampled(sample).pseudonymized_except(
            clear
                .split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(str::to_owned)
                .collect::<Vec<_>>(),
        )
    }

    /// The partition key as logged for `table`: in clear, or hashed.
    fn shown(&self, table: &str, key: &str) -> String {
        match &self.clear {
            Some(clear) if !clear.contains(table) => {
                let mut h = std::hash::DefaultHasher::new();
                key.hash(&mut h);
                format!("h:{:016x}", h.finish())
            }
            _ => key.to_owned(),
        }
    }

    /// Whether this call is one of the 1 in N logged.
    fn chosen(&self) -> bool {
        self.sample <= 1
            || self
                .seen
                .fetch_add(1, Ordering::Relaxed)
                .is_multiple_of(self.sample)
    }

    /// What a call is about, read from its input; `None` for operations not logged.
    /// The call to log, if this one is sampled: keys shown as configured, capacity scaled.
    fn call(&self, context: &mut BeforeSerializationInterceptorContextMut<'_>) -> Option<Call> {
        if !self.chosen() {
            return None;
        }
        let mut call = self.keys.read(context, true)?;
        call.sample = self.sample as f64;
        for t in &mut call.targets {
            t.partition_key = t.partition_key.as_deref().map(|k| self.shown(&t.table, k));
            let table = t.table.clone();
            for (_, v) in &mut t.gsi_keys {
                *v = self.shown(&table, v);
            }
        }
        Some(call)
    }
}

impl KeyReader {
    /// A reader that knows the key attributes of `tables` (calls on other tables are read
    /// without their partition key).
    pub(crate) fn new(tables: &[TableSpec]) -> Self {
        let tables = tables
            .iter()
            .map(|t| {
                let keys = TableKeys {
                    partition_key: t.partition_key.name.clone(),
                    gsis: t
                        .gsis
                        .iter()
                        .map(|g| (g.name.clone(), g.partition_key.name.clone()))
                        .collect(),
                };
                (t.name.clone(), keys)
            })
            .collect();
        Self {
            tables: Arc::new(tables),
        }
    }

    /// The key attribute of `index` (or of the base table) of `table`, if the table is known.
    fn key_attr(&self, table: &str, index: Option<&str>) -> Option<&str> {
        let keys = self.tables.get(table)?;
        match index {
            None => Some(keys.partition_key.as_str()),
            Some(ix) => keys
                .gsis
                .iter()
                .find(|(n, _)| n == ix)
                .map(|(_, pk)| pk.as_str()),
        }
    }

    /// A target from an item or key: its partition key, and for a full item its GSI keys.
    fn target(&self, table: &str, attrs: &HashMap<String, AttributeValue>, item: bool) -> Target {
        let value = |attr: &str| attrs.get(attr).and_then(key_string);
        let gsi_keys = match (item, self.tables.get(table)) {
            (true, Some(keys)) => keys
                .gsis
                .iter()
                .filter_map(|(name, pk)| Some((name.clone(), value(pk)?)))
                .collect(),
            _ => vec![],
        };
        Target {
            table: table.to_owned(),
            index: None,
            partition_key: self.key_attr(table, None).and_then(value),
            gsi_keys,
        }
    }

    /// What a call is about, from its input; `None` for operations not read. With
    /// `ask_capacity`, the call is also asked for `ReturnConsumedCapacity=INDEXES` (unless the
    /// caller chose a value).
    pub(crate) fn read(
        &self,
        context: &mut BeforeSerializationInterceptorContextMut<'_>,
        ask_capacity: bool,
    ) -> Option<Call> {
        const INDEXES: ReturnConsumedCapacity = ReturnConsumedCapacity::Indexes;
        let ask = |rcc: &mut Option<ReturnConsumedCapacity>| {
            if ask_capacity {
                rcc.get_or_insert(INDEXES);
            }
        };
        let input = context.input_mut();
        let table = |t: &Option<String>| t.clone().unwrap_or_default();
        // A single-item call: one target, from its key (or, for a put, the whole item).
        macro_rules! single_item {
            ($input:ty, $op:ident, $attrs:ident, $item:literal) => {
                if let Some(i) = input.downcast_mut::<$input>() {
                    ask(&mut i.return_consumed_capacity);
                    let t = self.target(&table(&i.table_name), i.$attrs.as_ref()?, $item);
                    return Some(Call::new(Op::$op, vec![t]));
                }
            };
        }
        single_item!(GetItemInput, GetItem, key, false);
        single_item!(PutItemInput, PutItem, item, true);
        single_item!(UpdateItemInput, UpdateItem, key, false);
        single_item!(DeleteItemInput, DeleteItem, key, false);
        if let Some(i) = input.downcast_mut::<QueryInput>() {
            ask(&mut i.return_consumed_capacity);
            let t = table(&i.table_name);
            let partition_key = self.key_attr(&t, i.index_name.as_deref()).and_then(|attr| {
                query_partition_key(
                    i.key_condition_expression.as_deref()?,
                    attr,
                    i.expression_attribute_names.as_ref(),
                    i.expression_attribute_values.as_ref()?,
                )
            });
            let target = Target {
                table: t,
                index: i.index_name.clone(),
                partition_key,
                gsi_keys: vec![],
            };
            return Some(Call::new(Op::Query, vec![target]));
        }
        if let Some(i) = input.downcast_mut::<ScanInput>() {
            ask(&mut i.return_consumed_capacity);
            let target = Target {
                table: table(&i.table_name),
                index: i.index_name.clone(),
                partition_key: None,
                gsi_keys: vec![],
            };
            return Some(Call::new(Op::Scan, vec![target]));
        }
        if let Some(i) = input.downcast_mut::<BatchGetItemInput>() {
            ask(&mut i.return_consumed_capacity);
            let targets = i
                .request_items
                .iter()
                .flatten()
                .flat_map(|(t, ka)| ka.keys.iter().map(|k| self.target(t, k, false)))
                .collect();
            return Some(Call::new(Op::BatchGetItem, targets));
        }
        if let Some(i) = input.downcast_mut::<BatchWriteItemInput>() {
            ask(&mut i.return_consumed_capacity);
            let targets = i
                .request_items
                .iter()
                .flatten()
                .flat_map(|(t, reqs)| {
                    reqs.iter()
                        .filter_map(move |r| match (&r.put_request, &r.delete_request) {
                            (Some(p), _) => Some(self.target(t, &p.item, true)),
                            (None, Some(d)) => Some(self.target(t, &d.key, false)),
                            (None, None) => None,
                        })
                })
                .collect();
            return Some(Call::new(Op::BatchWriteItem, targets));
        }
        None
    }
}

/// The DynamoDB operations [`CapacityLog`] logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    GetItem,
    PutItem,
    UpdateItem,
    DeleteItem,
    Query,
    Scan,
    BatchGetItem,
    BatchWriteItem,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::GetItem => "GetItem",
            Op::PutItem => "PutItem",
            Op::UpdateItem => "UpdateItem",
            Op::DeleteItem => "DeleteItem",
            Op::Query => "Query",
            Op::Scan => "Scan",
            Op::BatchGetItem => "BatchGetItem",
            Op::BatchWriteItem => "BatchWriteItem",
        }
    }

    pub(crate) fn writes(self) -> bool {
        matches!(
            self,
            Op::PutItem | Op::UpdateItem | Op::DeleteItem | Op::BatchWriteItem
        )
    }
}

/// One key a call touched.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) table: String,
    pub(crate) index: Option<String>,
    pub(crate) partition_key: Option<String>,
    /// (GSI name, GSI partition key value) of a written item.
    pub(crate) gsi_keys: Vec<(String, String)>,
}

/// What a call is about, kept in the operation's config bag from serialization to completion.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    pub(crate) op: Op,
    pub(crate) targets: Vec<Target>,
    /// N of the 1-in-N sample: each line's capacity is multiplied by it.
    sample: f64,
}

impl Storable for Call {
    type Storer = StoreReplace<Self>;
}

impl Call {
    fn new(op: Op, targets: Vec<Target>) -> Self {
        Self {
            op,
            targets,
            sample: 1.0,
        }
    }

    /// One capacity line per target, sharing out what the call consumed per table and index.
    fn log_consumed(&self, consumed: &[ConsumedCapacity]) {
        let write = self.op.writes();
        // Read or write units where DynamoDB splits them, else the plain capacity units.
        let pick =
            |r: Option<f64>, w: Option<f64>, all: Option<f64>| if write { w } else { r }.or(all);
        let units = |c: Option<&Capacity>, total: &ConsumedCapacity| match c {
            Some(c) => pick(
                c.read_capacity_units,
                c.write_capacity_units,
                c.capacity_units,
            ),
            None => pick(
                total.read_capacity_units,
                total.write_capacity_units,
                total.capacity_units,
            ),
        };
        if consumed.is_empty() {
            for t in &self.targets {
                self.line(
                    &t.table,
                    t.index.as_deref(),
                    t.partition_key.as_deref(),
                    None,
                    None,
                );
            }
            return;
        }
        for cc in consumed {
            let table = cc.table_name.as_deref().unwrap_or_default();
            let mine: Vec<&Target> = self.targets.iter().filter(|t| t.table == table).collect();
            let index = mine.first().and_then(|t| t.index.as_deref());
            let gsis = cc.global_secondary_indexes.as_ref();
            // Index reads consume the index's capacity; base-table calls the table's.
            let main = match index {
                Some(ix) => units(gsis.and_then(|g| g.get(ix)), cc),
                None => units(cc.table.as_ref(), cc),
            };
            let share = |v: Option<f64>, n: usize| v.map(|v| v / n.max(1) as f64);
            if mine.is_empty() {
                self.line(table, index, None, share(main, 1), None);
            }
            for t in &mine {
                self.line(
                    table,
                    index,
                    t.partition_key.as_deref(),
                    share(main, mine.len()),
                    None,
                );
            }
            if !write || index.is_some() {
                continue;
            }
            // A write to a table also writes each GSI whose key the item carries.
            for (gsi, cap) in gsis.into_iter().flatten() {
                let value = units(Some(cap), cc);
                let holders: Vec<&str> = mine
                    .iter()
                    .filter_map(|t| t.gsi_keys.iter().find(|(g, _)| g == gsi))
                    .map(|(_, v)| v.as_str())
                    .collect();
                if holders.is_empty() {
                    self.line(table, Some(gsi), None, value, None);
                }
                for pk in &holders {
                    self.line(
                        table,
                        Some(gsi),
                        Some(pk),
                        share(value, holders.len()),
                        None,
                    );
                }
            }
        }
    }

    /// One line per target of a failed call, with the error code and no capacity.
    fn log_failed(&self, code: &str) {
        for t in &self.targets {
            self.line(
                &t.table,
                t.index.as_deref(),
                t.partition_key.as_deref(),
                None,
                Some(code),
            );
        }
    }

    /// One line per target and throttling reason of a throttled attempt (retried or not), with
    /// the reason and its remedy: `spread` (a hot key) or `add-capacity` (never salt for it).
    fn log_throttled(&self, code: &str, classes: &[Class]) {
        for t in &self.targets {
            for class in classes {
                let resource = class.resource();
                tracing::info!(
                    op = self.op.name(),
                    sample_rate = self.sample,
                    { log_field::TABLE } = resource.map_or(t.table.as_str(), |r| r.table.as_str()),
                    { log_field::INDEX } = resource
                        .and_then(|r| r.index.as_deref())
                        .or(t.index.as_deref()),
                    { log_field::PARTITION_KEY } = t.partition_key.as_deref(),
                    error = code,
                    throttle_reason = class.code(),
                    remedy = class.remedy().map_or("unknown", Remedy::name),
                    "dynamodb throttled attempt"
                );
            }
        }
    }

    fn line(
        &self,
        table: &str,
        index: Option<&str>,
        partition_key: Option<&str>,
        units: Option<f64>,
        error: Option<&str>,
    ) {
        use log_field::{CONSUMED_RCU, CONSUMED_WCU, INDEX, PARTITION_KEY, TABLE};
        // One logged call stands for `sample` calls.
        let units = units.map(|u| u * self.sample);
        let (wcu, rcu) = if self.op.writes() {
            (units, None)
        } else {
            (None, units)
        };
        tracing::info!(
            op = self.op.name(),
            sample_rate = self.sample,
            { TABLE } = table,
            { INDEX } = index,
            { PARTITION_KEY } = partition_key,
            { CONSUMED_WCU } = wcu,
            { CONSUMED_RCU } = rcu,
            error,
            "dynamodb capacity"
        );
    }
}

impl Intercept for CapacityLog {
    fn name(&self) -> &'static str {
        "heatsink::metrics::CapacityLog"
    }

    fn modify_before_serialization(
        &self,
        context: &mut BeforeSerializationInterceptorContextMut<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        if let Some(call) = self.call(context) {
            cfg.interceptor_state().store_put(call);
        }
        Ok(())
    }

    fn read_after_attempt(
        &self,
        context: &FinalizerInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let Some(call) = cfg.load::<Call>() else {
            return Ok(());
        };
        if let Some(Err(err)) = context.output_or_error()
            && let Some(throttle) = throttle_of(call.op, err)
        {
            call.log_throttled(&throttle.code, &throttle.classes);
        }
        Ok(())
    }

    fn read_after_execution(
        &self,
        context: &FinalizerInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let Some(call) = cfg.load::<Call>() else {
            return Ok(());
        };
        match context.output_or_error() {
            Some(Ok(_)) => call.log_consumed(&consumed(call.op, context)),
            Some(Err(_)) => call.log_failed(&failure_code(call.op, context)),
            None => {}
        }
        Ok(())
    }
}

/// The consumed capacity in a successful call's output.
fn consumed(op: Op, context: &FinalizerInterceptorContextRef<'_>) -> Vec<ConsumedCapacity> {
    let Some(Ok(out)) = context.output_or_error() else {
        return vec![];
    };
    // Each output type has its own `consumed_capacity` (no shared trait): one arm per type.
    macro_rules! one {
        ($output:ty) => {
            out.downcast_ref::<$output>()
                .and_then(|o| o.consumed_capacity())
                .cloned()
                .into_iter()
                .collect()
        };
    }
    macro_rules! many {
        ($output:ty) => {
            out.downcast_ref::<$output>()
                .map(|o| o.consumed_capacity().to_vec())
                .unwrap_or_default()
        };
    }
    match op {
        Op::GetItem => one!(GetItemOutput),
        Op::PutItem => one!(PutItemOutput),
        Op::UpdateItem => one!(UpdateItemOutput),
        Op::DeleteItem => one!(DeleteItemOutput),
        Op::Query => one!(QueryOutput),
        Op::Scan => one!(ScanOutput),
        Op::BatchGetItem => many!(BatchGetItemOutput),
        Op::BatchWriteItem => many!(BatchWriteItemOutput),
    }
}

/// A throttled attempt: the error code and its classified throttling reasons (none when the
/// endpoint sent none, as emulators and pre-2025 endpoints do).
#[derive(Debug, Clone)]
pub(crate) struct Throttle {
    /// `ThrottlingException`, `ProvisionedThroughputExceededException` or `RequestLimitExceeded`.
    pub(crate) code: String,
    /// Every reason sent, classified.
    pub(crate) classes: Vec<Class>,
}

/// Most throttling reasons read from one answer (outside bytes are bounded before use).
const MAX_REASONS: usize = 16;

/// The throttle an attempt's error carries, if it is one of DynamoDB's three throttling errors.
pub(crate) fn throttle_of(op: Op, err: &OrchestratorError<InterceptorError>) -> Option<Throttle> {
    let e = err.as_operation_error()?;
    // Each operation has its own error enum (no shared trait): one arm per type.
    macro_rules! reasons {
        ($error:ident) => {
            e.downcast_ref::<$error>().and_then(|e| match e {
                $error::ThrottlingException(x) => {
                    Some(("ThrottlingException", x.throttling_reasons()))
                }
                $error::ProvisionedThroughputExceededException(x) => Some((
                    "ProvisionedThroughputExceededException",
                    x.throttling_reasons(),
                )),
                $error::RequestLimitExceeded(x) => {
                    Some(("RequestLimitExceeded", x.throttling_reasons()))
                }
                _ => None,
            })
        };
    }
    let (code, reasons) = match op {
        Op::GetItem => reasons!(GetItemError),
        Op::PutItem => reasons!(PutItemError),
        Op::UpdateItem => reasons!(UpdateItemError),
        Op::DeleteItem => reasons!(DeleteItemError),
        Op::Query => reasons!(QueryError),
        Op::Scan => reasons!(ScanError),
        Op::BatchGetItem => reasons!(BatchGetItemError),
        Op::BatchWriteItem => reasons!(BatchWriteItemError),
    }?;
    let classes = reasons
        .iter()
        .take(MAX_REASONS)
        .map(|r| classify(r.reason().unwrap_or_default(), r.resource()))
        .collect();
    Some(Throttle {
        code: code.to_owned(),
        classes,
    })
}

/// The error code of a failed call (`ThrottlingException`, `ConditionalCheckFailedException`);
/// `transport` when no response came back, `unknown` when one came without a code.
fn failure_code(op: Op, context: &FinalizerInterceptorContextRef<'_>) -> String {
    let Some(Err(err)) = context.output_or_error() else {
        return "unknown".to_owned();
    };
    let Some(e) = err.as_operation_error() else {
        return "transport".to_owned();
    };
    macro_rules! code {
        ($error:ty) => {
            e.downcast_ref::<$error>().and_then(|e| e.code())
        };
    }
    let code = match op {
        Op::GetItem => code!(GetItemError),
        Op::PutItem => code!(PutItemError),
        Op::UpdateItem => code!(UpdateItemError),
        Op::DeleteItem => code!(DeleteItemError),
        Op::Query => code!(QueryError),
        Op::Scan => code!(ScanError),
        Op::BatchGetItem => code!(BatchGetItemError),
        Op::BatchWriteItem => code!(BatchWriteItemError),
    };
    code.unwrap_or("unknown").to_owned()
}

/// The value a key condition (`pk = :pk AND begins_with(sk, :s)`, `#p = :p`) gives `attr`.
fn query_partition_key(
    condition: &str,
    attr: &str,
    names: Option<&HashMap<String, String>>,
    values: &HashMap<String, AttributeValue>,
) -> Option<String> {
    condition
        .split(" AND ")
        .flat_map(|c| c.split(" and "))
        .find_map(|clause| {
            let clause = clause.trim().trim_start_matches('(').trim_end_matches(')');
            let (lhs, rhs) = clause.split_once('=')?;
            let (lhs, rhs) = (lhs.trim(), rhs.trim());
            if lhs.ends_with(['<', '>']) || rhs.starts_with(['<', '>', '=']) {
                return None;
            }
            let name = match lhs.strip_prefix('#') {
                Some(_) => names?.get(lhs)?.as_str(),
                None => lhs,
            };
            (name == attr)
                .then(|| values.get(rhs))
                .flatten()
                .and_then(key_string)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_condition_names_the_partition_key_value() {
        let vals = HashMap::from([
            (":pk".to_owned(), AttributeValue::S("likes#p9".into())),
            (":s".to_owned(), AttributeValue::S("w#".into())),
            (":n".to_owned(), AttributeValue::N("42".into())),
        ]);
        let names = HashMap::from([("#p".to_owned(), "pk".to_owned())]);
        let q = |c: &str, attr: &str| query_partition_key(c, attr, Some(&names), &vals);
        assert_eq!(q("pk = :pk", "pk").as_deref(), Some("likes#p9"));
        assert_eq!(
            q("#p = :pk AND begins_with(sk, :s)", "pk").as_deref(),
            Some("likes#p9")
        );
        assert_eq!(
            q("(shard = :n) and sk >= :s", "shard").as_deref(),
            Some("42")
        );
        assert_eq!(
            q("sk <= :s", "sk"),
            None,
            "a range condition is not a partition key"
        );
        assert_eq!(q("other = :pk", "pk"), None);
    }

    #[test]
    fn one_call_in_n_is_logged_and_user_keys_are_hashed_unless_the_table_is_clear() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| (*v).to_owned())
            }
        };
        let log = CapacityLog::from_lookup(
            &[],
            env(&[
                ("HEATSINK_CAPACITY_LOG_SAMPLE", "4"),
                (
                    "HEATSINK_CAPACITY_LOG_CLEAR_TABLES",
                    "hs-counters, hs-hotkeys",
                ),
            ]),
        );
        let chosen = (0..100).filter(|_| log.chosen()).count();
        assert_eq!(chosen, 25, "1 in 4");
        assert_eq!(log.shown("hs-counters", "likes#p9"), "likes#p9");
        let hashed = log.shown("hs-liked", "alice");
        assert!(hashed.starts_with("h:") && hashed.len() == 18, "{hashed}");
        assert!(!hashed.contains("alice"));
        assert_eq!(
            hashed,
            log.shown("hs-liked", "alice"),
            "one user, one contributor"
        );
        assert_ne!(hashed, log.shown("hs-liked", "bob"));
        // Defaults: 1 in 100, every key hashed; a bad N is the default, never 0.
        let default = CapacityLog::from_lookup(&[], env(&[("HEATSINK_CAPACITY_LOG_SAMPLE", "0")]));
        assert_eq!(default.sample, u64::from(DEFAULT_SAMPLE));
        assert!(default.shown("hs-counters", "likes#p9").starts_with("h:"));
        // The library's own constructor keeps the old behaviour: every call, keys in clear.
        let plain = CapacityLog::new(&[]);
        assert!((0..3).all(|_| plain.chosen()));
        assert_eq!(plain.shown("hs-liked", "alice"), "alice");
    }

    #[test]
    fn a_users_own_table_and_its_gsi_are_known_by_their_key_attributes() {
        use crate::schema::{GsiSpec, KeyAttr};
        let orders = TableSpec::new("shop-orders", KeyAttr::s("customer"))
            .gsi(GsiSpec::new("by-day", KeyAttr::s("day_shard")));
        let log = CapacityLog::new(&[orders]);
        assert_eq!(log.keys.key_attr("shop-orders", None), Some("customer"));
        assert_eq!(
            log.keys.key_attr("shop-orders", Some("by-day")),
            Some("day_shard")
        );
        assert_eq!(log.keys.key_attr("shop-orders", Some("nope")), None);
        assert_eq!(log.keys.key_attr("other", None), None);
    }
}
