"""Shared helpers for the benchmarks: timing, medians, and the RESULTS.md writer."""
import os
import platform
import statistics
import subprocess
import time
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "RESULTS.md"


def timed(conn, sql, params=None):
    t0 = time.perf_counter()
    conn.execute(sql, params)
    return time.perf_counter() - t0


def verify_chains(conn, where=""):
    """Chain what is pending, then assert every audit chain verifies (`where` names the node)."""
    conn.execute("SELECT memory.audit_integrate()")
    bad = conn.execute("SELECT chain_id, reason FROM memory.audit_verify() WHERE NOT ok").fetchall()
    assert not bad, f"{where}{': ' if where else ''}chains failed verification: {bad}"


def median(xs):
    return statistics.median(xs)


def machine():
    cpu = "unknown cpu"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    pg = subprocess.run(["/usr/bin/pg_config", "--version"], capture_output=True, text=True).stdout.strip()
    return f"{os.cpu_count()} cores ({cpu}), {mem:.0f} GiB, {platform.system()} {platform.release()}, {pg}"


def write_section(name, body):
    """Replace (or append) the section `## name` of bench/RESULTS.md (with MEMORY_EXT_BENCH_PRINT
    set, print it instead: bench/compare_builds.sh runs benchmarks whose results are not the
    latest build's)."""
    if os.environ.get("MEMORY_EXT_BENCH_PRINT"):
        print(f"## {name}\n\n{body.rstrip()}\n", flush=True)
        return
    text = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n\nEach section is written by its benchmark; rerun with `make bench`.\n"
    header = f"## {name}\n"
    start = text.find(header)
    section = header + "\n" + body.rstrip() + "\n\n"
    if start < 0:
        text = text.rstrip() + "\n\n" + section
    else:
        end = text.find("\n## ", start + len(header))
        text = text[:start] + section + (text[end + 1:] if end >= 0 else "")
    RESULTS.write_text(text.rstrip() + "\n")


def process_cpu(pid):
    """A process's CPU time in seconds so far (user + system, /proc/PID/stat): a backend's, when the
    machine is shared and wall clock carries other processes' work."""
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def interleaved(calls, n, warmup=50):
    """Each of `calls` (name -> no-argument callable) `warmup` times untimed, then `n` rounds of one
    call of each, the order rotating by one every round; each call's wall time in seconds, by name."""
    for f in calls.values():
        for _ in range(warmup):
            f()
    names = list(calls)
    lat = {k: [] for k in names}
    for i in range(n):
        for j in range(len(names)):
            k = names[(i + j) % len(names)]
            t0 = time.perf_counter()
            calls[k]()
            lat[k].append(time.perf_counter() - t0)
    return lat
