/**
 * One transaction per call, on a node-postgres Pool or Client, with the tenant set for that
 * transaction only (`set_config('memory.org_id', $1, true)`, i.e. SET LOCAL): a pooled connection
 * never carries one org's setting into another's call. Values are bind parameters only.
 */
import type pg from "pg";

import { fromPg } from "./errors.js";

/** What the client and the store run on: a `pg.Pool` (one pooled connection per call) or a
 * connected `pg.Client` / `pg.PoolClient` (its calls serialised, one transaction at a time). */
export type Db = pg.Pool | pg.Client | pg.PoolClient;

export type Row = Record<string, any>;
export type Query = (text: string, values?: unknown[]) => Promise<Row[]>;

function isPool(db: Db): db is pg.Pool {
  // Duck-typed (a pg loaded twice has two Pool classes): only a Pool counts its clients.
  return typeof (db as pg.Pool).totalCount === "number" && typeof (db as pg.Pool).connect === "function";
}

/** The statement that sets the call's org and actor for its transaction only, or null. */
export function tenantSql(org: string | null, actor: string | null): [string, string[]] | null {
  const parts: string[] = [];
  const args: string[] = [];
  for (const [name, v] of [["memory.org_id", org], ["memory.actor_id", actor]] as const) {
    if (v !== null && v !== undefined) {
      args.push(v);
      parts.push(`pg_catalog.set_config('${name}', $${args.length}, true)`);
    }
  }
  return parts.length ? [`SELECT ${parts.join(", ")}`, args] : null;
}

/** Transactions on `db`. */
export class Tx {
  private tail: Promise<unknown> = Promise.resolve();

  constructor(readonly db: Db) {}

  /** Runs `fn` in one transaction acting for `org` (and `actor`); a database error is thrown as
   * a MemoryError subclass after the transaction is rolled back. */
  async run<T>(org: string | null, actor: string | null, fn: (q: Query) => Promise<T>): Promise<T> {
    if (isPool(this.db)) {
      const c = await this.db.connect();
      let broken: Error | undefined;
      try {
        return await this.body(c, org, actor, fn);
      } catch (e) {
        // A connection whose rollback failed is not handed back to the pool.
        if ((e as { rollbackFailed?: boolean }).rollbackFailed) broken = e as Error;
        throw e;
      } finally {
        c.release(broken);
      }
    }
    const client = this.db;
    const next = this.tail.then(() => this.body(client, org, actor, fn));
    this.tail = next.catch(() => undefined);
    return next;
  }

  private async body<T>(c: pg.ClientBase, org: string | null, actor: string | null, fn: (q: Query) => Promise<T>): Promise<T> {
    const q: Query = async (text, values) => (await c.query(text, values as any[])).rows;
    try {
      await c.query("BEGIN");
      const t = tenantSql(org, actor);
      if (t) await c.query(t[0], t[1]);
      const out = await fn(q);
      await c.query("COMMIT");
      return out;
    } catch (e) {
      const err = fromPg(e);
      try {
        await c.query("ROLLBACK");
      } catch {
        if (err && typeof err === "object") (err as { rollbackFailed?: boolean }).rollbackFailed = true;
      }
      throw err;
    }
  }
}
