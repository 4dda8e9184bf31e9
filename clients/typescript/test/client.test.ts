/** The typed client (`Memory`) as tenant roles: the agent API, the item calls, and errors carrying
 * the server's SQLSTATE, message, detail and hint. */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import pg from "pg";

import { BadArgument, Held, Memory, MemoryError, NotAllowed } from "@memory-ext/client";
import { ADMIN, GLOBEX, READER, WRITER, freshApp, type App } from "./cluster.js";

let app: App;
let pool: pg.Pool;
const clients: pg.Client[] = [];

async function client(role: string): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: app.url(role) });
  await c.connect();
  clients.push(c);
  return c;
}

before(async () => {
  app = await freshApp("ts_client");
  pool = new pg.Pool({ connectionString: app.url(WRITER), max: 2 });
});
after(async () => {
  await pool.end();
  for (const c of clients) await c.end();
  await app.drop();
});

test("the agent API: remember, recall, recordOutcome, forget, retrieve, auditVerify", async () => {
  const m = new Memory(pool, { org: "acme", actor: "agent-7" });
  const r = await m.remember("dave likes green tea", { userId: "dave", sessionId: "s1", metadata: { topic: "drinks" } });
  assert.equal(r.classification, "internal");
  assert.ok(r.createdAt instanceof Date);
  const hits = await m.recall("green tea");
  assert.deepEqual(hits.map((h) => [h.id, h.userId, h.sessionId, h.content]), [[r.id, "dave", "s1", "dave likes green tea"]]);
  assert.equal(hits[0].memoryType, "long_term");
  assert.equal(typeof hits[0].score, "number");
  const out = await m.recordOutcome("s1", "accepted", [r.id]);
  assert.equal(out[0].observationId, r.id);
  assert.equal(out[0].applied, true);
  const f = await m.forget([r.id], "user asked");
  assert.deepEqual(f, { forgotten: [r.id], held: [], notFound: [], derivedForgotten: [] });
  assert.deepEqual(await m.recall("green tea"), []);
  assert.deepEqual(await m.retrieve("anything at all"), []);

  const checks = await new Memory(await client(ADMIN), { org: "acme" }).auditVerify("acme");
  assert.deepEqual(checks.map((x) => [x.chainId, x.ok, x.firstBadSeq]), [["acme", true, null]]);
  assert.ok(checks[0].entries >= 2 && typeof checks[0].entries === "number");
  const [row] = await app.sql("SELECT actor_id FROM memory.audit_log WHERE chain_id = 'acme' AND event_type = 'memory.store'");
  assert.ok(row.actor_id && row.actor_id !== "agent-7", "the actor is recorded, pseudonymised");
});

test("forget forgets only the client's org (a role bound to two orgs)", async () => {
  await app.sql("DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'ts_multi') THEN CREATE ROLE ts_multi LOGIN; END IF; END $$");
  await app.sql("GRANT memory_writer TO ts_multi");
  await app.sql("SELECT memory.grant_org('ts_multi', 'acme'), memory.grant_org('ts_multi', 'globex')");
  const c = await client("ts_multi");
  const acme = new Memory(c, { org: "acme" });
  const globex = new Memory(c, { org: "globex" });
  const r = await acme.remember("the acme offsite is in june");
  assert.deepEqual(await globex.forget([r.id], "globex tries"), { forgotten: [], held: [], notFound: [r.id], derivedForgotten: [] });
  assert.deepEqual((await acme.recall("offsite june")).map((h) => h.id), [r.id]);
  assert.deepEqual(await acme.forget([r.id], "done"), { forgotten: [r.id], held: [], notFound: [], derivedForgotten: [] });
});

test("errors are MemoryError subclasses with the server's sqlstate, message and hint", async () => {
  const c = await client(WRITER);
  const m = new Memory(c, { org: "acme" });
  await assert.rejects(m.recall("tea", { k: 0 }), (e: unknown) => {
    assert.ok(e instanceof BadArgument && e instanceof MemoryError && e instanceof Error);
    assert.equal(e.sqlstate, "22023");
    assert.match(e.message, /k must be between 1 and 1000/);
    assert.ok(e.hint);
    assert.equal(e.name, "BadArgument");
    assert.match(String(e), /^22023: .*\(hint: /);
    return true;
  });
  await assert.rejects(new Memory(c, { org: "globex" }).recall("tea"), (e: unknown) => {
    assert.ok(e instanceof NotAllowed);
    assert.equal(e.sqlstate, "42501");
    return true;
  });
  // The failed call's transaction is gone: the connection serves the next call, with no org left.
  assert.deepEqual(await m.recall("tea"), []);
  const { rows } = await c.query("SELECT coalesce(current_setting('memory.org_id', true), '') AS org");
  assert.deepEqual(rows, [{ org: "" }]);
  assert.throws(() => new Memory(c, { org: " " }), TypeError);
});

test("calls on one pg.Client are one transaction at a time: a failing call spoils no other", async () => {
  const c = await client(WRITER);
  const m = new Memory(c, { org: "acme" });
  const calls = [m.put(["serial"], "a", { n: 1 }), m.put(["serial"], "b", [2] as unknown as Record<string, unknown>),
    m.put(["serial"], "c", { n: 3 }), m.get(["serial"], "a")];
  const [a, b, cc, got] = await Promise.allSettled(calls);
  assert.equal(a.status, "fulfilled");
  assert.ok(b.status === "rejected" && b.reason instanceof BadArgument);
  assert.equal(cc.status, "fulfilled");
  assert.ok(got.status === "fulfilled" && (got.value as { value: unknown } | null)?.value !== undefined);
  assert.deepEqual((await m.search(["serial"])).map((i) => i.key), ["c", "a"]);
});

test("item calls: put, get, search, listNamespaces, delete, purgeExpired", async () => {
  const m = new Memory(pool, { org: "acme" });
  const id = await m.put(["memories", "u1"], "prefs", { text: "likes tea", n: 3 }, { userId: "u1" });
  const item = await m.get(["memories", "u1"], "prefs");
  assert.ok(item);
  assert.equal(item.id, id);
  assert.deepEqual([item.namespace, item.key, item.value, item.classification], [["memories", "u1"], "prefs", { text: "likes tea", n: 3 }, "internal"]);
  assert.ok(item.createdAt instanceof Date && item.expiresAt instanceof Date);
  assert.equal(await m.get(["memories", "u1"], "missing"), null);
  // The same key again is the same item (upsert), changed.
  assert.equal(await m.put(["memories", "u1"], "prefs", { text: "likes green tea", n: 4 }), id);
  await m.put(["memories", "u2"], "prefs", { text: "likes coffee", n: 1 }, { index: ["$.text"] });
  const found = await m.search(["memories"], { query: "tea" });
  assert.deepEqual(found.map((f) => f.key + "@" + f.namespace.join("/")), ["prefs@memories/u1"]);
  assert.ok((found[0].score ?? 0) > 0);
  assert.deepEqual((await m.search(["memories"], { filter: { n: { $gt: 1 } } })).map((f) => f.namespace[1]), ["u1"]);
  assert.deepEqual((await m.search(["memories"])).map((f) => [f.namespace[1], f.score]), [["u2", null], ["u1", null]]);
  assert.deepEqual(await m.listNamespaces({ prefix: ["memories"] }), [["memories", "u1"], ["memories", "u2"]]);
  assert.deepEqual(await m.listNamespaces({ prefix: ["memories"], maxDepth: 1 }), [["memories"]]);
  assert.equal(await m.delete(["memories", "u2"], "prefs"), true);
  assert.equal(await m.delete(["memories", "u2"], "prefs"), false);
  await m.put(["cache"], "soon", { text: "x" }, { ttl: 60 });
  await app.sql("UPDATE memory.observations SET expires_at = now() - interval '1 second' WHERE key = 'soon'");
  assert.equal(await m.get(["cache"], "soon"), null);
  assert.equal(await m.purgeExpired(), 1);
  const [{ n }] = await app.sql("SELECT count(*)::int AS n FROM memory.observations WHERE key = 'soon'");
  assert.equal(n, 0);
  const [{ uid }] = await app.sql("SELECT user_id AS uid FROM memory.observations WHERE key = 'prefs' AND namespace = ARRAY['memories', 'u1']");
  assert.equal(uid, "u1");
});

test("bad item input is 22023 with a hint, nothing written; values are bind parameters", async () => {
  const m = new Memory(pool, { org: "acme" });
  const cases: [() => Promise<unknown>, RegExp][] = [
    [() => m.put(["a.b"], "k", { x: 1 }), /namespace/],
    [() => m.put([], "k", { x: 1 }), /namespace/],
    [() => m.put(["ns"], " ", { x: 1 }), /key/],
    [() => m.put(["ns"], "k", [1, 2] as unknown as Record<string, unknown>), /must be a JSON object, not array/],
    [() => m.put(["ns"], "k", { x: 1 }, { ttl: -5 }), /ttl must be positive/],
    [() => m.search(["ns"], { filter: { n: { $regex: "x" } } }), /./],
    [() => m.listNamespaces({ offset: -1 }), /offset must be 0 or more/],
  ];
  for (const [call, message] of cases) {
    await assert.rejects(call(), (e: unknown) => {
      assert.ok(e instanceof BadArgument, String(e));
      assert.equal(e.sqlstate, "22023");
      assert.match(e.message, message);
      assert.ok(e.hint, `a hint for ${e.message}`);
      return true;
    });
  }
  // A namespace, key and value with quotes, braces and SQL travel as data.
  const odd = ["it's", "{a,b}", '"q"'];
  await m.put(odd, "'); DROP TABLE memory.observations; --", { "k'ey": "v\"al}" });
  assert.deepEqual((await m.get(odd, "'); DROP TABLE memory.observations; --"))?.value, { "k'ey": "v\"al}" });
  const [{ n }] = await app.sql("SELECT count(*)::int AS n FROM memory.observations WHERE namespace[1] = 'ns'");
  assert.equal(n, 0, "nothing written by a refused call");
});

test("holds, clearance and tenants reach the client as their error classes", async () => {
  const m = new Memory(pool, { org: "acme" });
  await m.put(["memories", "u9"], "card", { note: { deep: ["paid with 4111 1111 1111 1111 yesterday"] } }, { userId: "u9" });
  const [{ tier }] = await app.sql("SELECT classification::text AS tier FROM memory.observations WHERE key = 'card'");
  assert.equal(tier, "restricted", "classified over every string of the value");
  await app.sql("INSERT INTO memory.legal_holds (org_id, user_id, reason) VALUES ('acme', 'u9', 'litigation')");
  await assert.rejects(m.put(["memories", "u9"], "card", { note: "changed" }), (e: unknown) => {
    assert.ok(e instanceof Held);
    assert.equal(e.sqlstate, "MX006");
    return true;
  });
  await assert.rejects(m.delete(["memories", "u9"], "card"), Held);
  await assert.rejects(new Memory(await client(READER), { org: "acme" }).put(["x"], "k", { a: 1 }), NotAllowed);
  await assert.rejects(new Memory(await client(GLOBEX), { org: "acme" }).get(["x"], "k"), NotAllowed);
});
