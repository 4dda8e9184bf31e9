"""Issue 51: what a stateless request costs after a `remember`, through the direct tools/call path and
through rmcp (the same binary with the hidden --no-direct-calls), both servers side by side, alternating.

Each round, on each server: a ping (after the previous round's ping), a remember, a ping right after it, a
remember, a 0.5 ms sleep, a ping; medians of the latencies. A ping slower only right after a remember, and
still after the sleep, is not work left after the remember's response but the ping's code (rmcp's) run
colder when the remember did not go through rmcp.
Run by hand; the figures go in bench/RESULTS.md.

Usage: mcp_http_ping_after.py DSN BINARY ROUNDS (DSN: as bench/mcp_http_ab.py's)
"""
import contextlib
import statistics
import sys
import time

from mcp_raw import RawMcp
from mcp_recall import http_server, setup


def main():
    dsn, binary, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    setup(dsn, 1000)
    with contextlib.ExitStack() as stack:
        raws = {}
        for label, flags in [("direct", ["--stateless"]), ("rmcp", ["--stateless", "--no-direct-calls"])]:
            url, token, _ = stack.enter_context(http_server(binary, dsn, *flags))
            raws[label] = stack.enter_context(RawMcp(url, token))
        res = {f"{k} {m}": [] for k in raws for m in ("ping after a ping", "remember", "ping after a remember", "ping 0.5 ms after a remember")}

        def timed(key, f):
            t = time.perf_counter()
            f()
            res[key].append(time.perf_counter() - t)

        for i in range(rounds):
            for k, raw in (list(raws.items()) if i % 2 == 0 else list(reversed(raws.items()))):
                timed(f"{k} ping after a ping", raw.ping)
                timed(f"{k} remember", lambda: raw.call_tool("remember", {"content": f"ping-after {i} {k} notes"}))
                timed(f"{k} ping after a remember", raw.ping)
                raw.call_tool("remember", {"content": f"ping-after {i} {k} more notes"})
                time.sleep(0.0005)
                timed(f"{k} ping 0.5 ms after a remember", raw.ping)
    for k, v in res.items():
        print(f"{k}: median {statistics.median(v) * 1000:.3f} ms")


if __name__ == "__main__":
    main()
