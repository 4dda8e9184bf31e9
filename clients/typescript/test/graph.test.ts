/** A compiled LangGraph.js StateGraph whose nodes read and write through the store (config.store
 * and getStore()), and the runnable example of docs/typescript.md (examples/quickstart.ts). */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import { Annotation, END, START, StateGraph, getStore } from "@langchain/langgraph";
import pg from "pg";

import { MemoryStore } from "@memory-ext/client/langgraph";
import { WRITER, freshApp, type App } from "./cluster.js";

let app: App;

before(async () => {
  app = await freshApp("ts_graph");
});
after(async () => {
  await app.drop();
});

test("a compiled StateGraph reads and writes through the store", async () => {
  const State = Annotation.Root({ user: Annotation<string>, text: Annotation<string>, seen: Annotation<string>, found: Annotation<number> });
  const graph = new StateGraph(State)
    .addNode("remember", async (s, config) => {
      await config.store!.put(["memories", s.user], "last", { text: s.text });
      return {};
    })
    .addNode("recall", async (s) => {
      const store = getStore()!;
      const item = await store.get(["memories", s.user], "last");
      const found = await store.search(["memories"], { query: s.text.split(" ")[1] });
      return { seen: item ? String(item.value.text) : "", found: found.length };
    })
    .addEdge(START, "remember")
    .addEdge("remember", "recall")
    .addEdge("recall", END);
  const pool = new pg.Pool({ connectionString: app.url(WRITER), max: 2 });
  try {
    const compiled = graph.compile({ store: new MemoryStore(pool, { org: "acme", userLabel: 1 }) });
    const out = await compiled.invoke({ user: "u5", text: "likes jazz", seen: "", found: 0 });
    assert.equal(out.seen, "likes jazz");
    assert.equal(out.found, 1);
  } finally {
    await pool.end();
  }
  const rows = await app.sql("SELECT user_id, classification::text AS tier FROM memory.observations WHERE key = 'last'");
  assert.deepEqual(rows.map((r) => [r.user_id, r.tier]), [["u5", "internal"]]);
  await app.sql("SELECT memory.audit_integrate()");
  const [{ n }] = await app.sql("SELECT count(*)::int AS n FROM memory.audit_log WHERE chain_id = 'acme' AND event_type = 'memory.store'");
  assert.equal(n, 1, "the graph's put is audited");
});

test("the example of docs/typescript.md runs as written", async (t) => {
  const here = dirname(fileURLToPath(import.meta.url));
  const source = await readFile(join(here, "..", "..", "examples", "quickstart.ts"), "utf8");
  const doc = await readFile(join(here, "..", "..", "..", "..", "docs", "typescript.md"), "utf8");
  assert.ok(doc.includes("```ts\n" + source + "```"), "docs/typescript.md shows examples/quickstart.ts as it is");
  const ex = await freshApp("ts_example");
  t.after(() => ex.drop());
  const { stdout } = await promisify(execFile)(process.execPath, [join(here, "..", "examples", "quickstart.js")], {
    env: { ...process.env, MEMORY_URL: ex.url(WRITER) },
  });
  assert.deepEqual(stdout.trim().split("\n"), [
    "remembered internal 1",
    "refused 22023 true",
    "seen card 4111 1111 1111 1111 expires soon",
    'namespaces [["memories","dana"]]',
  ]);
  const rows = await ex.sql("SELECT user_id, classification::text AS tier FROM memory.observations WHERE namespace = ARRAY['memories', 'dana']");
  assert.deepEqual(rows.map((r) => [r.user_id, r.tier]), [["dana", "restricted"]], "the example's item is classified over its value");
});
