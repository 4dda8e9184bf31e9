"""Issue 50: a derived INSERT (10 sources) against a plain governed INSERT on two clusters
(two builds: before, after), measured in the same rounds. Per round, for each cluster (the order
alternating) CALLS plain and CALLS derived inserts (the order alternating) by the tenant-bound
bench_writer (prepared, autocommit); for each block the backend's CPU time
(/proc/<pid>/schedstat, nanoseconds), the client's own CPU time (time.process_time: psycopg
adapting the parameters, a list of 10 uuid.UUID for a derived insert) and the median wall time of
a call. Medians over the rounds. Run after lineage_bench.py has set up each database:

    python lineage_ab.py PORT_BEFORE PORT_AFTER [ROUNDS] [CALLS]
"""
import random
import statistics
import sys
import time

import psycopg

ORG = "org-0"
PLAIN = "INSERT INTO memory.observations (org_id, user_id, content) VALUES (%s, %s, %s)"
DERIVED = "INSERT INTO memory.observations (org_id, user_id, content, derived_from) VALUES (%s, %s, %s, %s::uuid[])"


def cpu_of(pid):
    return int(open(f"/proc/{pid}/schedstat").read().split()[0]) / 1e9


def main():
    ports = {"before": int(sys.argv[1]), "after": int(sys.argv[2])}
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 10
    calls = int(sys.argv[4]) if len(sys.argv) > 4 else 1000
    conns, pools = {}, {}
    for b, p in ports.items():
        c = psycopg.connect(f"host=127.0.0.1 port={p} user=bench_writer dbname=postgres", autocommit=True)
        c.execute("SELECT set_config('memory.org_id', %s, false)", (ORG,))
        pools[b] = [r[0] for r in c.execute("SELECT id FROM memory.observations WHERE org_id = %s ORDER BY created_at LIMIT 1000", (ORG,))]
        conns[b] = c
    rnd = random.Random(7)
    m = {(b, k, x): [] for b in ports for k in ("plain", "derived") for x in ("server", "client", "wall")}
    for r in range(rounds):
        for b in (["before", "after"] if r % 2 == 0 else ["after", "before"]):
            c = conns[b]
            for k in (["plain", "derived"] if r % 2 == 0 else ["derived", "plain"]):
                srcs = [rnd.sample(pools[b], 10) for _ in range(calls)]
                ts = []
                s0, c0 = cpu_of(c.info.backend_pid), time.process_time()
                for i in range(calls):
                    text = f"Summary {i}: the customer asked about the budget"
                    t = time.perf_counter()
                    if k == "plain":
                        c.execute(PLAIN, (ORG, "user-1", text), prepare=True)
                    else:
                        c.execute(DERIVED, (ORG, "user-1", text, srcs[i]), prepare=True)
                    ts.append(time.perf_counter() - t)
                m[(b, k, "client")].append((time.process_time() - c0) / calls * 1000)
                m[(b, k, "server")].append((cpu_of(c.info.backend_pid) - s0) / calls * 1000)
                m[(b, k, "wall")].append(statistics.median(ts) * 1000)
    load = open("/proc/loadavg").read().split()[0]
    for b in ports:
        md = {key[1:]: statistics.median(v) for key, v in m.items() if key[0] == b}
        parts = []
        for x in ("server", "client", "wall"):
            p, d = md[("plain", x)], md[("derived", x)]
            parts.append(f"{x} {p:.3f} / {d:.3f} ms ({p / d * 100:.0f}%)")
        print(f"{b}: plain / derived: " + "; ".join(parts))
    print(f"{rounds} rounds of {calls} calls, load average {load}")


if __name__ == "__main__":
    main()
