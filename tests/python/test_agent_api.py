"""The agent API as the application lives it (issue 35): login roles bound to tenants forget
memories (memory.forget, both forms) and correct them by UPDATE. The superuser (`conn`) only sets
up and reads what happened."""
import hashlib
import json

import psycopg
import pytest

from conftest import connect
from test_app_roles import ADMIN, GLOBEX, OWNER, READER, WRITER, app  # noqa: F401 (the fixture)


def sha(text):
    return hashlib.sha256(text.encode()).hexdigest()


def store(c, org, content, user=None):
    (oid,) = c.execute("INSERT INTO memory.observations (org_id, user_id, content) VALUES (%s, %s, %s) RETURNING id",
                       (org, user, content)).fetchone()
    return str(oid)


def without_receipts(r):
    """The result without its erasure receipts (tests/python/test_receipts.py checks them): one
    for every org whose rows went, none when nothing was forgotten."""
    receipt, receipts = r.pop("receipt", None), r.pop("receipts", [])
    assert bool(receipts) == bool(r["forgotten"]), r
    assert receipt == (receipts[0] if len(receipts) == 1 else None)
    # Nothing here is derived from anything (tests/python/test_lineage.py): the observations'
    # form always answers derived_forgotten, empty.
    assert r.pop("derived_forgotten", []) == [], r
    return r


def forget(c, ids, reason="user asked"):
    (r,) = c.execute("SELECT memory.forget(%s::uuid[], %s)", (ids, reason)).fetchone()
    return without_receipts(r)


def events(conn, event_type, chain="acme"):
    conn.execute("SELECT memory.audit_integrate()")
    return [p for (p,) in conn.execute("SELECT payload FROM memory.audit_log WHERE chain_id = %s AND event_type = %s ORDER BY seq",
                                       (chain, event_type)).fetchall()]


def test_a_writer_forgets_its_memories(app, conn):
    with connect(app, WRITER) as w, connect(app, GLOBEX) as g:
        a = store(w, "acme", "dave likes tea", "dave")
        b = store(w, "acme", "dave likes coffee", "dave")
        other = store(g, "globex", "globex plan")
        assert forget(w, [a]) == {"forgotten": [a], "held": [], "not_found": []}
        assert forget(w, [b, other, b]) == {"forgotten": [b], "held": [], "not_found": [other]}
        assert w.execute("SELECT count(*) FROM memory.observations WHERE id = ANY(%s::uuid[])", ([a, b],)).fetchone() == (0,)
        # globex's writer still has its row; acme's writer learned nothing of it.
        assert g.execute("SELECT content FROM memory.observations WHERE id = %s", (other,)).fetchone() == ("globex plan",)
    fe = events(conn, "memory.forget")
    assert [e["forgotten"] for e in fe] == [[{"id": a, "content_sha256": sha("dave likes tea")}],
                                           [{"id": b, "content_sha256": sha("dave likes coffee")}]]
    assert all(e["reason"] == "user asked" and e["table"] == "memory.observations" for e in fe)
    stored = {e["id"]: e["content_sha256"] for e in events(conn, "memory.store")}
    assert stored[a] == sha("dave likes tea"), "the forget event's hash is the one the store recorded"
    (text,) = conn.execute("SELECT string_agg(payload::text, ' ') FROM memory.audit_log").fetchone()
    assert "dave likes" not in text
    assert all(ok for (ok,) in conn.execute("SELECT ok FROM memory.audit_verify()").fetchall())


def test_forget_removes_archive_and_weight_history(app, conn):
    with connect(app, WRITER) as w:
        a = store(w, "acme", "to be archived", "u1")
        w.execute("SELECT * FROM memory.record_outcome('s1', 'accepted', %s::uuid[])", ([a],))
    # Retention's archive step, as the owner runs it.
    # (By the archive's columns: the words kept with a row, content_tsv, stay behind.)
    cols = conn.execute("SELECT memory_internal._archive_columns()").fetchone()[0]
    conn.execute(f"INSERT INTO memory.observations_archive ({cols}, archived_at) SELECT {cols}, now() FROM memory.observations WHERE id = %s", (a,))
    conn.execute("DELETE FROM memory.observations WHERE id = %s", (a,))
    assert conn.execute("SELECT count(*) FROM memory.observation_weight_history WHERE observation_id = %s", (a,)).fetchone() == (1,)
    with connect(app, WRITER) as w:
        assert forget(w, [a])["forgotten"] == [a]
    for t in ("observations", "observations_archive", "observation_weight_history"):
        col = "observation_id" if t == "observation_weight_history" else "id"
        assert conn.execute(f"SELECT count(*) FROM memory.{t} WHERE {col} = %s", (a,)).fetchone() == (0,), t
    assert events(conn, "memory.forget")[-1]["forgotten"] == [{"id": a, "content_sha256": sha("to be archived")}]


def test_held_memories_stay(app, conn):
    with connect(app, WRITER) as w:
        h1 = store(w, "acme", "held one", "held")
        h2 = store(w, "acme", "held two", "held")
        free = store(w, "acme", "free one", "free")
    with connect(app, ADMIN) as a:
        (hold,) = a.execute("INSERT INTO memory.legal_holds (org_id, user_id, reason) VALUES ('acme', 'held', 'litigation') RETURNING id").fetchone()
    with connect(app, WRITER) as w:
        with pytest.raises(psycopg.DatabaseError) as e:
            forget(w, [h1, h2])
        assert e.value.sqlstate == "MX006" and f"legal hold {hold}" in str(e.value)
        assert forget(w, [h1, free]) == {"forgotten": [free], "held": [h1], "not_found": []}
    assert conn.execute("SELECT count(*) FROM memory.observations WHERE id = ANY(%s::uuid[])", ([h1, h2],)).fetchone() == (2,)
    assert events(conn, "memory.forget")[-1]["held"] == 1


@pytest.mark.parametrize("copies,null,reason", [
    (1, False, None), (1, False, "  \t"), (1, False, "x" * 1001), (10_001, False, "r"), (1, True, "r"),
])
def test_bad_input_is_22023_with_a_hint(app, conn, copies, null, reason):
    with connect(app, WRITER) as w:
        a = store(w, "acme", "keep me")
        with pytest.raises(psycopg.DatabaseError) as e:
            forget(w, [a] * copies + ([None] if null else []), reason)
        assert e.value.sqlstate == "22023" and e.value.diag.message_hint
    assert conn.execute("SELECT count(*) FROM memory.observations WHERE id = %s", (a,)).fetchone() == (1,)
    assert events(conn, "memory.forget") == []


def test_no_ids_no_event_and_readers_cannot_forget(app, conn):
    with connect(app, WRITER) as w:
        assert forget(w, None) == {"forgotten": [], "held": [], "not_found": []}
        assert forget(w, []) == {"forgotten": [], "held": [], "not_found": []}
        a = store(w, "acme", "read only")
    assert events(conn, "memory.forget") == []
    with connect(app, READER) as r:
        with pytest.raises(psycopg.DatabaseError) as e:
            forget(r, [a])
        assert e.value.sqlstate == "42501"


def test_forget_rows_of_a_governed_table(app, conn):
    with connect(app, OWNER) as o:
        ids = [o.execute("INSERT INTO app.notes (tenant, uid, body) VALUES ('acme', %s, %s) RETURNING id", (u, b)).fetchone()[0]
               for u, b in [("u1", "first note"), ("u2", "second note"), ("held", "held note")]]
        o.execute("CREATE TABLE app.plain (k text PRIMARY KEY, tenant text, body text, classification memory.classification)")
        o.execute("""SELECT memory.govern('app.plain', '{"content": "body", "org": "tenant"}')""")
        o.execute(f"GRANT SELECT, DELETE ON app.plain TO {WRITER}")
        o.execute("CREATE TABLE app.loose (id bigint)")
        o.execute(f"GRANT SELECT, DELETE ON app.loose TO {WRITER}")
    with connect(app, GLOBEX) as g:
        (gid,) = g.execute("INSERT INTO app.notes (tenant, uid, body) VALUES ('globex', 'g', 'globex note') RETURNING id").fetchone()
    with connect(app, ADMIN) as a:
        a.execute("INSERT INTO memory.legal_holds (org_id, user_id, reason) VALUES ('acme', 'held', 'litigation')")
    with connect(app, WRITER) as w:
        (r,) = w.execute("SELECT memory.forget('app.notes', %s, 'user asked')",
                         ([str(ids[0]), "0" + str(ids[1]), str(gid), str(ids[2])],)).fetchone()
        assert without_receipts(r) == {"forgotten": [str(ids[0]), str(ids[1])], "held": [str(ids[2])], "kept": [], "not_found": [str(gid)]}
        for tbl, ids_, want in [("app.plain", ["1"], "22023"), ("app.loose", ["1"], "22023"), ("app.notes", ["x"], "22023"),
                                (None, ["1"], "22023")]:
            with pytest.raises(psycopg.DatabaseError) as e:
                w.execute("SELECT memory.forget(%s::regclass, %s, 'r')", (tbl, ids_))
            assert e.value.sqlstate == want and e.value.diag.message_hint, (tbl, e.value.sqlstate, str(e.value))
    with connect(app, READER) as r:
        with pytest.raises(psycopg.DatabaseError) as e:
            r.execute("SELECT memory.forget('app.notes', ARRAY['1'], 'r')")
        assert e.value.sqlstate == "42501"
    conn.execute(f"REVOKE DELETE ON app.notes FROM {GLOBEX}")
    with connect(app, GLOBEX) as g:
        with pytest.raises(psycopg.DatabaseError) as e:
            g.execute("SELECT memory.forget('app.notes', %s, 'r')", ([str(gid)],))
        assert e.value.sqlstate == "42501", "no DELETE on the table: 42501"
    assert sorted(i for (i,) in conn.execute("SELECT id FROM app.notes").fetchall()) == sorted([ids[2], gid])
    ev = events(conn, "memory.forget")[-1]
    assert ev["table"] == "app.notes" and ev["forgotten"] == [{"id": str(ids[0]), "content_sha256": sha("first note")},
                                                             {"id": str(ids[1]), "content_sha256": sha("second note")}]
    assert all(ok for (ok,) in conn.execute("SELECT ok FROM memory.audit_verify()").fetchall())


def test_a_writer_corrects_its_memories(app, conn):
    with connect(app, WRITER) as w, connect(app, GLOBEX) as g:
        a = store(w, "acme", "prefers tabs", "u1")
        other = store(g, "globex", "globex fact")
        w.execute("UPDATE memory.observations SET content = 'prefers spaces', memory_type = 'persona', source_type = 'preference' WHERE id = %s", (a,))
        w.execute("UPDATE memory.observations SET content = 'the api_key rotates monthly', source_files = ARRAY['docs/a.md'] WHERE id = %s", (a,))
        assert w.execute("SELECT classification::text, memory_type::text FROM memory.observations WHERE id = %s", (a,)).fetchone() == \
            ("confidential", "persona")
        w.execute("UPDATE memory.observations SET content = 'harmless now' WHERE id = %s", (a,))
        assert w.execute("SELECT classification::text FROM memory.observations WHERE id = %s", (a,)).fetchone() == ("confidential",), \
            "a correction never lowers the tier"
        with pytest.raises(psycopg.DatabaseError) as e:
            w.execute("""UPDATE memory.observations SET metadata = '{"classification": "public"}' WHERE id = %s""", (a,))
        assert e.value.sqlstate == "MX004"
        for col, val in [("classification", "'public'"), ("weight", "0.2"), ("created_at", "now() - interval '9 years'"),
                         ("expires_at", "NULL"), ("org_id", "'globex'"), ("user_id", "'u9'")]:
            with pytest.raises(psycopg.DatabaseError) as e:
                w.execute(f"UPDATE memory.observations SET {col} = {val} WHERE id = %s", (a,))
            assert e.value.sqlstate == "42501", col
        cur = w.execute("UPDATE memory.observations SET content = 'hijacked' WHERE id = %s", (other,))
        assert cur.rowcount == 0, "another org's row is invisible"
    assert conn.execute("SELECT content FROM memory.observations WHERE id = %s", (other,)).fetchone() == ("globex fact",)
    updates = [e for e in events(conn, "memory.update") if e["id"] == a]
    assert [(e["content_sha256"], e["classification"]) for e in updates] == [
        (sha("prefers spaces"), "internal"), (sha("the api_key rotates monthly"), "confidential"), (sha("harmless now"), "confidential")]
    assert [(e["from"], e["to"]) for e in events(conn, "memory.reclassify") if e["id"] == a] == [("internal", "confidential")]
    assert conn.execute("SELECT actor_id FROM memory.audit_log WHERE event_type = 'memory.update' LIMIT 1").fetchone() == (f"role:{WRITER}",)
    assert all(ok for (ok,) in conn.execute("SELECT ok FROM memory.audit_verify()").fetchall())


def test_a_held_memory_cannot_be_corrected(app, conn):
    with connect(app, WRITER) as w:
        a = store(w, "acme", "under hold", "held")
    with connect(app, ADMIN) as ad:
        ad.execute("INSERT INTO memory.legal_holds (org_id, observation_id, reason) VALUES ('acme', %s, 'subpoena')", (a,))
    with connect(app, WRITER) as w:
        with pytest.raises(psycopg.DatabaseError) as e:
            w.execute("UPDATE memory.observations SET content = 'rewritten' WHERE id = %s", (a,))
        assert e.value.sqlstate == "MX006"
    assert conn.execute("SELECT content FROM memory.observations WHERE id = %s", (a,)).fetchone() == ("under hold",)


# ---------------------------------------------------------------------------------------------
# Issue 53 (attacker review of 0.3.0): forget holds the table's row-level security, the caller's
# clearance and the rows actually deleted; a foreign memory.org_id is refused.

def note(c, body, uid="u1", org="acme", extra=None):
    (nid,) = c.execute("INSERT INTO app.notes (tenant, uid, body, extra) VALUES (%s, %s, %s, %s) RETURNING id",
                       (org, uid, body, extra)).fetchone()
    return str(nid)


def forget_rows(c, ids, tbl="app.notes", reason="user asked"):
    (r,) = c.execute("SELECT memory.forget(%s::regclass, %s::text[], %s)", (tbl, [str(i) for i in ids], reason)).fetchone()
    return without_receipts(r)


def test_forget_on_a_table_deletes_only_what_the_callers_own_delete_could(app, conn):
    """#1: the owner's policy hides a row from the writer (its own DELETE removes nothing): forget
    answers not_found for it, as for a missing id, and leaves it; every integer id of the table
    reaches no further."""
    with connect(app, OWNER) as o:
        hidden = [note(o, f"someone else's note {i}", uid="u9") for i in range(3)]
        mine = note(o, "my own note", uid=WRITER)
        o.execute("ALTER TABLE app.notes ENABLE ROW LEVEL SECURITY")
        o.execute("CREATE POLICY own_rows ON app.notes USING (uid = current_user)")
    with connect(app, WRITER) as w:
        assert w.execute("DELETE FROM app.notes WHERE id = %s", (hidden[0],)).rowcount == 0
        assert forget_rows(w, [hidden[0], mine, "999999"]) == {
            "forgotten": [mine], "held": [], "kept": [], "not_found": [hidden[0], "999999"]}
        assert forget_rows(w, range(1, int(max(hidden)) + 10)) == {
            "forgotten": [], "held": [], "kept": [], "not_found": [str(i) for i in range(1, int(max(hidden)) + 10)]}
    assert sorted(str(i) for (i,) in conn.execute("SELECT id FROM app.notes").fetchall()) == sorted(hidden)
    assert [e["forgotten"] for e in events(conn, "memory.forget")] == [[{"id": mine, "content_sha256": sha("my own note")}]]


def test_forget_never_reaches_above_the_callers_clearance(app, conn):
    """#2: a writer cleared to internal: a restricted row (which it cannot SELECT) is not_found,
    indistinguishable from a missing id (held or not: no MX006), and stays; the same on a table
    with a tier column."""
    conn.execute("SELECT memory.grant_org(%s, 'acme', 'internal')", (WRITER,))
    secret = store(conn, "acme", "the ssn is 123-45-6789", "dave")
    secret_held = store(conn, "acme", "held ssn 123-45-6789", "held")
    assert conn.execute("SELECT count(*) FROM memory.observations WHERE id = ANY(%s::uuid[]) AND classification = 'restricted'",
                        ([secret, secret_held],)).fetchone() == (2,)
    with connect(app, ADMIN) as a:
        a.execute("INSERT INTO memory.legal_holds (org_id, user_id, reason) VALUES ('acme', 'held', 'litigation')")
    with connect(app, OWNER) as o:
        secret_note = note(o, SECRET_NOTE)
        plain_note = note(o, "plain note")
    missing = "00000000-0000-0000-0000-0000000000ff"
    with connect(app, WRITER) as w:
        assert w.execute("SELECT count(*) FROM memory.observations WHERE id = %s", (secret,)).fetchone() == (0,)
        plain = store(w, "acme", "lunch at noon", "dave")
        assert forget(w, [secret, plain, missing]) == {"forgotten": [plain], "held": [], "not_found": [secret, missing]}
        assert forget(w, [secret_held]) == {"forgotten": [], "held": [], "not_found": [secret_held]}, "no MX006: nothing told"
        assert forget_rows(w, [secret_note, plain_note]) == {"forgotten": [plain_note], "held": [], "kept": [], "not_found": [secret_note]}
    assert conn.execute("SELECT count(*) FROM memory.observations WHERE id = ANY(%s::uuid[])", ([secret, secret_held],)).fetchone() == (2,)
    assert conn.execute("SELECT body FROM app.notes WHERE id = %s", (int(secret_note),)).fetchone() == (SECRET_NOTE,)
    fe = events(conn, "memory.forget")
    assert [[x["id"] for x in e["forgotten"]] for e in fe] == [[plain], [plain_note]]


SECRET_NOTE = "AKIAIOSFODNN7EXAMPLE ssn 123-45-6789"


def test_forget_reports_and_audits_only_the_rows_it_deleted(app, conn):
    """#3: the owner's BEFORE DELETE trigger keeps some rows (a soft delete): forget lists them under
    kept, not forgotten, and its memory.forget event names only the row that went."""
    with connect(app, OWNER) as o:
        o.execute("""CREATE FUNCTION app.soft_delete() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN
                     IF OLD.extra = 1 THEN RETURN NULL; END IF; RETURN OLD; END$$""")
        o.execute("CREATE TRIGGER soft_delete BEFORE DELETE ON app.notes FOR EACH ROW EXECUTE FUNCTION app.soft_delete()")
        keep = note(o, "kept by the table", extra=1)
        go = note(o, "deleted at once")
    with connect(app, WRITER) as w:
        r = forget_rows(w, [keep, go, "424242"])
    assert r["forgotten"] == [go] and r["held"] == [] and r["not_found"] == ["424242"]
    assert [k["id"] for k in r["kept"]] == [keep] and "trigger" in r["kept"][0]["reason"]
    assert conn.execute("SELECT body FROM app.notes WHERE id = %s", (int(keep),)).fetchone() == ("kept by the table",)
    assert [e["forgotten"] for e in events(conn, "memory.forget")] == [[{"id": go, "content_sha256": sha("deleted at once")}]]
    with connect(app, WRITER) as w:
        assert forget_rows(w, [keep])["kept"] == r["kept"], "every id kept: no event"
    assert len(events(conn, "memory.forget")) == 1


def test_a_foreign_org_setting_is_refused_at_the_first_call(app, conn):
    """#7: a role bound only to acme that sets memory.org_id = 'globex' gets 42501 (with a hint)
    from forget, recall, retrieve and the governed table's write triggers, changing nothing."""
    with connect(app, WRITER) as w:
        a = store(w, "acme", "keep this one", "u1")
        n = note(w, "keep this note")
        w.execute("SET memory.org_id = 'globex'")
        for stmt, args in [("SELECT memory.forget(%s::uuid[], 'x')", ([a],)),
                           ("SELECT memory.forget('app.notes', %s, 'x')", ([n],)),
                           ("SELECT * FROM memory.recall('acme', 'keep')", None),
                           ("SELECT * FROM memory.retrieve('acme', 'keep')", None),
                           ("INSERT INTO app.notes (tenant, uid, body) VALUES ('acme', 'u1', 'new')", None),
                           ("UPDATE app.notes SET body = 'changed' WHERE id = %s", (int(n),)),
                           ("DELETE FROM app.notes WHERE id = %s", (int(n),))]:
            with pytest.raises(psycopg.errors.InsufficientPrivilege) as e:
                w.execute(stmt, args)
            assert "memory.org_id" in str(e.value) and "memory.my_orgs()" in (e.value.diag.message_hint or ""), stmt
        w.execute("SET memory.org_id = 'acme'")
        assert forget(w, [a])["forgotten"] == [a]
    assert conn.execute("SELECT body FROM app.notes").fetchall() == [("keep this note",)]
    assert len(events(conn, "memory.forget")) == 1


def test_a_session_acting_for_one_org_forgets_in_that_org_only(app, conn):
    """A role bound to acme and globex whose session sets memory.org_id = 'globex' (as a pool
    or memory-mcp does per token) cannot forget acme's memories: they are not_found, as its
    row-level security shows it only globex's rows; without the setting it forgets in both."""
    conn.execute("SELECT memory.grant_org(%s, 'globex')", (WRITER,))
    with connect(app, WRITER) as w:
        w.execute("SET memory.org_id = 'acme'")  # a role of two orgs writes for the one it names
        a = store(w, "acme", "acme keeps this")
        w.execute("SET memory.org_id = 'globex'")
        g = store(w, "globex", "globex forgets this")
        assert forget(w, [a, g]) == {"forgotten": [g], "held": [], "not_found": [a]}
        w.execute("RESET memory.org_id")
        assert forget(w, [a])["forgotten"] == [a]
    assert conn.execute("SELECT count(*) FROM memory.observations").fetchone() == (0,)
