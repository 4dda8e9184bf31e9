"""The pg_cron schedule helper against Debian's postgresql-15-cron (cron.database_name = postgres)."""
import psycopg
import pytest


def test_pg_cron_runs_the_job_and_its_result_is_recorded(port):
    """The job pg_cron starts (not the test) runs memory.run_maintenance, and its result is a row
    of memory.maintenance_runs (pg_cron's own record only says '1 row')."""
    import time
    dsn = f"host=127.0.0.1 port={port} user=postgres dbname=postgres"
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("CREATE EXTENSION IF NOT EXISTS pg_cron")
        c.execute("CREATE EXTENSION IF NOT EXISTS memory_ext")
        # pg_cron's launcher reloads its job list when the extension appears, and a job scheduled
        # while that reload runs can be missed until its next invalidation (RefreshTaskHash marks
        # the list valid after reading it, over an invalidation that arrived during the read):
        # schedule once the reload is over.
        time.sleep(3)
        try:
            c.execute("SELECT memory.schedule_maintenance('* * * * *')")
            # pg_cron 1.4 schedules by the minute, and its scheduler notices a new pg_cron extension on
            # its own time: up to a few minutes on a busy test server.
            # A job that pg_cron started but that failed (a refused connection on a loaded machine) is
            # started again the next minute; the deadline allows several minutes of that.
            start = time.monotonic()
            deadline = start + 300
            runs, reloaded = [], False
            while time.monotonic() < deadline and not runs:
                runs = c.execute("SELECT phases ? 'retention', error FROM memory.maintenance_runs WHERE finished_at IS NOT NULL").fetchall()
                # Two minute boundaries passed and pg_cron never started the job: the launcher
                # missed it (above); a configuration reload makes it read its job list again.
                if not runs and not reloaded and time.monotonic() - start > 125 and \
                        not c.execute("SELECT EXISTS (SELECT FROM cron.job_run_details)").fetchone()[0]:
                    c.execute("SELECT pg_reload_conf()")
                    reloaded = True
                time.sleep(1)
            if not runs:
                # Say what pg_cron did, so a failure here can be told apart from a slow scheduler.
                details = c.execute("SELECT status, return_message, start_time, end_time FROM cron.job_run_details ORDER BY runid").fetchall()
                jobs = c.execute("SELECT jobid, schedule, command, active FROM cron.job").fetchall()
                started = c.execute("SELECT started_at, finished_at, error FROM memory.maintenance_runs").fetchall()
                waits = c.execute("SELECT application_name, state, wait_event_type, wait_event, left(query, 80) FROM pg_stat_activity WHERE backend_type IN ('client backend', 'pg_cron launcher') AND pid <> pg_backend_pid()").fetchall()
                pytest.fail(f"no finished maintenance run in 300 s; cron.job_run_details={details}; cron.job={jobs}; "
                            f"memory.maintenance_runs={started}; sessions={waits}; reloaded={reloaded}")
            assert runs[0] == (True, None), runs
            assert c.execute("SELECT status FROM cron.job_run_details ORDER BY runid DESC LIMIT 1").fetchone() == ("succeeded",)
        finally:
            c.execute("SELECT memory.unschedule_maintenance()")
            c.execute("DROP EXTENSION IF EXISTS memory_ext CASCADE")
            c.execute("ALTER DATABASE postgres RESET session_preload_libraries")
            c.execute("DROP EXTENSION IF EXISTS pg_cron")


# After the test above: it drops pg_cron, whose scheduler then takes a while to see it again.
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
            assert set(out) == {"retention", "audit_partitions_created", "audit_integrated", "consent", "knowledge", "at", "run_id"}
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


def test_govern_and_maintenance_send_no_notices(conn):
    """Routine calls print nothing at the default client_min_messages (issue 13: govern printed
    five 'trigger ... does not exist, skipping' lines, run_maintenance four phase NOTICEs). The one
    NOTICE govern gives is about tenancy (issue 46): a table with an org column governed without
    "tenant_policy"; with it, nothing."""
    notices = []
    conn.add_notice_handler(lambda d: notices.append(d.message_primary))
    conn.execute("SET client_min_messages = notice")
    conn.execute("CREATE TABLE public.quiet (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), org_id text, content text,"
                 " classification memory.classification)")
    conn.execute("""SELECT memory.govern('public.quiet', '{"audit": true, "tenant_policy": true}')""")
    conn.execute("INSERT INTO public.quiet (org_id, content) VALUES ('acme', 'x')")
    conn.execute("SELECT memory.run_maintenance()")
    conn.execute("SELECT memory.run_retention(true)")
    assert notices == []
    conn.execute("""SELECT memory.govern('public.quiet', '{"audit": true}')""")
    assert len(notices) == 1 and "no row-level security" in notices[0], notices
