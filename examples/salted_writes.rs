//! salted_writes: spread a hot key's writes over S sub-keys chosen by the hot-key directory,
//! then read the key back with one merged fan-out, in sort-key order, page by page.
//!
//! An operator (or the controller) marks `likes#p9` hot in the `hotkeys` table; writers ask a
//! [`CachedDirectory`] snapshot, which *is* their [`SaltPolicy`], where each like goes
//! (`likes#p9#0..3`); the unmitigated `likes#p1` stays one plain key. Readers page through
//! every sub-key with [`MergedQuery`] and fetch single likes with [`batch_get`]. Exits non-zero
//! if what it reads back is not exactly what it wrote (`make test` runs it as a test).
//!
//! Run against the local stack (creates `ex<random>-hotkeys` and `ex<random>-likes`, deletes
//! them at the end):
//!
//! ```sh
//! localstack/stack up && eval "$(localstack/stack env --lane moto)"
//! cargo run -p heatsink-examples --example salted_writes
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use heatsink::clock::now_secs;
use heatsink::hot::{CachedDirectory, Directory};
use heatsink::hot::{Change, Entry};
use heatsink::keys::{SaltChoice, SaltPolicy, SaltedKey};
use heatsink::scatter::{Backoff, Item, MergedQuery, batch_get};
use heatsink::schema::{KeyAttr, Schema, Table, TableSpec, ensure_tables};
use heatsink_examples::{BoxError, Scratch};

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let mut scratch = Scratch::new().await?;
    let result = run(&mut scratch).await;
    scratch.cleanup().await;
    result
}

async fn run(scratch: &mut Scratch) -> Result<(), BoxError> {
    let ddb = aws_sdk_dynamodb::Client::new(&scratch.config);
    let hotkeys = Schema::new(&scratch.prefix).table(Table::Hotkeys);
    scratch.table("hotkeys");
    let likes = TableSpec::new(scratch.table("likes"), KeyAttr::s("pk")).sort_key(KeyAttr::s("sk"));
    ensure_tables(&ddb, &[hotkeys.clone(), likes.clone()]).await?;

    // Mark p9 hot: salt its likes over 4 sub-keys (`heatsink hot set likes#p9 --mode salt --salts 4`).
    let directory = Directory::new(ddb.clone(), &hotkeys.name);
    let entry = Entry::salt("likes#p9", 4, "launch day", now_secs())?;
    directory
        .apply(&Change::Put {
            entry,
            expected_epoch: None,
        })
        .await?;

    // Writers: each like goes to the sub-key the snapshot's policy names for its user.
    let cached = CachedDirectory::new(directory, Duration::from_millis(500));
    let policy = cached.snapshot().await?;
    let mut written: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut per_sub_key: BTreeMap<String, usize> = BTreeMap::new();
    for (post, users) in [("likes#p9", 40), ("likes#p1", 5)] {
        let key = SaltedKey::new(post, policy.salts(post))?;
        for u in 0..users {
            let user = format!("u{u:02}");
            let pk = key.write_key(SaltChoice::PerWriter(&user));
            *per_sub_key.entry(pk.clone()).or_default() += 1;
            ddb.put_item()
                .table_name(&likes.name)
                .item("pk", AttributeValue::S(pk))
                .item("sk", AttributeValue::S(user.clone()))
                .send()
                .await?;
            written.entry(post.to_owned()).or_default().push(user);
        }
    }

    println!("likes written per partition key: {per_sub_key:?}");

    // Readers: the read set covers every sub-key that may hold data (drains included).
    for (post, users) in &written {
        let read_set = policy.read_set(post)?;
        let query = MergedQuery::table(&likes.name, "pk", "sk", read_set.clone());
        let (mut read, mut token, mut pages) = (Vec::new(), None, 0);
        loop {
            let page = query.page(&ddb, 7, token.as_deref()).await?;
            read.extend(page.items.iter().filter_map(|i| text(i, "sk")));
            pages += 1;
            match page.next {
                Some(next) => token = Some(next),
                None => break,
            }
        }
        println!(
            "{post}: {} sub-keys {read_set:?}, {} likes in {pages} pages",
            read_set.len(),
            read.len()
        );
        if &read != users {
            return Err(format!("{post}: merged read {read:?}, wrote {users:?}").into());
        }
    }

    // Point reads: a per-writer salt tells a reader which sub-key holds u07's like of p9.
    let p9 = SaltedKey::new("likes#p9", policy.salts("likes#p9"))?;
    let keys: Vec<Item> = ["u07", "u31", "u99"]
        .iter()
        .map(|u| {
            let pk = AttributeValue::S(p9.write_key(SaltChoice::PerWriter(u)));
            Item::from([
                ("pk".into(), pk),
                ("sk".into(), AttributeValue::S((*u).into())),
            ])
        })
        .collect();
    let mut found: Vec<String> = batch_get(&ddb, &likes.name, keys, Backoff::default())
        .await?
        .iter()
        .filter_map(|i| text(i, "sk"))
        .collect();
    found.sort();
    println!("batch_get likes#p9 for u07, u31, u99: found {found:?}");
    if found != ["u07", "u31"] {
        return Err(format!("batch_get found {found:?}, expected u07 and u31").into());
    }
    println!("ok: salted writes read back exactly");
    Ok(())
}

/// A string attribute of an item.
fn text(item: &Item, attr: &str) -> Option<String> {
    item.get(attr)?.as_s().ok().cloned()
}
