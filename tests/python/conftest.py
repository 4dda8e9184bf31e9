"""Client tests: the extension's semantics reach a Python application through plain SQL.

A throwaway cluster is started with scripts/cluster.sh; each test gets a fresh database with
memory_ext created, so tests do not see each other's rows.
"""
import contextlib
import itertools
import os
import pathlib
import shutil
import subprocess
import tempfile
import time

import psycopg
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "scripts" / "cluster.sh"
# The client programs (pg_dump, pg_restore, psql) of the server the clusters run: $PG_CONFIG's,
# as scripts/cluster.sh (a pg_dump refuses a newer server).
BIN = subprocess.check_output([os.environ.get("PG_CONFIG", "/usr/bin/pg_config"), "--bindir"], text=True).strip()
_counter = itertools.count()


def cluster_dir(name):
    """The directory of scripts/cluster.sh's cluster `name` (its data, socket, port and log)."""
    return pathlib.Path(f"/tmp/memory_ext-{os.environ.get('MEMORY_EXT_CLUSTER_PREFIX', '')}{name}")


def ensure_role(conn, name, *groups):
    """Login role `name` (made once per cluster; roles outlive the test databases), member of `groups`."""
    conn.execute(f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{name}') THEN "
                 f"CREATE ROLE {name} LOGIN; END IF; END $$")
    for g in groups:
        conn.execute(f"GRANT {g} TO {name}")


def connect(dsn, role, org=None):
    """An autocommit connection of the database of `dsn` as login role `role`, acting for `org`
    (memory.org_id) when given."""
    c = psycopg.connect(dsn.replace("user=postgres", f"user={role}"), autocommit=True)
    if org:
        c.execute("SELECT set_config('memory.org_id', %s, false)", (org,))
    return c


@pytest.fixture(scope="session")
def port():
    name = os.environ.get("MEMORY_EXT_CLUSTER", "pytest")
    p = subprocess.check_output([str(CLUSTER), "start", name], text=True).strip()
    yield int(p)
    subprocess.run([str(CLUSTER), "stop", name], check=False)


def _dsn(port, db):
    return f"host=127.0.0.1 port={port} user=postgres dbname={db}"


def fresh_database(port, db):
    """Database `db` of the cluster on `port`, made anew with memory_ext created; its DSN."""
    with psycopg.connect(_dsn(port, "postgres"), autocommit=True) as c:
        c.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
        c.execute(f"CREATE DATABASE {db}")
    with psycopg.connect(_dsn(port, db), autocommit=True) as c:
        c.execute("CREATE EXTENSION memory_ext")
    return _dsn(port, db)


def wait_until(f, seconds=30.0):
    """Whether f() became true within `seconds` (polled every 50 ms; asked once more at the end)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if f():
            return True
        time.sleep(0.05)
    return f()


@contextlib.contextmanager
def integrator_cluster(name, databases, options=""):
    """A cluster whose background integrators serve `databases` (memory.integrator_databases,
    comma-separated; the first is made anew with memory_ext), with server `options`; yields the
    first database's DSN."""
    env = dict(os.environ, MEMORY_EXT_INTEGRATOR_DATABASES=databases, MEMORY_EXT_SERVER_OPTS=options)
    port = int(subprocess.check_output([str(CLUSTER), "start", name], text=True, env=env).strip())
    try:
        yield fresh_database(port, databases.split(",")[0])
    finally:
        subprocess.run([str(CLUSTER), "stop", name], check=False)


@pytest.fixture
def dsn(port):
    db = f"py_{next(_counter)}"
    yield fresh_database(port, db)
    with psycopg.connect(_dsn(port, "postgres"), autocommit=True) as c:
        c.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")


@pytest.fixture
def conn(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        yield c


@contextlib.contextmanager
def clock_cluster(name, offset="+0"):
    """A cluster under libfaketime whose clock offset (e.g. "+0", "-40d", "+120d") is read from a
    file on every clock call, so a test moves the running server in time. Yields (port, file)."""
    d = tempfile.mkdtemp(prefix=f"memory_ext-{name}-clock-")
    os.chmod(d, 0o755)
    f = pathlib.Path(d) / "offset"
    f.write_text(offset + "\n")
    os.chmod(f, 0o644)
    env = dict(os.environ, MEMORY_EXT_FAKETIME_FILE=str(f))
    try:
        yield int(subprocess.check_output([str(CLUSTER), "start", name], text=True, env=env).strip()), f
    finally:
        subprocess.run([str(CLUSTER), "stop", name], check=False)
        shutil.rmtree(d, ignore_errors=True)


def pytest_configure(config):
    config.addinivalue_line("markers", "immediate_only: runs in memory.audit_mode = immediate only (test_audit.py)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under MEMORY_REQUIRE_ALL=1 (.ci/run sets it) a skipped test fails: a layer that cannot run
    (no pgvector, ...) must not pass CI silently. The skip's reason is kept in the failure."""
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("MEMORY_REQUIRE_ALL") == "1" and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        print(f"\nSKIPPED: python: {item.nodeid}: {reason} (a failure under MEMORY_REQUIRE_ALL=1)")
        report.outcome = "failed"
        report.longrepr = f"SKIPPED under MEMORY_REQUIRE_ALL=1: {reason}"
