"""Another KPL implementation (PyPI aws-kinesis-agg) on the other side of heatsink's interop test.

    peer.py deaggregate < [{"partition_key": .., "data_b64": ..}, ..]
        prints [{"partition_key", "explicit_hash_key", "data_b64", "sub_sequence", "aggregated"}, ..]
    peer.py time < {"partition_key": .., "data_b64": .., "seconds": S}
        deaggregates that one record over and over for about S seconds and prints
        {"ns_per_sub_record", "sub_records", "iterations"} (the benchmark's peer; its time
        includes the base64 decoding a Lambda event needs)
    peer.py aggregate < [{"partition_key": .., "explicit_hash_key": .. | null, "data_b64": ..}, ..]
        prints {"partition_key", "explicit_hash_key", "data_b64"}: one aggregate of them all

Run by tests/tests/it/kinesis_kpl.rs with the python of `localstack/stack up`'s kpl-python venv.
"""
import base64
import json
import sys

import aws_kinesis_agg.aggregator as aggregator
import aws_kinesis_agg.deaggregator as deaggregator


def deaggregate(records):
    lambda_records = [{"kinesis": {"kinesisSchemaVersion": "1.0", "sequenceNumber": str(i),
                                   "approximateArrivalTimestamp": 0,
                                   "partitionKey": r["partition_key"], "data": r["data_b64"]}}
                      for i, r in enumerate(records)]
    out = []
    for r in deaggregator.deaggregate_records(lambda_records):
        k = r["kinesis"]
        data = k["data"]
        out.append({"partition_key": k["partitionKey"],
                    "explicit_hash_key": k.get("explicitHashKey"),
                    "data_b64": data.decode() if isinstance(data, bytes) else data,
                    "sub_sequence": k.get("subSequenceNumber"),
                    "aggregated": bool(k.get("aggregated", False)),
                    "sequence": k["sequenceNumber"]})
    return out


def aggregate(records):
    rec = aggregator.AggRecord()
    for r in records:
        if not rec.add_user_record(r["partition_key"], base64.b64decode(r["data_b64"]),
                                   r.get("explicit_hash_key")):
            raise SystemExit("records do not fit one aggregate")
    pk, ehk, data = rec.get_contents()
    return {"partition_key": pk, "explicit_hash_key": ehk or None,
            "data_b64": base64.b64encode(data).decode()}


def time_deaggregate(spec):
    import time
    event = [{"kinesis": {"kinesisSchemaVersion": "1.0", "sequenceNumber": "1",
                          "approximateArrivalTimestamp": 0,
                          "partitionKey": spec["partition_key"], "data": spec["data_b64"]}}]
    n = len(deaggregator.deaggregate_records(event))
    for _ in range(3):  # warm-up
        deaggregator.deaggregate_records(event)
    iterations, start = 0, time.perf_counter()
    while time.perf_counter() - start < spec["seconds"]:
        deaggregator.deaggregate_records(event)
        iterations += 1
    elapsed = time.perf_counter() - start
    return {"ns_per_sub_record": elapsed * 1e9 / (iterations * n), "sub_records": n,
            "iterations": iterations}


if __name__ == "__main__":
    mode = sys.argv[1]
    records = json.load(sys.stdin)
    if mode == "time":
        print(json.dumps(time_deaggregate(records)))
    else:
        print(json.dumps(deaggregate(records) if mode == "deaggregate" else aggregate(records)))
