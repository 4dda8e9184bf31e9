"""The pg_cron schedule helper against Debian's postgresql-15-cron (cron.database_name = postgres)."""
import psycopg
import pytest


def test_schedule_maintenance_with_pg_cron(port):
    dsn = f"host=127.0.0.1 port={port} user=postgres dbname=postgres"
    with psycopg.connect(dsn, autocommit=True) as c:
        try:
            c.execute("CREATE EXTENSION IF NOT EXISTS pg_cron")
        except psycopg.Error as e:  # pg_cron not preloaded in this cluster
            pytest.fail(f"pg_cron unavailable: {e}")
        c.execute("CREATE EXTENSION IF NOT EXISTS memory_ext")
        try:
            job = c.execute("SELECT memory.schedule_maintenance('*/5 * * * *')").fetchone()[0]
            row = c.execute("SELECT schedule, command FROM cron.job WHERE jobid = %s", (job,)).fetchone()
            assert row == ("*/5 * * * *", "SELECT memory.run_maintenance()")
            again = c.execute("SELECT memory.schedule_maintenance('0 * * * *')").fetchone()[0]
            assert c.execute("SELECT count(*) FROM cron.job WHERE jobname = 'memory_ext maintenance'").fetchone() == (1,)
            assert c.execute("SELECT schedule FROM cron.job WHERE jobid = %s", (again,)).fetchone() == ("0 * * * *",)
            # The scheduled command itself runs.
            out = c.execute("SELECT memory.run_maintenance()").fetchone()[0]
            assert set(out) == {"retention", "audit_partitions_created", "audit_integrated", "consent", "at", "run_id"}
            # ...and is recorded, so a pg_cron run's result is visible in SQL.
            run = c.execute("SELECT finished_at IS NOT NULL, error, phases ? 'retention' FROM memory.maintenance_runs WHERE id = %s",
                            (out["run_id"],)).fetchone()
            assert run == (True, None, True)
            assert c.execute("SELECT memory.unschedule_maintenance()").fetchone() == (True,)
            assert c.execute("SELECT count(*) FROM cron.job WHERE jobname = 'memory_ext maintenance'").fetchone() == (0,)
        finally:
            c.execute("DROP EXTENSION IF EXISTS memory_ext CASCADE")
            c.execute("ALTER DATABASE postgres RESET session_preload_libraries")
            c.execute("DROP EXTENSION IF EXISTS pg_cron")
