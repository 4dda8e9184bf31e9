"""Appends go straight into month partitions; a partition another session drops is seen at the
next append (the cached partition list follows the parent's invalidations)."""
import psycopg


def test_partition_list_follows_ddl_of_other_sessions(dsn):
    with psycopg.connect(dsn, autocommit=True) as a, psycopg.connect(dsn, autocommit=True) as b:
        a.execute("SELECT memory.audit_ensure_partitions(3)")
        a.execute("SELECT memory.audit_append('x.one', '{}', 'acme')")  # caches the partitions
        # Another session seals and drops the current month's partition.
        b.execute("SELECT count(*) FROM memory.audit_seal(now() + interval '62 days')")
        dropped = b.execute("SELECT memory.audit_prune(now() + interval '62 days')").fetchone()[0]
        assert dropped >= 1
        a.execute("SELECT memory.audit_append('x.two', '{}', 'acme')")
        where = a.execute("SELECT tableoid::regclass::text FROM memory.audit_log WHERE event_type = 'x.two'").fetchone()[0]
        assert where == "memory.audit_log_default"
        row = a.execute("SELECT ok, entries, pruned FROM memory.audit_verify('acme')").fetchone()
        assert row[0] is True, row
