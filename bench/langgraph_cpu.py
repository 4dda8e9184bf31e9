"""Issue 48: per call, where a search's time goes: wall p50, client CPU (time.process_time) and
backend CPU (/proc/<pid>/stat of each store's backends, found by application_name) of MemoryStore's
and PostgresStore's searches (and, with --vector, PostgresStore with pgvector's iterative scan),
one client, pool of 1, rounds alternating the stores' order, on a database bench/langgraph_store.py
loaded (--phase=load); nothing is written.

    python bench/langgraph_cpu.py DSN CALLS ROUNDS [--vector]
"""
import os, sys, time, statistics
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import psycopg
import langgraph_store as B
from langgraph.store.postgres import PostgresStore
from memory_ext.langgraph import MemoryStore
dsn = sys.argv[1]; calls = int(sys.argv[2]); rounds = int(sys.argv[3]); vec = "--vector" in sys.argv
def cpu(app):
    with psycopg.connect(dsn, autocommit=True) as c:
        pids = [r[0] for r in c.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s", (app,))]
    tot = 0
    for p in pids:
        try:
            f = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split(); tot += int(f[11]) + int(f[12])
        except FileNotFoundError: pass
    return tot / os.sysconf("SC_CLK_TCK")
emb = B.Embedder()
index = {"dims": B.DIMS, "embed": emb, "fields": ["text"]}
pool = {"min_size": 1, "max_size": 1}
app = lambda role, name: B.as_role(dsn, role) + f" application_name={name}"
with MemoryStore.from_conn_string(app("lgb_tenant", "ours"), org="bench", index=index, pool_config=pool) as ours, \
     PostgresStore.from_conn_string(app("lgb_plain", "theirs"), index=index, pool_config=pool) as theirs, \
     PostgresStore.from_conn_string(app("lgb_plain", "iter") + " " + B.ITERATIVE, index=index, pool_config=pool) as it:
    stores = {"ours": ours, "theirs": theirs, "iter": it}
    if not vec:
        del stores["iter"]
    for s in stores.values():
        B.search_round(s, 99, 30, vec)
    res = {k: [] for k in stores}
    for rnd in range(rounds):
        for name in (list(stores) if rnd % 2 == 0 else list(stores)[::-1]):
            s = stores[name]
            c0 = cpu(name); p0 = time.process_time(); t0 = time.perf_counter()
            lat, h = B.search_round(s, rnd, calls, vec)
            p1 = time.process_time(); c1 = cpu(name)
            res[name].append((statistics.median(lat) * 1e3, (p1 - p0) / calls * 1e3, (c1 - c0) / calls * 1e3, h))
            print(f"r{rnd} {name:6s} hits {h:4.1f} p50 {res[name][-1][0]:7.3f} ms client cpu {res[name][-1][1]:6.3f} backend cpu {res[name][-1][2]:6.3f} load {os.getloadavg()[0]:.1f}", flush=True)
    for name, r in res.items():
        print(name, "medians: p50 %.3f client %.3f backend %.3f hits %.1f" % tuple(statistics.median(x[i] for x in r) for i in range(4)))
