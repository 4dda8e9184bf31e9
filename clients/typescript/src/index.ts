/** @memory-ext/client: memory_ext's agent API and items as typed calls on node-postgres. The
 * LangGraph.js store is `@memory-ext/client/langgraph`. */
export * from "./errors.js";
export * from "./client.js";
export { Tx, tenantSql, type Db, type Query, type Row } from "./tx.js";
