# memory_ext — the two commands are `make demo` and `make test`.
PG_CONFIG ?= /usr/bin/pg_config
PGRX_TEST_DATA ?= /tmp/memory_ext-pgrx-test
export PG_CONFIG

.PHONY: all deps build install test test-layout test-core test-pgrx test-sql test-python test-upgrade test-citus demo bench clean

all: install

deps:
	@scripts/install-deps.sh

build: deps
	cargo build

## The release build, the current install script, the generated upgrade script (sql/updates/) and
## the kept scripts of earlier releases, each file replaced atomically (scripts/install-ext.sh).
install: deps
	scripts/install-ext.sh

## Every test layer: the layout check, core unit/property tests, #[pg_test]s, the pgTAP suite, the Python client
## tests, the upgrade from release 0.1.0.
test: deps test-layout test-core test-pgrx install test-sql test-python test-upgrade test-citus
	@echo "make test: all layers passed"

## One-way module dependencies, unsafe code only in src/pg/, every unsafe fn with a # Safety section.
test-layout:
	python3 scripts/check_layout.py

test-core:
	cargo test -p memory_core

test-pgrx: deps
	cargo pgrx test pg15 --runas postgres --pgdata $(PGRX_TEST_DATA)

test-sql: install
	tests/run-sql.sh

test-python: install
	tests/run-python.sh

## Releases 0.1.0 and 0.2.0 (each built from its commit) filled with data, then ALTER EXTENSION
## UPDATE to this release; the catalog is compared with a fresh install.
test-upgrade: install
	tests/upgrade/run.sh 0.1.0
	tests/upgrade/run.sh 0.2.0

## Citus (SPEC §10): builds Citus from ../shared/vendor/citus when none is installed, then a
## coordinator + 2 workers; skipped (and says so) where neither exists.
test-citus: install
	tests/citus/run.sh

## Build, install, start a throwaway cluster, run the narrated walkthrough, print how to connect.
demo: install
	scripts/demo.sh

## Benchmarks (release build); results go to bench/RESULTS.md.
bench: deps
	bench/run.sh

clean:
	scripts/cluster.sh stop demo || true
	cargo clean
