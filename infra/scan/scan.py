#!/usr/bin/env python3
"""checkov over the Terraform root module, the synthesized CDK template and the examples, each
finding compared with the reviewed baseline (checkov-baseline.json: every acknowledged check with
its reason and the resources it fails on). A finding the baseline does not list fails, and so does
a listed one that no longer fails (the baseline stays the truth). Prints passed/failed per target.

    scan.py CHECKOV TERRAFORM_DIR CDK_OUT [FINDINGS_JSON]
"""

import json
from concurrent.futures import ThreadPoolExecutor
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BASELINE = HERE / "checkov-baseline.json"


def targets(terraform, cdk_out):
    return {
        "terraform": ["-d", str(terraform), "--framework", "terraform", "--skip-path", "examples", "--skip-path", "tests"],
        "terraform-example-orders": ["-d", str(terraform / "examples" / "orders"), "--framework", "terraform"],
        "cdk": ["-f", str(cdk_out / "Heatsink.template.json"), "--framework", "cloudformation"],
        "cdk-example-orders": ["-f", str(cdk_out / "examples-orders" / "Orders.template.json"), "--framework", "cloudformation"],
        "terraform-example-places": ["-d", str(terraform / "examples" / "places"), "--framework", "terraform"],
        "cdk-example-places": ["-f", str(cdk_out / "examples-places" / "Places.template.json"), "--framework", "cloudformation"],
    }


def run(checkov, args):
    """(passed, {(check, resource)}) of one checkov run (offline: no guideline download)."""
    out = subprocess.run([checkov, *args, "--skip-download", "--quiet", "--compact", "-o", "json"], capture_output=True, text=True)
    if out.returncode not in (0, 1):
        sys.exit(f"checkov {' '.join(args)} failed ({out.returncode}): {out.stderr[-2000:]}")
    reports = json.loads(out.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    passed, failed = 0, set()
    for r in reports:
        passed += r["summary"]["passed"]
        failed |= {(c["check_id"], c["resource"]) for c in r["results"]["failed_checks"]}
    return passed, failed


def main():
    checkov, terraform, cdk_out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    baseline = json.loads(BASELINE.read_text())["checks"]
    for check, entry in baseline.items():
        assert len(entry.get("reason", "")) > 40, f"{check}: the baseline needs a reason"
    problems, found = [], {}
    jobs = targets(terraform, cdk_out)
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = dict(zip(jobs, pool.map(lambda args: run(checkov, args), jobs.values())))
    for name in jobs:
        passed, failed = results[name]
        for c, r in failed:
            found.setdefault(c, {}).setdefault(name, []).append(r)
        known = {(check, r) for check, entry in baseline.items() for r in entry["findings"].get(name, [])}
        new, gone = sorted(failed - known), sorted(known - failed)
        print(f"checkov {name}: {passed} passed, {len(failed)} failed, {len(failed & known)} acknowledged in scan/checkov-baseline.json")
        problems += [f"{name}: new finding {c} on {r} (fix it, or acknowledge it with a reason in infra/scan/checkov-baseline.json)" for c, r in new]
        problems += [f"{name}: {c} on {r} no longer fails: remove it from infra/scan/checkov-baseline.json" for c, r in gone]
    if problems:
        print("\n".join(problems))
        if len(sys.argv) > 4:  # a path: write today's findings there, to review into the baseline
            Path(sys.argv[4]).write_text(json.dumps({c: {t: sorted(r) for t, r in v.items()} for c, v in sorted(found.items())}, indent=2))
        sys.exit(1)


if __name__ == "__main__":
    main()
