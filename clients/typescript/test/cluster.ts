/**
 * The test cluster as the application lives it (the TypeScript twin of tests/python/conftest.py
 * and test_app_roles.py's `app`): tests/run-typescript.sh starts a cluster with scripts/cluster.sh
 * and passes its port in MEMORY_EXT_TS_PORT; each test file gets a fresh database, owned by a
 * non-superuser, with memory_ext created and tenant-bound roles: a writer, a reader and an admin
 * of acme, a writer of globex. The superuser only sets up and reads what happened.
 */
import pg from "pg";

export const OWNER = "ts_owner";
export const WRITER = "ts_writer";
export const READER = "ts_reader";
export const ADMIN = "ts_admin";
export const GLOBEX = "ts_globex";

const port = Number(process.env.MEMORY_EXT_TS_PORT);
if (!port) throw new Error("MEMORY_EXT_TS_PORT is not set: run the tests with tests/run-typescript.sh");

export const url = (role: string, db: string): string => `postgresql://${role}@127.0.0.1:${port}/${db}`;

async function su<T>(db: string, fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client({ connectionString: url("postgres", db) });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

/** Login role `name` (made once per cluster; roles outlive the test databases), member of `groups`. */
async function ensureRole(c: pg.Client, name: string, ...groups: string[]): Promise<void> {
  await c.query(`DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '${name}') THEN CREATE ROLE ${name} LOGIN; END IF; END $$`);
  for (const g of groups) await c.query(`GRANT ${g} TO ${name}`);
}

export interface App {
  db: string;
  /** A URL of the database as `role`. */
  url(role: string): string;
  /** A statement as the superuser (setup and reading what happened only). */
  sql(text: string, values?: unknown[]): Promise<any[]>;
  drop(): Promise<void>;
}

/** Database `db`, made anew: owned by the non-superuser OWNER, memory_ext created, the roles
 * bound to their orgs; `vector`: pgvector created and embeddings enabled with that many dimensions. */
export async function freshApp(db: string, opts: { vector?: number } = {}): Promise<App> {
  // Roles and their memberships are cluster-wide: test files (run at once) set up one at a time.
  await su("postgres", async (lock) => {
    await lock.query("SELECT pg_advisory_lock(hashtext('memory_ext typescript setup'))");
    await ensureRole(lock, OWNER);
    await lock.query(`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`);
    await lock.query(`CREATE DATABASE ${db} OWNER ${OWNER}`);
    await setup(db, opts);
  });
  return {
    db,
    url: (role) => url(role, db),
    sql: (text, values) => su(db, async (c) => (await c.query(text, values as any[])).rows),
    drop: () => su("postgres", async (c) => { await c.query(`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`); }),
  };
}

async function setup(db: string, opts: { vector?: number }): Promise<void> {
  await su(db, async (c) => {
    await c.query("CREATE EXTENSION memory_ext");
    await c.query("SELECT memory.setup_roles()");
    await ensureRole(c, OWNER, "memory_writer");
    await ensureRole(c, WRITER, "memory_writer");
    await ensureRole(c, READER, "memory_reader");
    await ensureRole(c, ADMIN, "memory_admin");
    await ensureRole(c, GLOBEX, "memory_writer");
    for (const [role, org] of [[OWNER, "acme"], [WRITER, "acme"], [READER, "acme"], [ADMIN, "acme"], [GLOBEX, "globex"]]) {
      await c.query("SELECT memory.grant_org($1, $2)", [role, org]);
    }
    if (opts.vector) {
      await c.query("CREATE EXTENSION vector");
      await c.query("SELECT memory.enable_embeddings($1)", [opts.vector]);
    }
  });
}

/** Whether pgvector can be created in the cluster. */
export async function vectorAvailable(): Promise<boolean> {
  return su("postgres", async (c) => (await c.query("SELECT EXISTS (SELECT FROM pg_available_extensions WHERE name = 'vector') AS ok")).rows[0].ok);
}

/** A skip that must not pass CI silently: under MEMORY_REQUIRE_ALL=1 it is a failure. */
export function skipOrFail(t: { skip(msg: string): void }, why: string): void {
  if (process.env.MEMORY_REQUIRE_ALL === "1") throw new Error(`SKIPPED under MEMORY_REQUIRE_ALL=1: ${why}`);
  console.log(`SKIPPED: typescript: ${why}`);
  t.skip(why);
}
