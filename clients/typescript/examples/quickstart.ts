// A LangGraph.js agent whose memory is memory_ext: one line, `store: new MemoryStore(...)`, and
// every item it writes is classified, audited, retained and erasable. Also the typed client.
// Run: MEMORY_URL=postgresql://agent@host/db node examples/quickstart.js
// (`agent`: a memory_writer bound to org acme with memory.grant_org; docs/typescript.md).
import { Annotation, END, START, StateGraph, getStore } from "@langchain/langgraph";
import pg from "pg";

import { BadArgument, Memory } from "@memory-ext/client";
import { MemoryStore } from "@memory-ext/client/langgraph";

const pool = new pg.Pool({ connectionString: process.env.MEMORY_URL });

// The typed client: the agent API and items, each call one transaction acting for the org.
const memory = new Memory(pool, { org: "acme", actor: "quickstart" });
const r = await memory.remember("dana prefers morning meetings", { userId: "dana" });
console.log("remembered", r.classification, (await memory.recall("morning meetings")).length);
try {
  await memory.recall("meetings", { k: 0 });
} catch (e) {
  if (!(e instanceof BadArgument)) throw e;
  console.log("refused", e.sqlstate, e.hint !== null);
}

// The LangGraph store: namespace position 1 names the end user (consent, export, erasure).
const store = new MemoryStore(pool, { org: "acme", userLabel: 1 });
await store.setup();

const State = Annotation.Root({
  user: Annotation<string>,
  text: Annotation<string>,
  seen: Annotation<string>,
});

const graph = new StateGraph(State)
  .addNode("remember", async (state, config) => {
    await config.store!.put(["memories", state.user], "last", { text: state.text });
    return {};
  })
  .addNode("recall", async (state) => {
    const item = await getStore()!.get(["memories", state.user], "last");
    return { seen: item ? String(item.value.text) : "" };
  })
  .addEdge(START, "remember")
  .addEdge("remember", "recall")
  .addEdge("recall", END)
  .compile({ store });

const out = await graph.invoke({ user: "dana", text: "card 4111 1111 1111 1111 expires soon", seen: "" });
console.log("seen", out.seen);
console.log("namespaces", JSON.stringify(await store.listNamespaces({ prefix: ["memories"] })));
await pool.end();
