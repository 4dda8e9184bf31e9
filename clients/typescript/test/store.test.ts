/** The LangGraph.js store (`MemoryStore extends BaseStore`) as tenant roles through a pg.Pool: the
 * BaseStore semantics LangGraph's store tests exercise, TTL, semantic search with a deterministic
 * embedder, user_label, governance, and one pool shared by two orgs. */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { BaseStore, InMemoryStore, InvalidNamespaceError, type IndexConfig, type PutOperation } from "@langchain/langgraph-checkpoint";
import pg from "pg";

import { BadArgument, Held, NotAllowed } from "@memory-ext/client";
import { MemoryStore } from "@memory-ext/client/langgraph";
import { ADMIN, GLOBEX, READER, WRITER, freshApp, skipOrFail, vectorAvailable, type App } from "./cluster.js";
import { FakeEmbeddings } from "./fake-embeddings.js";

let app: App;
let pool: pg.Pool;

before(async () => {
  app = await freshApp("ts_store");
  pool = new pg.Pool({ connectionString: app.url(WRITER), max: 2 });
});
after(async () => {
  await pool.end();
  await app.drop();
});

/** A store on a namespace root of its own, so the tests do not see each other's items. */
const fresh = (opts: Partial<ConstructorParameters<typeof MemoryStore>[1]> = {}) => new MemoryStore(pool, { org: "acme", ...opts });

test("put, get, update, delete", async () => {
  const store = fresh();
  assert.ok(store instanceof BaseStore);
  await store.setup();
  await store.put(["crud", "a"], "k1", { text: "hello", n: 1 });
  const first = await store.get(["crud", "a"], "k1");
  assert.ok(first);
  assert.deepEqual([first.namespace, first.key, first.value], [["crud", "a"], "k1", { text: "hello", n: 1 }]);
  assert.ok(first.createdAt instanceof Date && first.updatedAt instanceof Date);
  assert.equal(await store.get(["crud", "a"], "missing"), null);
  assert.equal(await store.get(["crud"], "k1"), null, "a namespace is exact for get");
  await store.put(["crud", "a"], "k1", { text: "hello again", n: 2 });
  const second = await store.get(["crud", "a"], "k1");
  assert.ok(second);
  assert.deepEqual(second.value, { text: "hello again", n: 2 });
  assert.equal(second.createdAt.getTime(), first.createdAt.getTime(), "an update keeps created_at");
  assert.ok(second.updatedAt.getTime() >= first.updatedAt.getTime());
  await store.delete(["crud", "a"], "k1");
  assert.equal(await store.get(["crud", "a"], "k1"), null);
  await store.delete(["crud", "a"], "k1"); // deleting nothing is not an error
  // LangGraph's own checks run before the database's.
  await assert.rejects(store.put(["bad.label"], "k", { a: 1 }), InvalidNamespaceError);
  await assert.rejects(store.put([], "k", { a: 1 }), InvalidNamespaceError);
});

test("batch: one transaction, results in the caller's order, a null value deletes", async () => {
  const store = fresh();
  await store.put(["batch"], "old", { text: "old" });
  const res: any[] = await store.batch([
    { namespace: ["batch"], key: "a", value: { n: 1 } },
    { namespace: ["batch"], key: "a" },
    { namespace: ["batch"], key: "old", value: null },
    { namespace: ["batch"], key: "old" },
    { namespacePrefix: ["batch"], limit: 10, offset: 0 },
    { matchConditions: [{ matchType: "prefix", path: ["batch"] }], limit: 10, offset: 0 },
  ]);
  assert.equal(res.length, 6);
  assert.equal(res[0], undefined);
  assert.deepEqual(res[1]?.value, { n: 1 });
  assert.equal(res[2], undefined);
  assert.equal(res[3], null);
  assert.deepEqual(res[4].map((i: { key: string }) => i.key), ["a"]);
  assert.deepEqual(res[5], [["batch"]]);
  assert.deepEqual(await store.batch([]), []);
  // A failing op rolls the whole batch back.
  await assert.rejects(store.batch([
    { namespace: ["batch"], key: "b", value: { n: 2 } },
    { namespace: ["batch"], key: "c", value: [1] as unknown as Record<string, unknown> },
  ]), BadArgument);
  assert.equal(await store.get(["batch"], "b"), null, "nothing of a failed batch is written");
});

test("search: prefix, filters, limit and offset, query", async () => {
  const store = fresh();
  await store.put(["docs", "x"], "a", { text: "green tea and jasmine", kind: "drink", n: 1, tags: ["hot"], meta: { lang: "en" } });
  await store.put(["docs"], "b", { text: "black coffee", kind: "drink", n: 2, tags: ["hot", "bitter"], meta: { lang: "fr" } });
  await store.put(["docs", "y"], "c", { text: "rust compiler", kind: "code", n: 3 });
  await store.put(["docsother"], "d", { text: "green tea elsewhere", kind: "drink", n: 9 });
  const keys = async (prefix: string[], o: Parameters<MemoryStore["search"]>[1] = {}) => (await store.search(prefix, o)).map((i) => i.key);
  // Newest first without a query; the prefix is label by label ("docs" is not "docsother").
  assert.deepEqual(await keys(["docs"]), ["c", "b", "a"]);
  assert.deepEqual(await keys(["docs", "x"]), ["a"]);
  assert.deepEqual(await keys(["docs"], { filter: { kind: "drink" } }), ["b", "a"]);
  assert.deepEqual(await keys(["docs"], { filter: { n: { $gt: 1 } } }), ["c", "b"]);
  assert.deepEqual(await keys(["docs"], { filter: { n: { $gte: 1, $lt: 3 } } }), ["b", "a"]);
  assert.deepEqual(await keys(["docs"], { filter: { kind: { $ne: "drink" } } }), ["c"]);
  assert.deepEqual(await keys(["docs"], { filter: { n: { $in: [1, 3] } } }), ["c", "a"]);
  assert.deepEqual(await keys(["docs"], { filter: { "meta.lang": "fr" } }), ["b"]);
  assert.deepEqual(await keys(["docs"], { filter: { tags: { $contains: "bitter" } } }), ["b"]);
  assert.deepEqual(await keys(["docs"], { filter: { $or: [{ n: 1 }, { kind: "code" }] } }), ["c", "a"]);
  assert.deepEqual(await keys(["docs"], { filter: { kind: "drink", n: 2 } }), ["b"], "several fields: all must hold");
  assert.deepEqual(await keys(["docs"], { limit: 1 }), ["c"]);
  assert.deepEqual(await keys(["docs"], { limit: 1, offset: 1 }), ["b"]);
  assert.deepEqual(await keys(["docs"], { limit: 2, offset: 2 }), ["a"]);
  assert.deepEqual(await keys(["docs"], { offset: 5 }), []);
  const hits = await store.search(["docs"], { query: "green tea" });
  assert.deepEqual(hits.map((h) => [h.namespace, h.key]), [[["docs", "x"], "a"]]);
  assert.ok(typeof hits[0].score === "number" && hits[0].score > 0);
  assert.equal((await store.search(["docs"]))[0].score, undefined, "no score without a query");
  const all = (await store.search([], { limit: 100 })).map((i) => `${i.namespace.join("/")}:${i.key}`);
  for (const k of ["docs/x:a", "docs:b", "docs/y:c", "docsother:d"]) assert.ok(all.includes(k), `an empty prefix searches everything: ${k}`);
  await assert.rejects(store.search(["docs"], { filter: { n: { $regex: "x" } } }), (e: unknown) => {
    assert.ok(e instanceof BadArgument);
    assert.ok(e.hint);
    return true;
  });
});

test("listNamespaces: prefix, suffix, wildcards, maxDepth, limit and offset", async () => {
  const store = new MemoryStore(pool, { org: "acme" });
  for (const ns of [["ln", "a", "b", "c"], ["ln", "a", "b", "d"], ["ln", "a", "e"], ["ln", "f"], ["ln", "f", "v1"], ["ln", "g", "v1"]]) {
    await store.put(ns, "k", { x: 1 });
  }
  const lp = { prefix: ["ln"] };
  assert.deepEqual(await store.listNamespaces(lp), [["ln", "a", "b", "c"], ["ln", "a", "b", "d"], ["ln", "a", "e"], ["ln", "f"], ["ln", "f", "v1"], ["ln", "g", "v1"]]);
  assert.deepEqual(await store.listNamespaces({ prefix: ["ln", "a"] }), [["ln", "a", "b", "c"], ["ln", "a", "b", "d"], ["ln", "a", "e"]]);
  assert.deepEqual(await store.listNamespaces({ prefix: ["ln"], suffix: ["v1"] }), [["ln", "f", "v1"], ["ln", "g", "v1"]]);
  assert.deepEqual(await store.listNamespaces({ prefix: ["ln", "*", "b"] }), [["ln", "a", "b", "c"], ["ln", "a", "b", "d"]]);
  assert.deepEqual(await store.listNamespaces({ prefix: ["ln"], maxDepth: 2 }), [["ln", "a"], ["ln", "f"], ["ln", "g"]]);
  assert.deepEqual(await store.listNamespaces({ prefix: ["ln"], maxDepth: 3, limit: 2, offset: 1 }), [["ln", "a", "e"], ["ln", "f"]]);
  assert.deepEqual(await store.listNamespaces({ prefix: ["nothing"] }), []);
  await store.delete(["ln", "g", "v1"], "k");
  assert.deepEqual(await store.listNamespaces({ suffix: ["v1"] }), [["ln", "f", "v1"]], "a namespace without live items is gone");
});

test("TTL: defaultTtl stamps puts, expired items are gone, the sweeper purges them", async () => {
  const store = fresh({ ttl: { defaultTtl: 60, refreshOnRead: true, sweepIntervalMinutes: 1 } });
  await store.put(["cache"], "a", { text: "x" });
  await store.put(["cache"], "b", { text: "y" });
  const [{ ok }] = await app.sql("SELECT bool_and(expires_at <= now() + interval '60 minutes') AS ok FROM memory.observations WHERE namespace = ARRAY['cache']");
  assert.equal(ok, true, "defaultTtl (minutes) shortens expires_at");
  // refreshOnRead: a get restarts the ttl.
  await app.sql("UPDATE memory.observations SET expires_at = now() + interval '1 minute' WHERE key = 'b' AND namespace = ARRAY['cache']");
  assert.ok(await store.get(["cache"], "b"));
  const [{ later }] = await app.sql("SELECT expires_at > now() + interval '30 minutes' AS later FROM memory.observations WHERE key = 'b' AND namespace = ARRAY['cache']");
  assert.equal(later, true, "the get refreshed b's ttl");
  await app.sql("UPDATE memory.observations SET expires_at = now() - interval '1 second' WHERE key = 'a' AND namespace = ARRAY['cache']");
  assert.equal(await store.get(["cache"], "a"), null);
  assert.deepEqual((await store.search(["cache"])).map((i) => i.key), ["b"]);
  assert.equal(await store.sweepTtl(), 1);
  const [{ n }] = await app.sql("SELECT count(*)::int AS n FROM memory.observations WHERE namespace = ARRAY['cache']");
  assert.equal(n, 1);
  // A put of ttl null has none (beyond retention); the sweeper starts and stops.
  await store.batch([{ namespace: ["cache"], key: "c", value: { text: "z" }, ttl: null } as PutOperation]);
  const [{ c }] = await app.sql("SELECT expires_at > now() + interval '2 hours' OR expires_at IS NULL AS c FROM memory.observations WHERE key = 'c'");
  assert.equal(c, true);
  store.startTtlSweeper();
  store.stop();
});

test("semantic search with an embedder: one vector per item, of its index fields", async (t) => {
  if (!(await vectorAvailable())) return skipOrFail(t, "pgvector is not installed (scripts/pgvector.sh install builds it)");
  const vapp = await freshApp("ts_store_vector", { vector: 3 });
  const vpool = new pg.Pool({ connectionString: vapp.url(WRITER), max: 1 });
  try {
    const emb = new FakeEmbeddings();
    const store = new MemoryStore(vpool, { org: "acme", index: { dims: 3, embeddings: emb, fields: ["text", "tags[*]"] } });
    await store.put(["docs"], "tea", { text: "jasmine tea", tags: ["green"], other: "not embedded" });
    await store.put(["docs"], "code", { text: "rust compiler" });
    await store.put(["docs"], "jazz", { text: "jazz records" });
    await store.put(["docs"], "plain", { text: "coffee" }, false);
    assert.deepEqual(emb.documents, ["jasmine tea\ngreen", "rust compiler", "jazz records"], "one text per item, index fields joined");
    const rows = await vapp.sql("SELECT key, embedding::text AS e FROM memory.observations WHERE namespace = ARRAY['docs'] ORDER BY key");
    assert.deepEqual(Object.fromEntries(rows.map((r) => [r.key, r.e])),
      { code: "[0.01,2.01,0.01]", jazz: "[0.01,0.01,2.01]", plain: null, tea: "[2.01,0.01,0.01]" });
    const [{ tsv }] = await vapp.sql("SELECT search_tsv::text AS tsv FROM memory.observations WHERE key = 'tea'");
    assert.ok(tsv.includes("jasmin") && !tsv.includes("embed"), "the index fields are the searchable text");
    // No word in common: the vector decides.
    assert.equal((await store.search(["docs"], { query: "a hot beverage" }))[0].key, "tea");
    assert.equal((await store.search(["docs"], { query: "write a program" }))[0].key, "code");
    assert.equal((await store.search(["docs"], { query: "some music please", limit: 1 }))[0].key, "jazz");
    assert.deepEqual(emb.queries, ["a hot beverage", "write a program", "some music please"]);
    // A put's own index list replaces the configured fields.
    await store.put(["docs"], "tea", { text: "jasmine tea", note: "python" }, ["note"]);
    assert.equal(emb.documents.at(-1), "python");
    const [{ e }] = await vapp.sql("SELECT embedding::text AS e FROM memory.observations WHERE key = 'tea'");
    assert.equal(e, "[0.01,1.01,0.01]", "the put replaced the item's one embedding");
    assert.deepEqual((await store.search(["docs"], { query: "write a program", limit: 2 })).map((i) => i.key).sort(), ["code", "tea"],
      "tea's new embedding is on the code axis");
  } finally {
    await vpool.end();
    await vapp.drop();
  }
});

test("semantic search pages: offset skips the first results of one ranking, limit caps the page", async (t) => {
  // As LangGraph's stores (InMemoryStore sorts every match, then slices). The items' word order
  // (more "tea" first) is the reverse of their vector order (fewer first): a hybrid vector list as
  // long as limit + offset (the bug) ranked each page differently.
  if (!(await vectorAvailable())) return skipOrFail(t, "pgvector is not installed (scripts/pgvector.sh install builds it)");
  const vapp = await freshApp("ts_store_pages", { vector: 3 });
  const vpool = new pg.Pool({ connectionString: vapp.url(WRITER), max: 1 });
  try {
    const embeddings = {
      embedDocuments: async (texts: string[]) => texts.map(teaVector),
      embedQuery: async (text: string) => teaVector(text),
    };
    const index = { dims: 3, embeddings: embeddings as unknown as IndexConfig["embeddings"], fields: ["text"] };
    const store = new MemoryStore(vpool, { org: "acme", index });
    const lgStore = new InMemoryStore({ index });
    for (let i = 0; i < 12; i++) {
      const value = { text: [...Array(i + 1).fill("tea"), ...Array(12 - i).fill("cup")].join(" ") };
      await store.put(["shelf"], `d${String(i).padStart(2, "0")}`, value);
      await lgStore.put(["shelf"], `d${String(i).padStart(2, "0")}`, value);
    }
    const keys = async (s: BaseStore, query: string, limit: number, offset = 0) =>
      (await s.search(["shelf"], { query, limit, offset })).map((i) => i.key);
    for (const query of ["tea", "coffee"]) { // hybrid (every item has the word), vector only (none has it)
      const ranked = await keys(store, query, 20);
      assert.equal(new Set(ranked).size, 12, query);
      for (const limit of [1, 2, 3, 5]) {
        for (let offset = 0; offset < 14; offset++) {
          assert.deepEqual(await keys(store, query, limit, offset), ranked.slice(offset, offset + limit), `${query} ${limit} ${offset}`);
        }
      }
      if (query === "coffee") {
        // No item has the word: the vector alone ranks, as LangGraph's store ranks.
        assert.deepEqual(ranked, await keys(lgStore, query, 20));
        assert.deepEqual(await keys(store, query, 3, 4), await keys(lgStore, query, 3, 4));
      }
    }
  } finally {
    await vpool.end();
    await vapp.drop();
  }
});

/** [1, the text's count of "tea", 0.5]: nearer a one-"tea" query the fewer "tea" a text has. */
function teaVector(text: string): number[] {
  return [1, text.split(/\s+/).filter((w) => w === "tea").length, 0.5];
}

test("userLabel names the end user: consent, erasure and holds reach the store's items", async () => {
  const store = fresh({ userLabel: 1 });
  await store.put(["memories", "u7"], "card", { note: { deep: ["paid with 4111 1111 1111 1111 yesterday"] } });
  await store.put(["memories", "u8"], "prefs", { text: "likes jazz" });
  const rows = await app.sql("SELECT key, user_id, classification::text AS tier FROM memory.observations WHERE namespace[1] = 'memories' ORDER BY key");
  assert.deepEqual(rows.map((r) => [r.key, r.user_id, r.tier]), [["card", "u7", "restricted"], ["prefs", "u8", "internal"]]);
  await app.sql("INSERT INTO memory.legal_holds (org_id, user_id, reason) VALUES ('acme', 'u7', 'litigation')");
  await assert.rejects(store.put(["memories", "u7"], "card", { note: "changed" }), (e: unknown) => e instanceof Held && e.sqlstate === "MX006");
  await app.sql("UPDATE memory.legal_holds SET released_at = now() WHERE user_id = 'u7'");
  const admin = new pg.Client({ connectionString: app.url(ADMIN) });
  await admin.connect();
  try {
    await admin.query("SELECT set_config('memory.org_id', 'acme', false)");
    await admin.query("SELECT memory.erase_subject('u7')");
  } finally {
    await admin.end();
  }
  assert.equal(await store.get(["memories", "u7"], "card"), null);
  assert.ok(await store.get(["memories", "u8"], "prefs"), "another user's item stays");
});

test("one pool shared by two orgs never leaks one; other tenants and readers are refused", async () => {
  await app.sql(`SELECT memory.grant_org('${WRITER}', 'globex')`);
  const one = new pg.Pool({ connectionString: app.url(WRITER), max: 1 });
  try {
    const acme = new MemoryStore(one, { org: "acme" });
    const globex = new MemoryStore(one, { org: "globex" });
    await Promise.all([acme.put(["tenant"], "k", { text: "acme's" }), globex.put(["tenant"], "k", { text: "globex's" })]);
    const [a, g] = await Promise.all([acme.get(["tenant"], "k"), globex.get(["tenant"], "k")]);
    assert.deepEqual([a?.value, g?.value], [{ text: "acme's" }, { text: "globex's" }]);
    assert.deepEqual((await globex.search(["tenant"])).map((i) => i.value.text), ["globex's"]);
    assert.deepEqual(await globex.listNamespaces(), [["tenant"]]);
    const c = await one.connect();
    try {
      const { rows } = await c.query("SELECT coalesce(current_setting('memory.org_id', true), '') AS org");
      assert.deepEqual(rows, [{ org: "" }], "SET LOCAL: nothing of the last call's org is left on the pooled connection");
    } finally {
      c.release();
    }
  } finally {
    await one.end();
  }
  const rows = await app.sql("SELECT org_id, value->>'text' AS t FROM memory.observations WHERE key = 'k' AND namespace = ARRAY['tenant'] ORDER BY 1");
  assert.deepEqual(rows.map((r) => [r.org_id, r.t]), [["acme", "acme's"], ["globex", "globex's"]]);
  for (const role of [GLOBEX, READER]) {
    const p = new pg.Pool({ connectionString: app.url(role), max: 1 });
    try {
      await assert.rejects(new MemoryStore(p, { org: "acme" }).put(["x"], "k", { a: 1 }), NotAllowed);
    } finally {
      await p.end();
    }
  }
  const rp = new pg.Pool({ connectionString: app.url(READER), max: 1 });
  try {
    assert.deepEqual((await new MemoryStore(rp, { org: "acme" }).get(["tenant"], "k"))?.value, { text: "acme's" }, "a reader reads");
  } finally {
    await rp.end();
  }
});

test("setup checks the extension and creates nothing", async () => {
  const [{ n: before }] = await app.sql("SELECT count(*)::int AS n FROM pg_class");
  await fresh().setup();
  const [{ n: after }] = await app.sql("SELECT count(*)::int AS n FROM pg_class");
  assert.equal(after, before);
  assert.throws(() => new MemoryStore(pool, { org: "" }), TypeError);
  assert.throws(() => new MemoryStore(pool, { org: "acme", userLabel: -1 }), TypeError);
});
