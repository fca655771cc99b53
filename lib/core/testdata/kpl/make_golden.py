"""Golden KPL aggregates made by another implementation (the PyPI package aws-kinesis-agg).

Regenerate golden.json with:
    python3 -m venv /tmp/kplvenv && /tmp/kplvenv/bin/pip install aws-kinesis-agg==1.2.3
    /tmp/kplvenv/bin/python lib/core/testdata/kpl/make_golden.py > lib/core/testdata/kpl/golden.json
heatsink_core::kpl's tests decode each aggregate and compare with the user records listed, and
re-encode the records and compare bytes.
"""
import base64
import json

import aws_kinesis_agg.aggregator as agg

CASES = {
    "one_key_three_records": [("p1", None, b"012345678901234567_A"),
                              ("p1", None, b"012345678901234567_B"),
                              ("p1", None, b"012345678901234567_C")],
    "distinct_keys_with_explicit_hash_keys": [
        ("likes#p9", None, b'{"post":"p9","n":1}'),
        ("p9#0", "0", b"salt zero"),
        ("p9#1", "170141183460469231731687303715884105728", b"salt one"),
        ("p9#2", "340282366920938463463374607431768211455", b""),
        ("p9#1", "170141183460469231731687303715884105728", bytes(range(256))),
        ("likes#p9", None, b"again"),
        ("\u00e9t\u00e9-\u2603", None, "unicode key".encode()),
    ],
    "single_record": [("solo", None, b"just one")],
}

out = []
for name, records in CASES.items():
    rec = agg.AggRecord()
    for pk, ehk, data in records:
        assert rec.add_user_record(pk, data, ehk)
    pk, ehk, data = rec.get_contents()
    out.append({
        "name": name,
        "partition_key": pk,
        "explicit_hash_key": ehk,
        "data_b64": base64.b64encode(data).decode(),
        "records": [{"partition_key": p, "explicit_hash_key": e,
                     "data_b64": base64.b64encode(d).decode()} for p, e, d in records],
    })
print(json.dumps(out, indent=1, ensure_ascii=False))
