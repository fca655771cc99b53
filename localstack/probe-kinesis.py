"""Probe a Kinesis endpoint for the behaviours localstack/README.md compares (kinesis-mock and
kinesalite against AWS): one line per behaviour. Needs boto3 (the moto venv has it):

    .emu/venv/bin/python localstack/probe-kinesis.py http://127.0.0.1:PORT

It creates and deletes streams named probe-*. Its last check sends a ListShards with only a
NextToken, which ends a kinesalite 3.3.3 process: run it on an emulator you can restart.
"""
import json
import sys
import time

import boto3
import botocore
from botocore.config import Config

MIB = 1024 * 1024
url = sys.argv[1]
k = boto3.client(
    "kinesis", endpoint_url=url, region_name="us-east-1", aws_access_key_id="test",
    aws_secret_access_key="test", config=Config(retries={"max_attempts": 1}, read_timeout=120))


def show(name, f):
    try:
        r = f()
        if isinstance(r, dict):
            r.pop("ResponseMetadata", None)
        print(f"{name}: ok {json.dumps(r, default=str)[:160]}")
    except botocore.exceptions.ClientError as e:
        err = e.response["Error"]
        print(f"{name}: {err.get('Code')} {err.get('Message', '')[:100]}")
    except Exception as e:  # a parse failure or a dropped connection is an answer too
        print(f"{name}: {type(e).__name__} {str(e)[:100]}")


def stream(shards):
    name = f"probe-{time.time_ns()}"
    k.create_stream(StreamName=name, ShardCount=shards)
    wait(name)
    return name


def wait(name):
    for _ in range(200):
        if k.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]["StreamStatus"] == "ACTIVE":
            return
        time.sleep(0.05)


def read_all(it, limit=10000):
    calls, last = 0, None
    while it and calls < 50:
        last = k.get_records(ShardIterator=it, Limit=limit)
        calls += 1
        it = last.get("NextShardIterator")
    return calls, last


s = stream(2)
arn = k.describe_stream_summary(StreamName=s)["StreamDescriptionSummary"]["StreamARN"]
shards = k.list_shards(StreamName=s)["Shards"]
print("hash key ranges of 2 shards:", [x["HashKeyRange"]["EndingHashKey"] for x in shards])
k.put_records(StreamName=s, Records=[
    {"Data": b"x" * 100, "PartitionKey": f"k{i}", "ExplicitHashKey": "0"} for i in range(300)])
first = shards[0]["ShardId"]
it = k.get_shard_iterator(StreamName=s, ShardId=first, ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
time.sleep(1.0)
g = k.get_records(ShardIterator=it, Limit=100)
print(f"MillisBehindLatest with 200 records 1 s old still behind: {g.get('MillisBehindLatest')}")
print(f"EncryptionType on a record: {g['Records'][0].get('EncryptionType')}")
throttled = 0
it2 = it
for _ in range(10):
    try:
        it2 = k.get_records(ShardIterator=it2, Limit=1)["NextShardIterator"]
    except botocore.exceptions.ClientError:
        throttled += 1
print(f"10 GetRecords on one shard within a second: {throttled} throttled")
t = time.time()
failed = sum(k.put_records(StreamName=s, Records=[
    {"Data": b"w" * 1024, "PartitionKey": "a", "ExplicitHashKey": "0"} for _ in range(500)])["FailedRecordCount"]
    for _ in range(6))
print(f"3,000 records of 1 KiB to one shard in {time.time() - t:.2f} s: {failed} failed")
show("GetShardIterator by StreamARN", lambda: k.get_shard_iterator(
    StreamARN=arn, ShardId=first, ShardIteratorType="TRIM_HORIZON") and {})
show("DescribeStream by StreamARN", lambda: k.describe_stream(StreamARN=arn) and {})
show("ListShards by StreamARN", lambda: {"n": len(k.list_shards(StreamARN=arn)["Shards"])})
show("ListShards MaxResults=1 of 2", lambda: (lambda r: {"n": len(r["Shards"]), "NextToken": r.get("NextToken")})(
    k.list_shards(StreamName=s, MaxResults=1)))
show("PutRecords of 501 entries", lambda: {"failed": k.put_records(
    StreamName=s, Records=[{"Data": b"z", "PartitionKey": "a"}] * 501)["FailedRecordCount"]})
show("PutRecords of 5 x (1 MiB + 1-byte key)", lambda: {"failed": k.put_records(
    StreamName=s, Records=[{"Data": b"z" * MIB, "PartitionKey": "a"}] * 5)["FailedRecordCount"]})
show("PutRecords of 6 x (1 MiB - 10 B)", lambda: {"failed": k.put_records(
    StreamName=s, Records=[{"Data": b"z" * (MIB - 10), "PartitionKey": "a"}] * 6)["FailedRecordCount"]})
show("PutRecord of 1 MiB data + 256-byte key", lambda: k.put_record(StreamName=s, PartitionKey="p" * 256, Data=b"y" * MIB) and {})
show("PutRecord of 1 MiB + 1 B data", lambda: k.put_record(StreamName=s, PartitionKey="a", Data=b"y" * (MIB + 1)))
show("GetRecords Limit=10001", lambda: k.get_records(ShardIterator=it, Limit=10001))
show("AT_TIMESTAMP a minute ago", lambda: {"records": len(k.get_records(ShardIterator=k.get_shard_iterator(
    StreamName=s, ShardId=first, ShardIteratorType="AT_TIMESTAMP", Timestamp=time.time() - 60)["ShardIterator"],
    Limit=10)["Records"])})
k.delete_stream(StreamName=s)

s = stream(1)
for _ in range(4):
    k.put_records(StreamName=s, Records=[{"Data": b"m" * (MIB - 1), "PartitionKey": "a"}] * 3)
only = k.list_shards(StreamName=s)["Shards"][0]["ShardId"]
g = k.get_records(ShardIterator=k.get_shard_iterator(
    StreamName=s, ShardId=only, ShardIteratorType="TRIM_HORIZON")["ShardIterator"], Limit=10000)
print("one GetRecords on a shard holding 12 records of 1 MiB: {} records, {:.1f} MiB".format(
    len(g["Records"]), sum(len(x["Data"]) + len(x["PartitionKey"]) for x in g["Records"]) / MIB))
k.delete_stream(StreamName=s)

s = stream(2)
shards = k.list_shards(StreamName=s)["Shards"]
k.put_records(StreamName=s, Records=[{"Data": b"p", "PartitionKey": "a", "ExplicitHashKey": "0"}] * 10)
parent = shards[0]
r = parent["HashKeyRange"]
k.split_shard(StreamName=s, ShardToSplit=parent["ShardId"],
              NewStartingHashKey=str((int(r["StartingHashKey"]) + int(r["EndingHashKey"])) // 2))
wait(s)
listed = k.list_shards(StreamName=s)["Shards"]
print("after SplitShard:", [(x["ShardId"][-1], x.get("ParentShardId", "-")[-1:] or "-",
                            "closed" if x["SequenceNumberRange"].get("EndingSequenceNumber") else "open") for x in listed])
for f in ["AT_LATEST", "AFTER_SHARD_ID"]:
    kw = {"Type": f, **({"ShardId": listed[0]["ShardId"]} if f == "AFTER_SHARD_ID" else {})}
    show(f"ListShards ShardFilter {f}", lambda: {"shards": [x["ShardId"][-1] for x in k.list_shards(
        StreamName=s, ShardFilter=kw)["Shards"]]})
calls, last = read_all(k.get_shard_iterator(StreamName=s, ShardId=parent["ShardId"], ShardIteratorType="TRIM_HORIZON")["ShardIterator"])
print(f"closed parent of 10 records read to its end: {calls} calls, the last with {len(last['Records'])} records, "
      f"ChildShards {[c['ShardId'][-1] for c in last.get('ChildShards', [])]}")
print("a put at hash 0 after the split lands in", k.put_record(StreamName=s, PartitionKey="x", ExplicitHashKey="0", Data=b"a")["ShardId"])
arn = k.describe_stream_summary(StreamName=s)["StreamDescriptionSummary"]["StreamARN"]
show("UpdateShardCount", lambda: k.update_shard_count(StreamName=s, TargetShardCount=4, ScalingType="UNIFORM_SCALING"))
show("RegisterStreamConsumer", lambda: k.register_stream_consumer(StreamARN=arn, ConsumerName="c1"))
show("DescribeLimits", lambda: k.describe_limits())
show("CreateStream ON_DEMAND", lambda: k.create_stream(StreamName=s + "od", StreamModeDetails={"StreamMode": "ON_DEMAND"}))
for name in k.list_streams()["StreamNames"]:
    if name.startswith("probe-"):
        k.delete_stream(StreamName=name)
show("ListShards with only a NextToken", lambda: k.list_shards(NextToken="abc"))
time.sleep(0.5)
show("ListStreams afterwards (is it still up?)", lambda: {"streams": len(k.list_streams()["StreamNames"])})
