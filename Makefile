# heatsink: the two commands a newcomer needs are `make demo` and `make test`.
SHELL := /bin/bash
STACK := localstack/stack
STACK_TEST := localstack/test-stack
CARGO ?= cargo
# Demo arguments. The default runs the celebrity post (docs/hot-keys.md) at 1/10 scale (p9 at
# 240 likes/s against 100 WCU/s partitions, the deployed 3 s batching window as 30 s: the same
# ratios at a speed a local emulator sustains in a debug build) for 80 s per strategy, long enough
# for one steady-state window after the first 1.5 (`steady per 1k`); BENCHMARKS.md has longer runs.
# e.g. `make demo DEMO_ARGS="--scale 1 --rate 10000 --duration 40"` for full scale.
DEMO_ARGS ?= --scale 0.1 --duration 80 --chaos lost-ack=0.05,dup-batch=0.05,crash=0.05,seed=1

# cargo-hack (crates.io), installed into .emu/cargo on first use: every feature of the library
# crates is checked alone, as a user who enables one would build it.
HACK_VERSION := 0.6.46
HACK := .emu/cargo/bin/cargo-hack

# The LocalStack lane serves Kinesis and CloudWatch from LocalStack and sends DynamoDB, DynamoDB
# Streams, EventBridge and SQS to moto: these `it` modules call only the latter, so on that lane
# they would repeat the moto lane's run call for call (about 150 s); they are skipped there.
LOCALSTACK_SKIP := --skip compaction:: --skip directory:: --skip likes:: --skip publish:: \
	--skip scatter:: --skip sim:: --skip smoke_dynamodb:: --skip slots::

.PHONY: demo test lint features docs package lambdas stack-up stack-down stack-test

## Bring the local stack up (if needed), create the resources, run the main scenario. The stack
## keeps running afterwards; `localstack/stack down` stops it.
demo:
	@$(STACK) up
	@set -euo pipefail; eval "$$($(STACK) env)"; \
	$(CARGO) build -q --locked -p heatsink-cli -p heatsink-demo; \
	target/debug/heatsink local bootstrap --photo-app; \
	target/debug/heatsink-demo $(DEMO_ARGS)
	@echo "The local stack is still running: stop it with 'localstack/stack down'."

## Shell lint, the markdown's links, the stack script's smoke test (up/env/status/down, leaves the stack down), stack
## up, format and lint checks, every test on the moto lane and, beside it (the lanes are separate emulators; cargo
## holds its lock only while it builds), the integration tests (`--workspace
## --test it`: the workspace's feature set, so nothing is compiled twice) on the dynoxide lane, those that reach
## LocalStack's own services on the LocalStack lane (LOCALSTACK_SKIP), the salted_writes example on moto, the
## throttle and closed-loop tests (`sim::`, `control::`) once more with the SDK's 2026 retry defaults switched on,
## stack down (also when a step fails).
test:
	@set -euo pipefail; \
	$(STACK) lint; \
	python3 docs/check-links.py; \
	echo "== localstack/stack smoke test"; \
	$(STACK_TEST); \
	trap '$(STACK) down' EXIT; \
	$(STACK) up; \
	$(CARGO) fmt --all --check; \
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings; \
	$(MAKE) --no-print-directory features docs package; \
	echo "== build every test"; \
	$(CARGO) test --workspace --locked --no-run; \
	echo "== integration tests, dynoxide lane, in the background (its log follows the moto lane's)"; \
	( eval "$$($(STACK) env --lane dynoxide)"; HEATSINK_REQUIRE_STACK=1 $(CARGO) test --workspace --locked --test it ) \
	  >.emu/logs/it-dynoxide.log 2>&1 & dynoxide=$$!; \
	echo "== all tests, moto lane"; \
	( eval "$$($(STACK) env --lane moto)"; HEATSINK_REQUIRE_STACK=1 $(CARGO) test --workspace --locked; \
	  echo "== example salted_writes, moto lane"; \
	  $(CARGO) build -q --workspace --bins --examples --locked; target/debug/examples/salted_writes; \
	  echo "== throttle and closed-loop tests again with the SDK's 2026 retry defaults on (AWS_NEW_RETRIES_2026=true), moto lane"; \
	  AWS_NEW_RETRIES_2026=true HEATSINK_REQUIRE_STACK=1 $(CARGO) test --workspace --locked --test it -- sim:: control:: ); \
	echo "== integration tests, dynoxide lane (ran beside the moto lane)"; \
	rc=0; wait "$$dynoxide" || rc=$$?; cat .emu/logs/it-dynoxide.log; [ "$$rc" = 0 ] || exit "$$rc"; \
	echo "== infra: CDK synth tests, cdk-nag, schema agreement, Terraform check"; \
	$(MAKE) -C infra test HEATSINK_BIN=$(CURDIR)/target/debug/heatsink; \
	rc=0; $(STACK) up --localstack || rc=$$?; \
	if [ "$$rc" = 3 ]; then echo "skip: LocalStack lane (Python 3.13 missing, see above)"; \
	elif [ "$$rc" != 0 ]; then exit "$$rc"; \
	else echo "== integration tests that reach LocalStack's own services (Kinesis, CloudWatch), localstack lane"; \
	( eval "$$($(STACK) env --lane localstack)"; HEATSINK_REQUIRE_STACK=1 $(CARGO) test --workspace --locked --test it -- $(LOCALSTACK_SKIP) ); fi

## Release zips of every function for arm64 (target/lambda/<fn>/bootstrap.zip) and x86_64
## (target/lambda-x86_64/<fn>/bootstrap.zip); 5-7 min per architecture cold.
lambdas:
	$(MAKE) -C infra lambdas

## Formatting and lints only (no stack needed): shellcheck of the shell scripts (installs
## itself into .emu/venv-tools unless one is on PATH), every relative link of the markdown,
## rustfmt, clippy, each library feature alone, the docs.
lint:
	$(STACK) lint
	python3 docs/check-links.py
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings
	$(MAKE) --no-print-directory features docs

$(HACK):
	$(CARGO) install --quiet --locked cargo-hack --version $(HACK_VERSION) --root .emu/cargo

## Each feature of the library crates built alone, without dev-dependencies (a user's build).
## cargo-hack edits the manifests while it runs and restores them; the lock file is unchanged.
features: $(HACK)
	@echo "== each feature alone (cargo hack)"
	$(HACK) hack check --each-feature --no-dev-deps -p heatsink-core -p heatsink
	@echo "== the library's own tests with its default features (cargo test -p heatsink, as a contributor runs it)"
	CARGO_PROFILE_DEV_DEBUG=0 $(CARGO) test --locked -p heatsink --lib --no-run

## The crates a user depends on, packaged as crates.io would take them and built from the
## packages alone (heatsink against the packaged heatsink-core), with the README's feature set.
## Debug info off: the build proves the packages compile, nothing runs them.
## cargo verifies heatsink against the packaged heatsink-core as a registry crate: it unpacks it
## into $$CARGO_HOME/registry/src/-<hash of this checkout's path>/ and compiles it into the target
## directory, and treats both as immutable (a registry crate never changes). After heatsink-core
## changed, a second run from the same path reuses the old copy or the old build and verifies
## against them (a runner that clones into one directory failed that way). Both go first: the
## unpacked copies of our two crates and the builds of every heatsink crate (fingerprints named
## `heatsink-<16 hex>` or `heatsink-core-<16 hex>`; the path builds are rebuilt on next use).
PACKAGED := $${CARGO_HOME:-$$HOME/.cargo}/registry/src/-*/heatsink-core-[0-9]* \
	$${CARGO_HOME:-$$HOME/.cargo}/registry/src/-*/heatsink-[0-9]* \
	$${CARGO_TARGET_DIR:-target}/debug/.fingerprint/heatsink-core-???????????????? \
	$${CARGO_TARGET_DIR:-target}/debug/.fingerprint/heatsink-????????????????
package:
	@echo "== cargo package (heatsink-core, heatsink with the README's features), verified"
	rm -rf $(PACKAGED)
	CARGO_PROFILE_DEV_DEBUG=0 $(CARGO) package --locked --allow-dirty -p heatsink-core -p heatsink \
	  --features heatsink/lambda,heatsink/cache,heatsink/streams

## The API docs of every crate, warnings as errors (broken and private links, bad HTML).
docs:
	@echo "== cargo doc, warnings as errors"
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --no-deps --workspace --all-features --locked

stack-up:
	$(STACK) up

stack-down:
	$(STACK) down

## The stack script's smoke test alone (~10 s once installed; stops the stack).
stack-test:
	$(STACK_TEST)
