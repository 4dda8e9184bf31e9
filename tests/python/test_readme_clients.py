"""The README's "Agent memory in five calls", run as written: the Python (psycopg) and TypeScript
(node-postgres, type-checked with tsc) snippets, each in its own process, as the tenant-bound roles
the README names (agent_svc, a memory_writer of acme; auditor, a memory_admin of acme)."""
import os
import pathlib
import re
import shutil
import subprocess
import sys

import psycopg
import pytest

from conftest import ROOT, ensure_role

TS = ROOT / "tests" / "ts"


def snippet(lang):
    text = (ROOT / "README.md").read_text()
    start = text.index("## Agent memory in five calls")
    section = text[start:text.index("\n## ", start + 1)]
    blocks = re.findall(r"```" + lang + r"\n(.*?)```", section, re.S)
    assert len(blocks) == 1, f"one {lang} block in the section, found {len(blocks)}"
    return blocks[0]


@pytest.fixture
def roles(dsn, conn):
    conn.execute("SELECT memory.setup_roles()")
    ensure_role(conn, "agent_svc", "memory_writer")
    ensure_role(conn, "auditor", "memory_admin")
    for r in ("agent_svc", "auditor"):
        conn.execute("SELECT memory.grant_org(%s, 'acme')", (r,))
    # Another tenant's memories are there too, and never reach acme's calls.
    ensure_role(conn, "globex_svc", "memory_writer")
    conn.execute("SELECT memory.grant_org('globex_svc', 'globex')")
    with psycopg.connect(dsn.replace("user=postgres", "user=globex_svc"), autocommit=True) as c:
        c.execute("INSERT INTO memory.observations (org_id, user_id, session_id, content) VALUES "
                  "('globex', 'u-42', 's-1', 'Alice prefers concise answers'), ('globex', 'u-7', 's-2', 'release notes in French')")
    kv = dict(p.split("=", 1) for p in dsn.split())
    url = lambda role: f"postgresql://{role}@{kv['host']}:{kv['port']}/{kv['dbname']}"
    return dict(os.environ, AGENT_URL=url("agent_svc"), AUDITOR_URL=url("auditor"))


def check_after(conn):
    """What the snippet left: its memory forgotten everywhere, globex's untouched, and the five
    calls' events in acme's chain."""
    assert conn.execute("SELECT count(*) FROM memory.observations WHERE org_id = 'acme'").fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM memory.observation_weight_history WHERE org_id = 'acme'").fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM memory.observations WHERE org_id = 'globex'").fetchone()[0] == 2
    conn.execute("SELECT memory.audit_integrate()")
    events = [r[0] for r in conn.execute(
        "SELECT event_type FROM memory.audit_log WHERE chain_id = 'acme' ORDER BY seq")]
    for e in ("memory.store", "memory.recall", "memory.feedback", "memory.forget"):
        assert e in events, (e, events)
    assert all(r[0] for r in conn.execute("SELECT ok FROM memory.audit_verify('acme')"))


def test_python_snippet(roles, conn):
    p = subprocess.run([sys.executable, "-c", snippet("python")], env=roles, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    check_after(conn)


def npm_ready():
    """node-postgres and TypeScript in tests/ts/node_modules (npm ci from its lock file, once)."""
    if not shutil.which("node") or not shutil.which("npm"):
        pytest.fail("Node.js and npm are needed to run the README's TypeScript snippet")
    if not (TS / "node_modules" / "typescript").exists():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=TS, check=True, capture_output=True, timeout=600)


def test_typescript_snippet(roles, conn):
    npm_ready()
    (TS / "src").mkdir(exist_ok=True)
    (TS / "src" / "readme.ts").write_text(snippet("ts"))
    tsc = subprocess.run([str(TS / "node_modules" / ".bin" / "tsc"), "-p", str(TS)], capture_output=True, text=True, timeout=300)
    assert tsc.returncode == 0, tsc.stdout + tsc.stderr
    p = subprocess.run(["node", str(TS / "build" / "readme.js")], env=roles, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    check_after(conn)
