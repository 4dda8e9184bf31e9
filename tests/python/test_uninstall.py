"""Uninstalling keeps the application's data: the documented procedure (ungovern, tiers to text,
DROP EXTENSION without CASCADE) leaves every application row and its tier in place."""
import psycopg
import pytest


def test_drop_extension_without_losing_application_columns(conn):
    conn.execute("CREATE TABLE notes (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), org_id text, content text,"
                 " classification memory.classification)")
    conn.execute("""SELECT memory.govern('notes', '{"audit": true}')""")
    conn.execute("INSERT INTO notes (org_id, content) VALUES ('acme', 'the api_key is x'), ('acme', 'lunch at noon')")
    before = conn.execute("SELECT id, content, classification::text FROM notes ORDER BY id").fetchall()
    # Without the procedure, DROP EXTENSION refuses (CASCADE would drop the column with the type).
    with pytest.raises(psycopg.errors.DependentObjectsStillExist):
        conn.execute("DROP EXTENSION memory_ext")
    conn.execute("SELECT memory.ungovern('notes')")
    conn.execute("ALTER TABLE notes ALTER COLUMN classification TYPE text")
    conn.execute("DROP EXTENSION memory_ext")
    assert conn.execute("SELECT id, content, classification FROM notes ORDER BY id").fetchall() == before
    # Nothing of memory_ext's is left but its (empty) schema, which CREATE EXTENSION made for it.
    assert conn.execute("SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'memory'").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'memory'").fetchone() == (0,)
    # The internal schema was made by the extension and goes with it.
    assert conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'memory_internal'").fetchone() == (0,)
    conn.execute("DROP SCHEMA memory")
