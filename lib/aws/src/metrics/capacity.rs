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

use std::collections::HashMap;
use std::sync::Arc;

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
use base64::Engine;

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
    let conf = aws_sdk_dynamodb::config::Builder::from(config)
        .interceptor(CapacityLog::new(tables))
        .build();
    aws_sdk_dynamodb::Client::from_conf(conf)
}

/// The partition key attributes of one table and of its GSIs.
#[derive(Debug, Clone)]
struct TableKeys {
    partition_key: String,
    gsis: Vec<(String, String)>,
}

/// SDK interceptor: requests `ReturnConsumedCapacity=INDEXES` (unless the caller chose a value)
/// and logs one `info` line per key a call touched, with the [`log_field`] fields and `op`.
///
/// Covers GetItem, PutItem, UpdateItem, DeleteItem, Query, Scan, BatchGetItem and BatchWriteItem
/// (what heatsink calls); other operations pass through unlogged. A Scan has no partition key and
/// logs none. A failed call logs its keys with `error` (the error code) and no capacity.
#[derive(Debug, Clone)]
pub struct CapacityLog {
    tables: Arc<HashMap<String, TableKeys>>,
}

impl CapacityLog {
    /// An interceptor that knows the key attributes of `tables` (calls on other tables are
    /// logged without their partition key).
    pub fn new(tables: &[TableSpec]) -> Self {
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

    /// What a call is about, read from its input; `None` for operations not logged.
    fn call(&self, context: &mut BeforeSerializationInterceptorContextMut<'_>) -> Option<Call> {
        const INDEXES: ReturnConsumedCapacity = ReturnConsumedCapacity::Indexes;
        let input = context.input_mut();
        let table = |t: &Option<String>| t.clone().unwrap_or_default();
        // A single-item call: one target, from its key (or, for a put, the whole item).
        macro_rules! single_item {
            ($input:ty, $op:ident, $attrs:ident, $item:literal) => {
                if let Some(i) = input.downcast_mut::<$input>() {
                    i.return_consumed_capacity.get_or_insert(INDEXES);
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
            i.return_consumed_capacity.get_or_insert(INDEXES);
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
            i.return_consumed_capacity.get_or_insert(INDEXES);
            let target = Target {
                table: table(&i.table_name),
                index: i.index_name.clone(),
                partition_key: None,
                gsi_keys: vec![],
            };
            return Some(Call::new(Op::Scan, vec![target]));
        }
        if let Some(i) = input.downcast_mut::<BatchGetItemInput>() {
            i.return_consumed_capacity.get_or_insert(INDEXES);
            let targets = i
                .request_items
                .iter()
                .flatten()
                .flat_map(|(t, ka)| ka.keys.iter().map(|k| self.target(t, k, false)))
                .collect();
            return Some(Call::new(Op::BatchGetItem, targets));
        }
        if let Some(i) = input.downcast_mut::<BatchWriteItemInput>() {
            i.return_consumed_capacity.get_or_insert(INDEXES);
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
enum Op {
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

    fn writes(self) -> bool {
        matches!(
            self,
            Op::PutItem | Op::UpdateItem | Op::DeleteItem | Op::BatchWriteItem
        )
    }
}

/// One key a call touched.
#[derive(Debug, Clone)]
struct Target {
    table: String,
    index: Option<String>,
    partition_key: Option<String>,
    /// (GSI name, GSI partition key value) of a written item.
    gsi_keys: Vec<(String, String)>,
}

/// What a call is about, kept in the operation's config bag from serialization to completion.
#[derive(Debug, Clone)]
struct Call {
    op: Op,
    targets: Vec<Target>,
}

impl Storable for Call {
    type Storer = StoreReplace<Self>;
}

impl Call {
    fn new(op: Op, targets: Vec<Target>) -> Self {
        Self { op, targets }
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

    fn line(
        &self,
        table: &str,
        index: Option<&str>,
        partition_key: Option<&str>,
        units: Option<f64>,
        error: Option<&str>,
    ) {
        use log_field::{CONSUMED_RCU, CONSUMED_WCU, INDEX, PARTITION_KEY, TABLE};
        let (wcu, rcu) = if self.op.writes() {
            (units, None)
        } else {
            (None, units)
        };
        tracing::info!(
            op = self.op.name(),
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

/// A key value as text: S as is, N as its digits, B as base64; other types are not keys.
fn key_string(v: &AttributeValue) -> Option<String> {
    match v {
        AttributeValue::S(s) | AttributeValue::N(s) => Some(s.clone()),
        AttributeValue::B(b) => Some(base64::engine::general_purpose::STANDARD.encode(b.as_ref())),
        _ => None,
    }
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
    fn a_users_own_table_and_its_gsi_are_known_by_their_key_attributes() {
        use crate::schema::{GsiSpec, KeyAttr};
        let orders = TableSpec::new("shop-orders", KeyAttr::s("customer"))
            .gsi(GsiSpec::new("by-day", KeyAttr::s("day_shard")));
        let log = CapacityLog::new(&[orders]);
        assert_eq!(log.key_attr("shop-orders", None), Some("customer"));
        assert_eq!(
            log.key_attr("shop-orders", Some("by-day")),
            Some("day_shard")
        );
        assert_eq!(log.key_attr("shop-orders", Some("nope")), None);
        assert_eq!(log.key_attr("other", None), None);
    }
}
