//! What a DynamoDB request costs and where: parses the JSON wire form of each data-plane
//! operation into the partitions it touches. Pure; the proxy supplies the tables' key schemas.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::model::{
    Access, Charge, PartitionId, item_size, key_bytes, partition_of, read_units, write_units,
};

/// The partition-key attribute of a table and of each of its GSIs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableKeys {
    /// The table's partition-key attribute.
    pub pk: String,
    /// GSI name → the index's partition-key attribute.
    pub indexes: HashMap<String, String>,
    /// Provisioned capacity mode (DynamoDB then throttles with
    /// `ProvisionedThroughputExceededException`; on-demand tables get `ThrottlingException`).
    pub provisioned: bool,
}

impl TableKeys {
    /// Reads the key schema out of a DescribeTable response body.
    pub fn from_describe(body: &Value) -> Option<Self> {
        let table = body.get("Table")?;
        let hash = |schema: &Value| -> Option<String> {
            schema
                .as_array()?
                .iter()
                .find(|k| k.get("KeyType").and_then(Value::as_str) == Some("HASH"))?
                .get("AttributeName")?
                .as_str()
                .map(str::to_owned)
        };
        let pk = hash(table.get("KeySchema")?)?;
        let indexes = table
            .get("GlobalSecondaryIndexes")
            .and_then(Value::as_array)
            .map(|gsis| {
                gsis.iter()
                    .filter_map(|g| {
                        let name = g.get("IndexName")?.as_str()?.to_owned();
                        Some((name, hash(g.get("KeySchema")?)?))
                    })
                    .collect()
            })
            .unwrap_or_default();
        // `BillingModeSummary` is absent from a table that was never on-demand; an on-demand
        // table reports zero provisioned units where it reports any.
        let provisioned = match table
            .pointer("/BillingModeSummary/BillingMode")
            .and_then(Value::as_str)
        {
            Some(mode) => mode == "PROVISIONED",
            None => table
                .pointer("/ProvisionedThroughput/WriteCapacityUnits")
                .and_then(Value::as_u64)
                .is_some_and(|u| u > 0),
        };
        Some(Self {
            pk,
            indexes,
            provisioned,
        })
    }
}

/// A read whose cost depends on the size of the answer.
#[derive(Debug, Clone, PartialEq)]
pub struct SizedRead {
    /// Where the read landed.
    pub partition: PartitionId,
    /// Strongly consistent (full price) or eventual (half).
    pub consistent: bool,
    /// Units already charged before the request was forwarded.
    pub prepaid: f64,
    /// Transactional reads cost double.
    pub multiplier: f64,
}

/// How the simulator treats one request.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// Not a partition-bound data-plane call (control plane, Scan, streams): forward untouched.
    PassThrough,
    /// Charge these units up front (throttle if any partition lacks them); settle the read's
    /// actual size from the response afterwards.
    Charge {
        /// Up-front charges.
        pre: Vec<Charge>,
        /// A read to settle from the response size.
        read: Option<SizedRead>,
    },
}

/// The table names a request body refers to (so the proxy can learn their key schemas first).
pub fn tables_of(op: &str, body: &Value) -> Vec<String> {
    let mut out = vec![];
    match op {
        "BatchGetItem" | "BatchWriteItem" => {
            if let Some(m) = body.get("RequestItems").and_then(Value::as_object) {
                out.extend(m.keys().cloned());
            }
        }
        "TransactWriteItems" | "TransactGetItems" => {
            for item in body
                .get("TransactItems")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(obj) = item.as_object() {
                    for inner in obj.values() {
                        if let Some(t) = inner.get("TableName").and_then(Value::as_str) {
                            out.push(t.to_owned());
                        }
                    }
                }
            }
        }
        _ => {
            if let Some(t) = body.get("TableName").and_then(Value::as_str) {
                out.push(t.to_owned());
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Plans one request. `keys` must hold every table [`tables_of`] named; a table it lacks is
/// passed through rather than guessed at.
pub fn plan(op: &str, body: &Value, keys: &HashMap<String, TableKeys>, partitions: u32) -> Plan {
    let ctx = Ctx { keys, partitions };
    let planned = match op {
        "PutItem" => ctx.put(body, 1.0),
        "UpdateItem" => ctx.update(body, 1.0),
        "DeleteItem" => ctx.delete(body, 1.0),
        "GetItem" => ctx.get(body, 1.0),
        "Query" => ctx.query(body),
        "BatchWriteItem" => ctx.batch_write(body),
        "BatchGetItem" => ctx.batch_get(body),
        "TransactWriteItems" => ctx.transact_write(body),
        "TransactGetItems" => ctx.transact_get(body),
        _ => None,
    };
    planned.unwrap_or(Plan::PassThrough)
}

struct Ctx<'a> {
    keys: &'a HashMap<String, TableKeys>,
    partitions: u32,
}

fn obj(v: &Value) -> Option<&Map<String, Value>> {
    v.as_object()
}

impl Ctx<'_> {
    fn partition(&self, table: &str, index: Option<&str>, value: &Value) -> Option<PartitionId> {
        let bytes = key_bytes(value)?;
        Some(PartitionId {
            table: table.to_owned(),
            index: index.map(str::to_owned),
            partition: partition_of(&bytes, self.partitions),
        })
    }

    fn table_partition(
        &self,
        table: &str,
        key_or_item: &Map<String, Value>,
    ) -> Option<PartitionId> {
        let keys = self.keys.get(table)?;
        self.partition(table, None, key_or_item.get(&keys.pk)?)
    }

    fn write(
        &self,
        table: &str,
        item: &Map<String, Value>,
        bytes: usize,
        mult: f64,
    ) -> Option<Vec<Charge>> {
        let units = write_units(bytes) * mult;
        let mut charges = vec![Charge {
            partition: self.table_partition(table, item)?,
            access: Access::Write,
            units,
        }];
        // A write whose item carries a GSI's key also writes that index's partition: this is how
        // a hot index key (creator_id) throttles the base table.
        if let Some(keys) = self.keys.get(table) {
            let mut indexes: Vec<_> = keys.indexes.iter().collect();
            indexes.sort();
            for (index, attr) in indexes {
                if let Some(v) = item.get(attr)
                    && let Some(p) = self.partition(table, Some(index), v)
                {
                    charges.push(Charge {
                        partition: p,
                        access: Access::Write,
                        units,
                    });
                }
            }
        }
        Some(charges)
    }

    fn put_charges(&self, body: &Value, mult: f64) -> Option<Vec<Charge>> {
        let table = body.get("TableName")?.as_str()?;
        let item = obj(body.get("Item")?)?;
        self.write(table, item, item_size(item), mult)
    }

    fn put(&self, body: &Value, mult: f64) -> Option<Plan> {
        Some(Plan::Charge {
            pre: self.put_charges(body, mult)?,
            read: None,
        })
    }

    /// An update's size is the key plus the values it sets: exact for small counters, a lower
    /// bound for updates of large items (the simulator never reads the stored item).
    fn update_charges(&self, body: &Value, mult: f64) -> Option<Vec<Charge>> {
        let table = body.get("TableName")?.as_str()?;
        let key = obj(body.get("Key")?)?;
        let values = body
            .get("ExpressionAttributeValues")
            .and_then(obj)
            .map(item_size)
            .unwrap_or(0);
        self.write(table, key, item_size(key) + values, mult)
    }

    fn update(&self, body: &Value, mult: f64) -> Option<Plan> {
        Some(Plan::Charge {
            pre: self.update_charges(body, mult)?,
            read: None,
        })
    }

    fn delete_charges(&self, body: &Value, mult: f64) -> Option<Vec<Charge>> {
        let table = body.get("TableName")?.as_str()?;
        let key = obj(body.get("Key")?)?;
        self.write(table, key, item_size(key), mult)
    }

    fn delete(&self, body: &Value, mult: f64) -> Option<Plan> {
        Some(Plan::Charge {
            pre: self.delete_charges(body, mult)?,
            read: None,
        })
    }

    fn get(&self, body: &Value, mult: f64) -> Option<Plan> {
        let table = body.get("TableName")?.as_str()?;
        let key = obj(body.get("Key")?)?;
        let consistent = body
            .get("ConsistentRead")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let partition = self.table_partition(table, key)?;
        let prepaid = read_units(0, consistent) * mult;
        Some(Plan::Charge {
            pre: vec![Charge {
                partition: partition.clone(),
                access: Access::Read,
                units: prepaid,
            }],
            read: Some(SizedRead {
                partition,
                consistent,
                prepaid,
                multiplier: mult,
            }),
        })
    }

    fn query(&self, body: &Value) -> Option<Plan> {
        let table = body.get("TableName")?.as_str()?;
        let keys = self.keys.get(table)?;
        let index = body.get("IndexName").and_then(Value::as_str);
        let pk_attr = match index {
            Some(i) => keys.indexes.get(i)?,
            None => &keys.pk,
        };
        let value = key_condition_value(body, pk_attr)?;
        let partition = self.partition(table, index, &value)?;
        // GSI reads are always eventually consistent.
        let consistent = index.is_none()
            && body
                .get("ConsistentRead")
                .and_then(Value::as_bool)
                .unwrap_or(false);
        let prepaid = read_units(0, consistent);
        Some(Plan::Charge {
            pre: vec![Charge {
                partition: partition.clone(),
                access: Access::Read,
                units: prepaid,
            }],
            read: Some(SizedRead {
                partition,
                consistent,
                prepaid,
                multiplier: 1.0,
            }),
        })
    }

    fn batch_write(&self, body: &Value) -> Option<Plan> {
        let mut pre = vec![];
        for (table, requests) in body.get("RequestItems")?.as_object()? {
            for r in requests.as_array()? {
                if let Some(item) = r.pointer("/PutRequest/Item").and_then(obj) {
                    pre.extend(self.write(table, item, item_size(item), 1.0)?);
                } else if let Some(key) = r.pointer("/DeleteRequest/Key").and_then(obj) {
                    pre.extend(self.write(table, key, item_size(key), 1.0)?);
                }
            }
        }
        Some(Plan::Charge { pre, read: None })
    }

    fn batch_get(&self, body: &Value) -> Option<Plan> {
        let mut pre = vec![];
        for (table, req) in body.get("RequestItems")?.as_object()? {
            let consistent = req
                .get("ConsistentRead")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            for key in req.get("Keys")?.as_array()? {
                pre.push(Charge {
                    partition: self.table_partition(table, obj(key)?)?,
                    access: Access::Read,
                    units: read_units(0, consistent),
                });
            }
        }
        Some(Plan::Charge { pre, read: None })
    }

    fn transact_write(&self, body: &Value) -> Option<Plan> {
        let mut pre = vec![];
        for item in body.get("TransactItems")?.as_array()? {
            let (kind, inner) = item.as_object()?.iter().next()?;
            let charges = match kind.as_str() {
                "Put" => self.put_charges(inner, 2.0)?,
                "Update" => self.update_charges(inner, 2.0)?,
                "Delete" | "ConditionCheck" => self.delete_charges(inner, 2.0)?,
                _ => return None,
            };
            pre.extend(charges);
        }
        Some(Plan::Charge { pre, read: None })
    }

    fn transact_get(&self, body: &Value) -> Option<Plan> {
        let mut pre = vec![];
        for item in body.get("TransactItems")?.as_array()? {
            let get = item.get("Get")?;
            let table = get.get("TableName")?.as_str()?;
            pre.push(Charge {
                partition: self.table_partition(table, obj(get.get("Key")?)?)?,
                access: Access::Read,
                units: 2.0,
            });
        }
        Some(Plan::Charge { pre, read: None })
    }
}

/// The partition-key value a Query targets, from `KeyConditionExpression` (`#p = :v`, either
/// side, names resolved through `ExpressionAttributeNames`) or the legacy `KeyConditions`.
pub fn key_condition_value(body: &Value, pk_attr: &str) -> Option<Value> {
    if let Some(expr) = body.get("KeyConditionExpression").and_then(Value::as_str) {
        let names = body
            .get("ExpressionAttributeNames")
            .and_then(Value::as_object);
        let values = body.get("ExpressionAttributeValues")?.as_object()?;
        let resolve = |token: &str| -> String {
            let token = token.trim().trim_matches(|c| c == '(' || c == ')').trim();
            match names.and_then(|n| n.get(token)).and_then(Value::as_str) {
                Some(name) => name.to_owned(),
                None => token.to_owned(),
            }
        };
        for clause in split_and(expr) {
            let Some((left, right)) = clause.split_once('=') else {
                continue;
            };
            if left.ends_with(['<', '>', '!']) || right.starts_with('=') {
                continue;
            }
            let (l, r) = (left.trim(), right.trim().trim_end_matches(')').trim());
            let (name, placeholder) = if r.starts_with(':') { (l, r) } else { (r, l) };
            if resolve(name) == pk_attr {
                return values
                    .get(placeholder.trim_start_matches('(').trim())
                    .cloned();
            }
        }
        return None;
    }
    let cond = body.get("KeyConditions")?.get(pk_attr)?;
    cond.get("AttributeValueList")?.as_array()?.first().cloned()
}

fn split_and(expr: &str) -> Vec<&str> {
    let lower = expr.to_ascii_lowercase();
    let mut out = vec![];
    let mut start = 0;
    let mut search = 0;
    while let Some(pos) = lower[search..].find(" and ") {
        let at = search + pos;
        out.push(&expr[start..at]);
        start = at + 5;
        search = start;
    }
    out.push(&expr[start..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn keys() -> HashMap<String, TableKeys> {
        HashMap::from([(
            "posts".to_owned(),
            TableKeys {
                pk: "post".into(),
                indexes: HashMap::from([("by-creator".to_owned(), "creator_shard".to_owned())]),
                provisioned: false,
            },
        )])
    }

    #[test]
    fn a_query_targets_the_partition_named_in_its_key_condition() {
        let body = json!({
            "TableName": "posts", "IndexName": "by-creator",
            "KeyConditionExpression": "#p = :p AND created_at > :t",
            "ExpressionAttributeNames": {"#p": "creator_shard"},
            "ExpressionAttributeValues": {":p": {"S": "nova#3"}, ":t": {"S": "2026"}}
        });
        assert_eq!(
            key_condition_value(&body, "creator_shard"),
            Some(json!({"S": "nova#3"}))
        );
        let Plan::Charge { pre, read } = plan("Query", &body, &keys(), 8) else {
            panic!("a query is charged")
        };
        assert_eq!(pre[0].partition.index.as_deref(), Some("by-creator"));
        assert_eq!(pre[0].partition.partition, partition_of(b"nova#3", 8));
        assert!(read.is_some_and(|r| !r.consistent));
    }

    #[test]
    fn reversed_and_unnamed_conditions_are_understood() {
        let body = json!({
            "KeyConditionExpression": ":v = post AND begins_with(sk, :s)",
            "ExpressionAttributeValues": {":v": {"S": "p9"}, ":s": {"S": "w#"}}
        });
        assert_eq!(key_condition_value(&body, "post"), Some(json!({"S": "p9"})));
        let legacy = json!({"KeyConditions": {"post": {"AttributeValueList": [{"S": "p1"}], "ComparisonOperator": "EQ"}}});
        assert_eq!(
            key_condition_value(&legacy, "post"),
            Some(json!({"S": "p1"}))
        );
    }

    #[test]
    fn a_put_with_an_index_key_also_writes_the_index_partition() {
        let body = json!({"TableName": "posts", "Item": {"post": {"S": "p1"}, "creator_shard": {"S": "nova#0"}}});
        let Plan::Charge { pre, .. } = plan("PutItem", &body, &keys(), 4) else {
            panic!("a put is charged")
        };
        assert_eq!(pre.len(), 2);
        assert_eq!(pre[1].partition.index.as_deref(), Some("by-creator"));
    }

    #[test]
    fn transactions_cost_double() {
        let body = json!({"TransactItems": [{"Put": {"TableName": "posts", "Item": {"post": {"S": "p1"}}}}]});
        let Plan::Charge { pre, .. } = plan("TransactWriteItems", &body, &keys(), 4) else {
            panic!("a transaction is charged")
        };
        assert_eq!(pre[0].units, 2.0);
        assert_eq!(tables_of("TransactWriteItems", &body), ["posts"]);
    }

    #[test]
    fn unknown_tables_and_control_plane_calls_pass_through() {
        let body = json!({"TableName": "other", "Item": {"id": {"S": "x"}}});
        assert_eq!(plan("PutItem", &body, &keys(), 4), Plan::PassThrough);
        assert_eq!(
            plan("CreateTable", &json!({}), &keys(), 4),
            Plan::PassThrough
        );
    }

    #[test]
    fn key_schema_is_read_from_describe_table() {
        let body = json!({"Table": {
            "KeySchema": [{"AttributeName": "post", "KeyType": "HASH"}],
            "GlobalSecondaryIndexes": [{"IndexName": "by-creator",
                "KeySchema": [{"AttributeName": "creator_shard", "KeyType": "HASH"}, {"AttributeName": "created_at", "KeyType": "RANGE"}]}]
        }});
        assert_eq!(TableKeys::from_describe(&body), keys().remove("posts"));
    }

    #[test]
    fn the_capacity_mode_is_read_from_describe_table() {
        let mode = |table: Value| {
            let mut t = json!({"KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}]});
            t.as_object_mut()
                .unwrap()
                .extend(table.as_object().unwrap().clone());
            TableKeys::from_describe(&json!({ "Table": t }))
                .unwrap()
                .provisioned
        };
        assert!(!mode(
            json!({"BillingModeSummary": {"BillingMode": "PAY_PER_REQUEST"},
            "ProvisionedThroughput": {"ReadCapacityUnits": 0, "WriteCapacityUnits": 0}})
        ));
        assert!(mode(
            json!({"BillingModeSummary": {"BillingMode": "PROVISIONED"}})
        ));
        assert!(mode(
            json!({"ProvisionedThroughput": {"ReadCapacityUnits": 5, "WriteCapacityUnits": 5}})
        ));
        assert!(!mode(json!({})), "no mode and no units: on-demand");
    }
}
