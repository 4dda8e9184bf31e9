"""Issue 16 benchmark: memory.classify throughput with every detector vs 0.1.0's detector set, on the
classification benchmark's rows, in one run; and the false-positive share over a generated corpus of
benign agent-memory sentences (since issue 46 with the look-alikes of the identity detectors: people's
names with dates and office addresses, account numbers, branch codes, the word passport near numbers).

    python detector_bench.py DSN [ROWS] [RUNS] [CORPUS]
"""
import random
import sys
import uuid

import psycopg

from classify_bench import SETUP
from common import machine, median, timed, write_section

CLASSIFY = ("SELECT count(*) FROM bench_src "
            "WHERE memory.classify(content, source_files, source_type::text) IS NOT NULL")


def corpus(n, seed=16):
    """Benign agent-memory sentences with the look-alikes a detector must not take for personal data
    or secrets: git SHAs, UUIDs, ISO dates and timestamps, epoch milliseconds, amounts, order and
    invoice numbers, version strings, hex hashes, IP addresses and ports, durations, counts; and (issue 46)
    names with titles, dates and street addresses in one sentence without a date of birth, 8-digit
    account numbers without a sort code, NN-NN-NN codes without an account, `passport` near numbers
    that are no passport number, `born` of things."""
    r = random.Random(seed)
    hexs = lambda k: "".join(r.choice("0123456789abcdef") for _ in range(k))
    digits = lambda k: str(r.randint(10 ** (k - 1), 10 ** k - 1))
    date = lambda: f"20{r.randint(18, 27)}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}"
    ts = lambda: f"{date()}T{r.randint(0, 23):02d}:{r.randint(0, 59):02d}:{r.randint(0, 59):02d}.{digits(6)}Z"
    amount = lambda: r.choice([f"${r.randint(1, 999)},{r.randint(0, 999):03d}.{r.randint(0, 99):02d}",
                               f"EUR {r.randint(1, 99999)}.{r.randint(0, 99):02d}", f"{r.randint(1, 9999)} USDC"])
    order = lambda: r.choice([f"ORD-{r.randint(2019, 2027)}-{digits(6)}", f"INV-{digits(9)}", f"#{digits(r.randint(5, 12))}",
                              f"PO{digits(8)}", f"order {digits(r.randint(6, 12))}"])
    version = lambda: r.choice([f"v{r.randint(0, 20)}.{r.randint(0, 40)}.{r.randint(0, 99)}",
                                f"{r.randint(1, 15)}.{r.randint(0, 9)}.{r.randint(0, 30)}-rc.{r.randint(1, 5)}"])
    first = lambda: r.choice(["Jane", "John", "Priya", "Ahmed", "Maria", "Wei", "Olu", "Sarah", "Tom", "Anna"])
    last = lambda: r.choice(["Smith", "Patel", "Okafor", "Garcia", "Chen", "Jones", "Brown", "Nowak", "Kim", "Taylor"])
    title = lambda: r.choice(["Mr", "Ms", "Mrs", "Dr", "Prof"])
    street = lambda: f"{r.randint(1, 400)} {r.choice(['Acacia', 'Baker', 'High', 'Station', 'Church', 'Mill'])} " \
                     f"{r.choice(['Street', 'Road', 'Avenue', 'Lane', 'Way', 'Close'])}"
    postcode = lambda: f"{r.choice(['LS', 'M', 'SW', 'EC', 'B'])}{r.randint(1, 20)} {r.randint(1, 9)}{r.choice('ABDEFGHJLNPQRSTUWXYZ')}{r.choice('ABDEFGHJLNPQRSTUWXYZ')}"
    code = lambda: f"{r.randint(10, 99)}-{r.randint(0, 99):02d}-{r.randint(0, 99):02d}"
    templates = [
        lambda: f"Commit {hexs(40)} fixed the retry loop; merged as {hexs(7)} on {date()}",
        lambda: f"Request {uuid.UUID(int=r.getrandbits(128), version=4)} timed out after {r.randint(1, 120)} s at {ts()}",
        lambda: f"User asked to refund {amount()} on {order()}; approved {date()}",
        lambda: f"Upgraded the client to {version()} and pinned the server at {version()}",
        lambda: f"Artifact sha256 {hexs(64)} was uploaded by job {digits(7)}",
        lambda: f"Cache key md5 {hexs(32)} missed for build {digits(r.randint(4, 9))}",
        lambda: f"Event at epoch {r.randint(1_500_000_000_000, 1_900_000_000_000)} ms (trace {hexs(16)}) was retried {r.randint(1, 9)} times",
        lambda: f"Service at 10.{r.randint(0, 255)}.{r.randint(0, 255)}.{r.randint(1, 254)}:{r.randint(1024, 65535)} answered in {r.randint(1, 999)} ms",
        lambda: f"Invoice {order()} of {amount()} is due {date()}; reminder sent {ts()}",
        lambda: f"The agent summarised {r.randint(2, 400)} documents for ticket JIRA-{digits(4)} in sprint {r.randint(1, 60)}",
        lambda: f"Shipment {order()} left the warehouse {r.randint(1, 30)} days after {date()}",
        lambda: f"Meeting {date()} {r.randint(8, 18)}:{r.choice(['00', '15', '30', '45'])}: agreed on roadmap item {digits(3)}-{digits(2)}",
        lambda: f"Object 0x{hexs(12)} leaked in worker {r.randint(1, 64)}; heap grew {r.randint(1, 900)} MB",
        lambda: f"Block {digits(8)} confirmed tx {hexs(64)} with fee {amount()}",
        lambda: f"Customer segment {r.choice('ABCDEFGH')}{digits(2)} grew {r.randint(1, 40)}% quarter over quarter ({date()})",
        lambda: f"Run {digits(10)} of pipeline {r.choice(['etl', 'train', 'eval'])} took {r.randint(1, 59)}m{r.randint(0, 59)}s",
        # Issue 46 look-alikes.
        lambda: f"{title()} {first()} {last()} met the team at {street()}, {postcode()} on {date()} to review account {digits(8)}",
        lambda: f"{first()} {last()} approved the refund on {date()}; the {street()} branch ({code()}) closes at 5",
        lambda: f"Changed the sort order of report {digits(6)}; branch {code()} totals {amount()} across {digits(8)} rows",
        lambda: f"The passport service (passport.js {version()}) issued {digits(9)} sessions on {date()}",
        lambda: f"Feature born from ticket JIRA-{digits(4)} on {date()}; demoed at {street()} by {title()} {last()}",
        lambda: f"Account {digits(8)} migrated on {date()} by job {digits(7)}; sort key {code()} kept",
    ]
    return [r.choice(templates)() for _ in range(n)]


def main():
    dsn = sys.argv[1]
    rows = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000_000
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    n_corpus = int(sys.argv[4]) if len(sys.argv) > 4 else 200_000
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS bench_src, bench_narrow_bare, bench_memory_bare, bench_narrow_governed, "
                     "bench_narrow_plpgsql, bench_memory_governed, bench_memory_plpgsql, bench_corpus CASCADE")
        conn.execute(SETUP.replace("%(rows)s", str(rows)))
        conn.execute("SELECT count(*) FROM bench_src")  # warm the cache
        times = {"on": [], "first_generation": [], "off": []}
        for r in range(runs):
            order = list(times) if r % 2 == 0 else list(reversed(times))
            for setting in order:
                conn.execute(f"SET memory.classify_detectors = {setting}")
                t = timed(conn, CLASSIFY)
                times[setting].append(t)
                print(f"run {r + 1} classify, detectors {setting}: {t:.2f}s ({rows / t:,.0f} rows/s)", flush=True)
        conn.execute("RESET memory.classify_detectors")
        tiers = dict(conn.execute("SELECT memory.classify(content, source_files, source_type::text)::text, count(*) "
                                  "FROM bench_src GROUP BY 1").fetchall())

        sentences = corpus(n_corpus)
        conn.execute("CREATE TABLE bench_corpus (id int, content text)")
        with conn.cursor().copy("COPY bench_corpus (id, content) FROM STDIN") as cp:
            for i, s in enumerate(sentences):
                cp.write_row((i, s))
        fired = conn.execute("SELECT count(*) FROM bench_corpus "
                             "WHERE memory.classify_explain(content)->>'rule' LIKE 'detector\\_%'").fetchone()[0]
        any_detector = conn.execute("SELECT count(*) FROM bench_corpus WHERE cardinality(memory.detect(content)) > 0").fetchone()[0]
        by_name = dict(conn.execute("SELECT d, count(*) FROM bench_corpus, unnest(memory.detect(content)) d GROUP BY 1").fetchall())
        # Bare numeric ids (not in the corpus above): how often a random 16-digit number is taken for a card.
        conn.execute("CREATE TABLE bench_ids AS SELECT 'Record ' || (1000000000000000 + floor(random() * 9000000000000000))::bigint "
                     "|| ' updated' AS content FROM generate_series(1, 20000)")
        ids_fired = conn.execute("SELECT count(*) FROM bench_ids WHERE cardinality(memory.detect(content)) > 0").fetchone()[0]
        conn.execute("DROP TABLE bench_ids")
        rules = dict(conn.execute("""SELECT memory.classify_explain(content)->>'rule', count(*) FROM bench_corpus GROUP BY 1
                                      ORDER BY 2 DESC""").fetchall())
        samples = [s for (s,) in conn.execute("SELECT content FROM bench_corpus ORDER BY id LIMIT 3").fetchall()]
        n_detectors = conn.execute("SELECT count(*) FROM memory.detectors()").fetchone()[0]
        conn.execute("DROP TABLE bench_corpus")

    med = {k: median(v) for k, v in times.items()}
    rps = {k: rows / v for k, v in med.items()}
    ratio = rps["on"] / rps["first_generation"]
    share = 100.0 * fired / n_corpus
    share_any = 100.0 * any_detector / n_corpus
    body = f"""Command: `make bench` (runs `bench/detector_bench.py DSN {rows} {runs} {n_corpus}` against a release build).
Machine: {machine()}.
Median of {runs} runs per setting, all in one run on one connection (setting order alternated per run).
Rows: the classification benchmark's {rows:,} rows (`bench/classify_bench.py`), tier mix with every detector on: `{tiers}`.

| `SELECT memory.classify(...)` over {rows:,} rows | median s | rows/s | vs first_generation |
|---|---|---|---|
| `memory.classify_detectors = first_generation` (0.1.0's set: card, SSN, PEM, AWS, JWT) | {med['first_generation']:.2f} | {rps['first_generation']:,.0f} | 100% |
| `memory.classify_detectors = on` (all {n_detectors} detectors, folding) | {med['on']:.2f} | {rps['on']:,.0f} | **{100 * ratio:.1f}%** |
| `memory.classify_detectors = off` (seed rules only) | {med['off']:.2f} | {rps['off']:,.0f} | {100 * rps['off'] / rps['first_generation']:.1f}% |

- Every detector on runs at **{100 * ratio:.1f}%** of the first-generation set's rows/s (target: at least 85%).
- False positives: {n_corpus:,} benign agent-memory sentences generated by the benchmark (seeded; git SHAs, UUIDs,
  ISO dates and timestamps, epoch milliseconds, amounts, order and invoice numbers, version strings, hex hashes, IP
  addresses, and since issue 46 names with dates and office addresses, account numbers, branch codes, `passport` near
  other numbers; e.g. `{samples[0]}`). Classified restricted or confidential by a detector: **{fired} rows = {share:.4f}%**
  (target: below 0.1%). Any detector matching at all (`memory.detect`): {any_detector} rows = {share_any:.4f}% `{by_name}`.
  Deciding rules over the corpus: `{rules}`.
  By design a 13–19 digit number in a card issuer's range with that issuer's length and a valid Luhn digit is taken for a
  card number (about 1 in 10 random numbers in those ranges pass Luhn), so an application whose ids look like that
  should not write them bare; epoch milliseconds (13 digits from 1) are outside every issuer range. Measured apart from the
  corpus: of 20,000 sentences `Record <random 16-digit number> updated`, {ids_fired} ({100 * ids_fired / 20000:.1f}%) were taken for card numbers.
"""
    print(body)
    write_section("Detectors, second generation (issue 16)", body)


if __name__ == "__main__":
    main()
