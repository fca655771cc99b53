"""Another KPL implementation (PyPI aws-kinesis-agg) on the other side of heatsink's interop test.

    peer.py deaggregate < [{"partition_key": .., "data_b64": ..}, ..]
        prints [{"partition_key", "explicit_hash_key", "data_b64", "sub_sequence", "aggregated"}, ..]
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


if __name__ == "__main__":
    mode = sys.argv[1]
    records = json.load(sys.stdin)
    print(json.dumps(deaggregate(records) if mode == "deaggregate" else aggregate(records)))
