# heatsink: the two commands a newcomer needs are `make demo` and `make test`.
SHELL := /bin/bash
STACK := localstack/stack
CARGO ?= cargo
# Demo arguments, e.g. `make demo DEMO_ARGS="--rate 10000"`.
DEMO_ARGS ?=

.PHONY: demo test lint stack-up stack-down

## Bring the local stack up (if needed), create the resources, run the main scenario. The stack
## keeps running afterwards; `localstack/stack down` stops it.
demo:
	@$(STACK) up
	@set -euo pipefail; eval "$$($(STACK) env)"; \
	$(CARGO) build -q --locked -p heatsink-cli; \
	target/debug/heatsink local bootstrap; \
	target/debug/heatsink demo $(DEMO_ARGS)
	@echo "The local stack is still running: stop it with 'localstack/stack down'."

## Stack up, format and lint checks, every test on the moto, dynoxide and LocalStack lanes,
## stack down (also when a step fails).
test:
	@set -euo pipefail; \
	trap '$(STACK) down' EXIT; \
	$(STACK) up; \
	$(CARGO) fmt --all --check; \
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings; \
	echo "== all tests, moto lane"; \
	( eval "$$($(STACK) env --lane moto)"; HEATSINK_REQUIRE_STACK=1 $(CARGO) test --workspace --locked ); \
	echo "== integration tests, dynoxide lane"; \
	( eval "$$($(STACK) env --lane dynoxide)"; HEATSINK_REQUIRE_STACK=1 $(CARGO) test --locked -p heatsink-integration ); \
	rc=0; $(STACK) up --localstack || rc=$$?; \
	if [ "$$rc" = 3 ]; then echo "skip: LocalStack lane (Python 3.13 missing, see above)"; \
	elif [ "$$rc" != 0 ]; then exit "$$rc"; \
	else echo "== integration tests, localstack lane"; \
	( eval "$$($(STACK) env --lane localstack)"; HEATSINK_REQUIRE_STACK=1 $(CARGO) test --locked -p heatsink-integration ); fi

## Formatting and lints only (no stack needed).
lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

stack-up:
	$(STACK) up

stack-down:
	$(STACK) down
