"""Issue 50's insert target measured as this project's other single-row write benchmarks are
(single_row_bench.py, writes_vs_bare.py): pgbench, prepared statements (`-M prepared`), the same
client for both sides, so that the client's own CPU on the shared cores is pgbench's small cost on
both; and, in the same rounds, lineage_bench.py's psycopg figure beside it.

Both sides are a single-row INSERT into memory.observations by the tenant-bound bench_writer
(lineage_bench.py's roles), each its own transaction (autocommit):
  plain    INSERT ... (org_id, user_id, content)
  derived  INSERT ... (org_id, user_id, content, derived_from) with 10 sources, bound as one text
           parameter `$4::uuid[]` as psycopg binds a list.
pgbench cannot build a uuid, so the sources are drawn beforehand: SETS samples of 10 of the
tenant's ROWS memories, one pgbench script each (`-f derived_k.sql`, equal weights: pgbench picks a
script at random for every transaction), each sample passed as a variable (`-D`) and so bound as a
parameter at every execution. psycopg draws a new sample of the same pool each insert.

A derived insert's cost grows with the number of memories already derived from each source (the
GIN entry of a source keeps its posting list inline, decoded and re-encoded by every insert into
it: RESULTS.md), so each pgbench run is TX transactions (`-t`), not a duration: with the defaults
(10,000 memories, 5 rounds of 3,000) a source has ~17 derived memories at the end, as after one run
of lineage_bench.py (1,500 inserts over 1,000 sources).

Each round: pgbench plain and derived (CLIENTS clients, TX transactions each), then psycopg plain
and derived (CALLS statements each, with the backend's CPU of its connection from
/proc/<pid>/schedstat and the client's own CPU), every pair in an order alternating by round. A
pgbench run also gives, per transaction, the CPU of all the cluster's processes (/proc, in clock
ticks: the postmaster's live children and those it reaped, i.e. the run's backends, the background
integrator and the writers) and pgbench's own CPU. Medians of the rounds; the ratio is plain time /
derived time (throughput), per round and of the medians. Sets up the tenant org-0 (ROWS memories)
and lineage_bench.py's roles when the database has none; run it on a fresh database of
scripts/cluster.sh (fsync off, the integrator serving it).

    python lineage_pgbench.py DSN PORT [ROUNDS] [TX] [CALLS] [CLIENTS] [SETS] [ROWS]
"""
import os
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import psycopg

from agent_api_bench import roles

ORG = "org-0"
CONTENT = "'Summary ' || :n || ': the customer asked about the budget'"
PLAIN = f"""\\set n random(1, 1000000000)
INSERT INTO memory.observations (org_id, user_id, content) VALUES (:org, 'user-1', {CONTENT});
"""
DERIVED = f"""\\set n random(1, 1000000000)
INSERT INTO memory.observations (org_id, user_id, content, derived_from) VALUES (:org, 'user-1', {CONTENT}, :src%d::uuid[]);
"""
PLAIN_SQL = "INSERT INTO memory.observations (org_id, user_id, content) VALUES (%s, %s, %s)"
DERIVED_SQL = "INSERT INTO memory.observations (org_id, user_id, content, derived_from) VALUES (%s, %s, %s, %s::uuid[])"


def pgbench_bin():
    cfg = os.environ.get("PG_CONFIG")
    if cfg:
        b = subprocess.run([cfg, "--bindir"], capture_output=True, text=True, check=True).stdout.strip()
        if os.path.exists(f"{b}/pgbench"):
            return f"{b}/pgbench"
    return shutil.which("pgbench") or "/usr/lib/postgresql/15/bin/pgbench"


def cpu_ns(pid):
    return int(open(f"/proc/{pid}/schedstat").read().split()[0])


def stat(pid):
    return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()


def server_ticks(postmaster):
    """CPU of the cluster's processes in clock ticks (1/100 s): the live children of the
    postmaster (utime + stime) and the children it has reaped (its cutime + cstime): a pgbench
    run's backends exit when it ends, and their CPU is then the postmaster's children's."""
    f = stat(postmaster)
    t = int(f[13]) + int(f[14])
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                c = stat(d)
            except OSError:
                continue
            if int(c[1]) == postmaster:
                t += int(c[11]) + int(c[12])
    return t


def main():
    dsn, port = sys.argv[1], int(sys.argv[2])
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    tx = int(sys.argv[4]) if len(sys.argv) > 4 else 3000
    calls = int(sys.argv[5]) if len(sys.argv) > 5 else 1000
    clients = int(sys.argv[6]) if len(sys.argv) > 6 else 1
    sets = int(sys.argv[7]) if len(sys.argv) > 7 else 100
    rows = int(sys.argv[8]) if len(sys.argv) > 8 else 10_000
    base = psycopg.conninfo.conninfo_to_dict(dsn)
    db = base.get("dbname", "postgres")
    with psycopg.connect(dsn, autocommit=True) as c:
        if not c.execute("SELECT 1 FROM pg_roles WHERE rolname = 'bench_writer' AND has_table_privilege(oid, 'memory.observations', 'INSERT')").fetchone():
            c.execute("SELECT memory.setup_roles()")
            c.execute("CREATE TABLE IF NOT EXISTS bench_obs_plain (id uuid)")  # (roles() grants on it)
            roles(c)
        (have,) = c.execute("SELECT count(*) FROM memory.observations WHERE org_id = %s AND derived_from IS NULL", (ORG,)).fetchone()
        if have < rows:
            c.execute("""INSERT INTO memory.observations (org_id, user_id, content)
                         SELECT %s, 'user-' || (i %% 50), 'User ' || i || ' mentioned the quarterly plan and the budget'
                           FROM generate_series(1, %s) i""", (ORG, rows - have))
            c.execute("VACUUM ANALYZE memory.observations")
    w = psycopg.connect(**{**base, "user": "bench_writer"}, autocommit=True)
    w.execute("SELECT set_config('memory.org_id', %s, false)", (ORG,))
    pool = [str(r[0]) for r in w.execute(
        "SELECT id FROM memory.observations WHERE org_id = %s AND derived_from IS NULL ORDER BY created_at, id LIMIT %s", (ORG, rows))]
    rnd = random.Random(50)
    tmp = tempfile.mkdtemp(prefix="lineage_pgbench")
    os.chmod(tmp, 0o755)
    cmd = [pgbench_bin(), "-h", "127.0.0.1", "-p", str(port), "-U", "bench_writer", "-n", "-M", "prepared", "-D", f"org={ORG}"]
    plain_f = f"{tmp}/plain.sql"
    open(plain_f, "w").write(PLAIN)
    derived_f = []
    for k in range(sets):
        p = f"{tmp}/derived_{k}.sql"
        open(p, "w").write(DERIVED % k)
        derived_f.append(p)
        cmd += ["-D", f"src{k}={{{','.join(rnd.sample(pool, 10))}}}"]
    cmd_end = [db]

    def pgbench_with(files):
        args = [*cmd, "-c", str(clients), "-j", str(min(clients, 2)), "-t", str(tx)]
        for f in files:
            args += ["-f", f]
        args += cmd_end
        s0, c0 = server_ticks(postmaster), resource.getrusage(resource.RUSAGE_CHILDREN)
        out = subprocess.run(args, capture_output=True, text=True, env={**os.environ, "PGOPTIONS": f"-c memory.org_id={ORG}"})
        # The run's backends gone and reaped before the count (else one is in neither term).
        while w.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pgbench'").fetchone()[0]:
            time.sleep(0.01)
        time.sleep(0.05)
        s1, c1 = server_ticks(postmaster), resource.getrusage(resource.RUSAGE_CHILDREN)
        if out.returncode != 0:
            raise SystemExit(f"pgbench failed: {out.stderr}")
        failed = re.search(r"number of failed transactions: (\d+)", out.stdout)
        assert not failed or failed.group(1) == "0", out.stdout
        n = tx * clients
        client = (c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime) / n * 1000
        return float(re.search(r"tps = ([0-9.]+)", out.stdout).group(1)), (s1 - s0) * 10 / n, client

    def psy(kind):
        """CALLS inserts by psycopg: median wall ms, backend CPU ms and client CPU ms per insert."""
        pid = w.info.backend_pid
        walls = []
        b0, c0 = cpu_ns(pid), time.process_time()
        for i in range(calls):
            text = f"Summary {i}: the customer asked about the budget"
            t = time.perf_counter()
            if kind == "plain":
                w.execute(PLAIN_SQL, (ORG, "user-1", text), prepare=True)
            else:
                w.execute(DERIVED_SQL, (ORG, "user-1", text, rnd.sample(pool, 10)), prepare=True)
            walls.append(time.perf_counter() - t)
        return (statistics.median(walls) * 1000, (cpu_ns(pid) - b0) / calls / 1e6, (time.process_time() - c0) / calls * 1000)

    postmaster = int(stat(w.info.backend_pid)[1])
    load0 = os.getloadavg()
    tps = {"plain": [], "derived": []}
    pcpu = {"plain": [], "derived": []}
    ps = {"plain": [], "derived": []}
    for r in range(rounds):
        order = ["plain", "derived"] if r % 2 == 0 else ["derived", "plain"]
        for k in order:
            t, srv, cli = pgbench_with([plain_f] if k == "plain" else derived_f)
            tps[k].append(t)
            pcpu[k].append((srv, cli))
        for k in order:
            ps[k].append(psy(k))
        print(f"round {r}: pgbench tps plain {tps['plain'][-1]:.0f} derived {tps['derived'][-1]:.0f} "
              f"({tps['derived'][-1] / tps['plain'][-1] * 100:.1f}%), server/client CPU ms plain "
              f"{'/'.join('%.3f' % x for x in pcpu['plain'][-1])} derived {'/'.join('%.3f' % x for x in pcpu['derived'][-1])}; psycopg wall/server/client ms plain "
              f"{'/'.join('%.3f' % x for x in ps['plain'][-1])} derived {'/'.join('%.3f' % x for x in ps['derived'][-1])}", flush=True)
    load1 = os.getloadavg()
    med = statistics.median
    tp, td = med(tps["plain"]), med(tps["derived"])
    rr = [d / p * 100 for p, d in zip(tps["plain"], tps["derived"])]
    col = lambda k, i: med([x[i] for x in ps[k]])
    print(f"load average at the start {load0[0]:.1f}/{load0[1]:.1f}/{load0[2]:.1f}, at the end {load1[0]:.1f}/{load1[1]:.1f}/{load1[2]:.1f}")
    print(f"pgbench -M prepared, {clients} client(s), {tx} transactions a client a run, {rounds} rounds: plain {tp:.0f} TPS ({1000 / tp:.3f} ms), "
          f"derived {td:.0f} TPS ({1000 / td:.3f} ms): {td / tp * 100:.1f}% (median of the rounds' ratios {med(rr):.1f}%; "
          f"rounds {', '.join('%.1f' % x for x in rr)})")
    for i, name in enumerate(["server CPU (all the cluster's processes)", "client CPU (pgbench)"]):
        p, d = med([x[i] for x in pcpu["plain"]]), med([x[i] for x in pcpu["derived"]])
        print(f"pgbench {name} ms a transaction: plain {p:.3f}, derived {d:.3f}: {p / d * 100:.1f}%")
    for i, name in enumerate(["wall median", "backend CPU", "client CPU"]):
        p, d = col("plain", i), col("derived", i)
        print(f"psycopg {name} ms: plain {p:.3f}, derived {d:.3f}: {p / d * 100:.1f}%")
    shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
