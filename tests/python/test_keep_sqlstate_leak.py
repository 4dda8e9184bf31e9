"""An MX error under memory_ext's own statement (keep_sqlstate, src/pg/error.rs) is raised again with
a longjmp past the SQL function's frame: whatever that frame still owns is never dropped. Review of
issue 51: `_write_as_caller` kept its `args` (forget's ids, as text) in its own frame, so every
forget that an owner's trigger refused with an MX code leaked the ids' text on the Rust heap; a
writer repeating it grew its backend without bound. The backend's resident memory must stay flat."""
import psycopg

from conftest import ensure_role

ROWS, ID_LEN, CALLS = 150, 2600, 30  # about 390 kB of ids a call: 11 MB over the calls if leaked


def vm_rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_a_refused_forget_leaks_nothing_per_call(dsn, conn):
    conn.execute("SELECT * FROM memory.setup_roles()")
    ensure_role(conn, "leak_w", "memory_writer")
    conn.execute("SELECT memory.grant_org('leak_w', 'acme')")
    conn.execute("GRANT CREATE ON SCHEMA public TO leak_w")
    with psycopg.connect(dsn.replace("user=postgres", "user=leak_w"), autocommit=True) as w:
        w.execute("CREATE TABLE public.leak_notes (id text PRIMARY KEY, tenant text NOT NULL, person text, body text, meta jsonb)")
        w.execute("""SELECT memory.govern('public.leak_notes', '{"content": "body", "target": "meta", "org": "tenant", "user": "person"}')""")
        w.execute("INSERT INTO public.leak_notes SELECT lpad(g::text, %s, 'x'), 'acme', 'erin', 'b' FROM generate_series(1, %s) g",
                  (ID_LEN, ROWS))
        # The owner's rule refuses every delete with memory_ext's hold code.
        w.execute("CREATE FUNCTION public.leak_hold() RETURNS trigger LANGUAGE plpgsql AS "
                  "$f$ BEGIN RAISE EXCEPTION 'held' USING ERRCODE = 'MX006'; END $f$")
        w.execute("CREATE TRIGGER leak_hold AFTER DELETE ON public.leak_notes FOR EACH STATEMENT EXECUTE FUNCTION public.leak_hold()")
        ids = [r[0] for r in w.execute("SELECT id FROM public.leak_notes")]
        pid = w.execute("SELECT pg_backend_pid()").fetchone()[0]

        def refused():
            try:
                w.execute("SELECT memory.forget('public.leak_notes', %s, 'review')", (ids,))
            except psycopg.Error as e:
                assert e.sqlstate == "MX006", e
            else:
                raise AssertionError("the owner's trigger refused nothing")

        for _ in range(3):
            refused()
        before = vm_rss_kb(pid)
        for _ in range(CALLS):
            refused()
        grown = vm_rss_kb(pid) - before
        assert w.execute("SELECT count(*) FROM public.leak_notes").fetchone() == (ROWS,)
    assert grown < 4096, f"the backend grew {grown} kB over {CALLS} refused forgets"
