"""Issue 48 benchmark: memory_ext's LangGraph store (memory_ext.langgraph.MemoryStore, every item a
governed memory: classified, stamped, audited) against LangGraph's own PostgresStore
(langgraph-checkpoint-postgres, governs nothing) on the same cluster, in the same run, both with a
384-d index (HNSW, cosine) over the items' "text" and a deterministic embedder whose vectors are
computed before any timing (the embedder's cost is not the store's).

  MemoryStore    as `lgb_tenant`, a memory_writer bound to org `bench` (not a superuser);
  PostgresStore  as `lgb_plain`, a plain login role owning its tables (public.store, store_vectors).

At SMALL items and then at N items (each store loaded by `batch` of 100 PutOps from 8 threads,
the load's rate reported too), rounds alternating which store goes first:
  puts     8 threads, each PUTS single `store.put` calls of new keys in their own namespace
           (deleted again after the round, untimed, so the size stays): puts/s of the round;
  filter   `store.search(("users", u), filter={"kind": k, "n": {"$gt": 500}}, limit=10)`:
           a prefix of ~1% of the items and a filter, latency p50/p99 of CALLS calls;
  vector   `store.search(("users", u), query=q, limit=10)`: the 384-d HNSW search under the prefix
           (MemoryStore's is hybrid: the lexical and the vector list fused, SPEC §16).
A third store, "PostgresStore iterative", is PostgresStore over the same tables on connections with
pgvector's iterative index scan on (`-c hnsw.iterative_scan=relaxed_order` in the connection's options,
langgraph's store having no setting of its own): its HNSW scan under the prefix then goes on until it
has the items asked for, as memory.search's does, where plain PostgresStore stops at ef_search (40)
candidates and filters them by prefix (at 100,000 items, mostly nothing). It runs the vector search
only (its puts and filter searches are PostgresStore's).
Medians over the rounds. The database must have memory_ext created (fresh cluster):

    python bench/langgraph_store.py DSN [N] [SMALL] [ROUNDS] [PUTS] [CALLS] [--phase=all|load|measure]

--phase=load sets up and loads N items into each store (nothing timed but the load); --phase=measure
then runs the rounds (at the size loaded, SMALL ignored) on that database as often as wanted, without
the setup that empties the stores: a large database is built once. all (the default): both, at SMALL
and then at N.
"""
import hashlib
import math
import os
import random
import statistics
import sys
import threading
import time

import psycopg
from langgraph.store.base import PutOp
from langgraph.store.postgres import PostgresStore

from memory_ext.langgraph import MemoryStore

from common import machine, write_section

DIMS = 384
USERS = 100
THREADS = 8
KINDS = ["preference", "fact", "event", "task", "note"]
WORDS = ("coffee tea espresso latte meeting standup budget invoice deadline release deploy rollback "
         "garden hiking music jazz piano guitar novel poetry travel paris tokyo lisbon flight hotel "
         "dinner lunch recipe pasta curry salad running cycling swimming yoga doctor dentist "
         "birthday anniversary gift flowers project report review design draft launch customer "
         "support ticket refund order shipping warehouse invoice payroll holiday vacation weekend").split()


class Embedder:
    """Deterministic 384-d vectors: a text's words' fixed random vectors summed and normalised, so
    texts sharing words are near. Memoised and warmed before timing."""

    def __init__(self):
        self.words: dict[str, list[float]] = {}
        self.memo: dict[str, list[float]] = {}

    def word(self, w):
        v = self.words.get(w)
        if v is None:
            r = random.Random(int.from_bytes(hashlib.sha256(w.encode()).digest()[:8], "big"))
            v = self.words[w] = [r.gauss(0, 1) for _ in range(DIMS)]
        return v

    def one(self, text):
        v = self.memo.get(text)
        if v is None:
            acc = [0.0] * DIMS
            for w in text.split():
                for i, x in enumerate(self.word(w)):
                    acc[i] += x
            n = math.sqrt(sum(x * x for x in acc)) or 1.0
            v = self.memo[text] = [x / n for x in acc]
        return v

    def __call__(self, texts):
        return [self.one(t) for t in texts]


def item(i, rng):
    text = " ".join(rng.choice(WORDS) for _ in range(10))
    return ("users", f"u{i % USERS}"), f"k{i}", {"text": text, "kind": KINDS[i % len(KINDS)], "n": i % 1000, "tags": ["t" + str(i % 7)]}


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def load(store, lo, hi, emb, name=""):
    """Items lo..hi-1 into store by batches of 100 PutOps from THREADS threads; seconds. Prints
    the count and the elapsed time every 10,000 items (a run stopped during a long load still
    says how far it got)."""
    rng = random.Random(lo)
    items = [item(i, rng) for i in range(lo, hi)]
    emb([v["text"] for _, _, v in items])
    chunks = [items[j:j + 100] for j in range(0, len(items), 100)]
    nxt = iter(chunks)
    lock = threading.Lock()
    done = [0]

    def work():
        while True:
            with lock:
                c = next(nxt, None)
            if c is None:
                return
            store.batch([PutOp(ns, k, v) for ns, k, v in c])
            with lock:
                done[0] += len(c)
                if done[0] % 10_000 == 0:
                    print(f"load {name}: {lo + done[0]:,} items, {time.perf_counter() - t0:.0f} s", flush=True)

    t0 = time.perf_counter()
    ts = [threading.Thread(target=work) for _ in range(THREADS)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    return time.perf_counter() - t0


def puts_round(store, rnd, puts, emb):
    """THREADS threads x puts single puts of new keys under ("bench", "r<rnd>"); puts/s. The
    round's items are deleted again (untimed)."""
    rng = random.Random(1000 + rnd)
    ns = ("bench", f"r{rnd}")
    work_items = [[(f"t{t}-{j}", {"text": " ".join(rng.choice(WORDS) for _ in range(10)), "kind": "event", "n": j})
                   for j in range(puts)] for t in range(THREADS)]
    emb([v["text"] for w in work_items for _, v in w])
    errors = []

    def work(w):
        try:
            for k, v in w:
                store.put(ns, k, v)
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    t0 = time.perf_counter()
    ts = [threading.Thread(target=work, args=(w,)) for w in work_items]
    [t.start() for t in ts]
    [t.join() for t in ts]
    dt = time.perf_counter() - t0
    if errors:
        raise errors[0]
    for w in work_items:
        store.batch([PutOp(ns, k, None) for k, _ in w])
    return THREADS * puts / dt


def search_round(store, rnd, calls, vector):
    rng = random.Random(2000 + rnd)
    lat, hits = [], 0
    for _ in range(calls):
        ns = ("users", f"u{rng.randrange(USERS)}")
        if vector:
            q = " ".join(rng.choice(WORDS) for _ in range(3))
            t0 = time.perf_counter()
            r = store.search(ns, query=q, limit=10)
        else:
            f = {"kind": rng.choice(KINDS), "n": {"$gt": 500}}
            t0 = time.perf_counter()
            r = store.search(ns, filter=f, limit=10)
        lat.append(time.perf_counter() - t0)
        hits += len(r)
    return lat, hits / calls


def setup(dsn):
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("CREATE EXTENSION IF NOT EXISTS vector")
        if c.execute("SELECT dimensions FROM memory.ann_settings").fetchone() is None:
            c.execute("SELECT memory.enable_embeddings(%s)", (DIMS,))
        c.execute("SELECT memory.setup_roles()")
        for role in ("lgb_tenant", "lgb_plain"):
            c.execute(f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{role}') THEN CREATE ROLE {role} LOGIN; END IF; END $$")
        c.execute("GRANT memory_writer TO lgb_tenant")
        c.execute("SELECT memory.grant_org('lgb_tenant', 'bench')")
        c.execute("GRANT CREATE ON SCHEMA public TO lgb_plain")
        c.execute("DROP TABLE IF EXISTS public.store_vectors, public.store, public.store_migrations, public.vector_migrations")
        c.execute("DELETE FROM memory.observations WHERE org_id = 'bench'")


def as_role(dsn, role):
    return dsn.replace("user=postgres", f"user={role}")


def loaded(dsn):
    """How many benchmark items each store holds (MemoryStore's, PostgresStore's)."""
    with psycopg.connect(dsn, autocommit=True) as c:
        ours = c.execute("SELECT count(*) FROM memory.observations WHERE org_id = 'bench' AND namespace[1] = 'users' "
                         "AND soft_deleted_at IS NULL").fetchone()[0]
        theirs = c.execute("SELECT count(*) FROM public.store WHERE prefix LIKE 'users.%'").fetchone()[0]
    return ours, theirs


ITERATIVE = "options='-c hnsw.iterative_scan=relaxed_order'"


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--phase=")]
    phase = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--phase=")), "all")
    assert phase in ("all", "load", "measure"), phase
    dsn = args[0]
    n = int(args[1]) if len(args) > 1 else 100_000
    small = int(args[2]) if len(args) > 2 else 1_000
    rounds = int(args[3]) if len(args) > 3 else 3
    puts = int(args[4]) if len(args) > 4 else 100
    calls = int(args[5]) if len(args) > 5 else 200
    if phase == "measure":
        ours_n, theirs_n = loaded(dsn)
        assert ours_n == theirs_n == n, f"loaded: MemoryStore {ours_n}, PostgresStore {theirs_n}, not {n} (--phase=load first)"
        sizes, have = (n,), n
    else:
        setup(dsn)
        sizes, have = ((n,) if phase == "load" else (small, n)), 0
    load_start = os.getloadavg()[0]
    emb = Embedder()
    index = {"dims": DIMS, "embed": emb, "fields": ["text"]}
    pool = {"min_size": THREADS, "max_size": THREADS}
    with MemoryStore.from_conn_string(as_role(dsn, "lgb_tenant"), org="bench", index=index, pool_config=pool) as ours, \
         PostgresStore.from_conn_string(as_role(dsn, "lgb_plain"), index=index, pool_config=pool) as theirs, \
         PostgresStore.from_conn_string(as_role(dsn, "lgb_plain") + " " + ITERATIVE, index=index, pool_config=pool) as iterative:
        ours.setup()
        theirs.setup()
        with iterative._cursor() as cur:
            cur.execute("SHOW hnsw.iterative_scan")
            assert cur.fetchone()["hnsw.iterative_scan"] == "relaxed_order", "the iterative baseline's connections"
        stores = {"MemoryStore": ours, "PostgresStore": theirs, "PostgresStore iterative": iterative}
        writers = ("MemoryStore", "PostgresStore")
        rows = []
        for size in sizes:
            loads = {name: load(stores[name], have, size, emb, name) for name in writers} if size > have else {}
            count = size - have
            have = size
            if count:
                with psycopg.connect(dsn, autocommit=True) as c:
                    c.execute("VACUUM ANALYZE memory.observations")
                    c.execute("VACUUM ANALYZE public.store")
                    c.execute("VACUUM ANALYZE public.store_vectors")
            if phase == "load":
                print(f"loaded {size:,} items: " + ", ".join(f"{k} {count / v:.0f} items/s" for k, v in loads.items()), flush=True)
                return
            res = {name: {"puts": [], "filter": [], "vector": [], "fh": [], "vh": []} for name in stores}
            for rnd in range(rounds):
                order = list(stores) if rnd % 2 == 0 else list(stores)[::-1]
                for name in order:
                    s = stores[name]
                    if name in writers:
                        res[name]["puts"].append(puts_round(s, rnd, puts, emb))
                        lat, h = search_round(s, rnd, calls, False)
                        res[name]["filter"].append((pct(lat, 50), pct(lat, 99)))
                        res[name]["fh"].append(h)
                    lat, h = search_round(s, rnd, calls, True)
                    res[name]["vector"].append((pct(lat, 50), pct(lat, 99)))
                    res[name]["vh"].append(h)
                    print(f"size {size} round {rnd} {name}: "
                          + (f"puts/s {res[name]['puts'][-1]:.0f} filter p50 {res[name]['filter'][-1][0]*1e3:.2f} ms " if name in writers else "")
                          + f"vector p50 {res[name]['vector'][-1][0]*1e3:.2f} ms hits {h:.1f} load {os.getloadavg()[0]:.1f}", flush=True)
            for name in stores:
                r = res[name]
                med = statistics.median
                opt = lambda xs: med(xs) if xs else None  # noqa: E731
                rows.append((size, name, (count / loads[name]) if name in loads else None, opt(r["puts"]),
                             opt([x[0] * 1e3 for x in r["filter"]]), opt([x[1] * 1e3 for x in r["filter"]]), opt(r["fh"]),
                             med(x[0] for x in r["vector"]) * 1e3, med(x[1] for x in r["vector"]) * 1e3, med(r["vh"])))
    body = [
        "`MemoryStore` (every item a governed memory; as a tenant-bound memory_writer) against LangGraph's",
        "`PostgresStore` (langgraph-checkpoint-postgres, no governance; as a plain role owning its tables), same",
        f"cluster, same run, release build; both with a {DIMS}-d HNSW (cosine) index over `text` and a",
        "deterministic embedder computed before timing. Puts: 8 threads x single `put`s of new keys",
        "(puts/s); load: `batch` of 100 PutOps from 8 threads. Search: one thread, `limit=10` under a",
        f"prefix of 1/{USERS} of the items; filter `{{kind, n: {{$gt: 500}}}}`; vector: a 3-word query",
        "(MemoryStore's is hybrid: lexical + vector fused). Medians over rounds alternating the stores' order.",
        "",
        f"Command: `python bench/langgraph_store.py DSN {n} {small} {rounds} {puts} {calls} --phase={phase}`; machine: {machine()}.",
        f"Load average (1 min) at the run's start and end: {load_start:.1f} and {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
        + (" (a shared, busy machine: latencies carry scheduler noise)." if max(load_start, os.getloadavg()[0]) > (os.cpu_count() or 1)
           else "."),
        "",
        "| items | store | load items/s | puts/s (8 threads) | filter p50 ms | filter p99 ms | hits | vector p50 ms | vector p99 ms | hits |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    def f(x, fmt):
        return "-" if x is None else format(x, fmt)
    for r in rows:
        body.append(f"| {r[0]:,} | {r[1]} | {f(r[2], '.0f')} | {f(r[3], '.0f')} | {f(r[4], '.2f')} | {f(r[5], '.2f')} | {f(r[6], '.1f')} "
                    f"| {r[7]:.2f} | {r[8]:.2f} | {r[9]:.1f} |")
    body.append("")
    for j in range(0, len(rows), 3):
        o, t, i = rows[j:j + 3]
        size = o[0]
        body.append(f"- {size:,} items: puts {o[3] / t[3]:.2f}x PostgresStore (target >= 0.7x), filter search p50 "
                    f"{o[4] / t[4]:.2f}x, vector search p50 {o[7] / t[7]:.2f}x ({t[9]:.1f} hits) and {o[7] / i[7]:.2f}x "
                    f"PostgresStore iterative ({i[9]:.1f} hits) (targets <= 1.2x).")
    text = "\n".join(body)
    print(text)
    write_section("LangGraph store: MemoryStore vs PostgresStore", text)


if __name__ == "__main__":
    main()
