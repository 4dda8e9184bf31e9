/**
 * A LangGraph.js store over memory_ext's items (SPEC §16): `MemoryStore` is a `BaseStore` whose
 * every operation is one call of memory.get, memory.put, memory.delete, memory.search or
 * memory.list_namespaces, a batch in one transaction acting for one org (SET LOCAL). Items are
 * memories: classified, stamped, audited, held, forgotten and erased by the database; this module
 * holds no rule of its own. It behaves as the Python package's `memory_ext.langgraph.MemoryStore`;
 * where they differ from LangGraph's InMemoryStore, docs/typescript.md lists it.
 */
import {
  BaseStore,
  type GetOperation,
  type Item,
  type ListNamespacesOperation,
  type Operation,
  type OperationResults,
  type PutOperation,
  type SearchItem,
  type SearchOperation,
} from "@langchain/langgraph-checkpoint";

import { SQL, interval, json } from "./client.js";
import { MemoryError } from "./errors.js";
import { Tx, type Db, type Row } from "./tx.js";

/** The first release with items. */
export const MIN_VERSION: readonly [number, number, number] = [0, 4, 0];

/** What the store needs of a LangChain `Embeddings` (any object with these two methods). */
export interface EmbeddingsLike {
  embedDocuments(texts: string[]): Promise<number[][]>;
  embedQuery(text: string): Promise<number[]>;
}

/** LangGraph's IndexConfig: `dims` (the database's embedding dimensions, memory.enable_embeddings),
 * `embeddings`, and `fields` (paths whose text is embedded and searchable; default `["$"]`, the
 * whole value). */
export interface IndexConfig {
  dims: number;
  embeddings: EmbeddingsLike;
  fields?: string[];
}

/** The TTL configuration (LangGraph Python's TTLConfig): `defaultTtl` minutes for every put,
 * `refreshOnRead` (default true) restarts an item's ttl on get and search, `sweepIntervalMinutes`
 * (default 5) for `startTtlSweeper`. */
export interface TTLConfig {
  defaultTtl?: number | null;
  refreshOnRead?: boolean;
  sweepIntervalMinutes?: number | null;
}

export interface MemoryStoreOptions {
  /** The org every operation acts for. */
  org: string;
  index?: IndexConfig | null;
  ttl?: TTLConfig | null;
  /** The position (0-based) of the namespace label naming the end user (`["memories", userId]` →
   * 1), stored as the item's user_id so consent, export and erasure reach the user's items. */
  userLabel?: number | null;
}

/** A put as the store takes it: LangGraph's PutOperation, with an optional `ttl` in minutes
 * (null: none; absent: the store's defaultTtl). */
export type MemoryPutOperation = PutOperation & { ttl?: number | null };
/** A get or search with an optional `refreshTtl` (absent: the store's refreshOnRead). */
export type RefreshOption = { refreshTtl?: boolean };

type Kind = "get" | "put" | "search" | "list";

function kindOf(op: Operation): Kind {
  if ("namespacePrefix" in op) return "search";
  if ("value" in op) return "put";
  if ("key" in op && "namespace" in op) return "get";
  if ("limit" in op || "matchConditions" in op || "maxDepth" in op || "offset" in op) return "list";
  throw new TypeError(`unknown operation ${JSON.stringify(Object.keys(op as object))}`);
}

/** A LangGraph index field ("text", "a.b", "tags[*]", "$") as memory.put's JSON path. */
export function jsonPath(field: string): string {
  return field.startsWith("$") ? field : `$.${field}`;
}

/** A field path's tokens: names, `[n]`, `[*]`, `*`. */
export function tokenizePath(path: string): string[] {
  const tokens: string[] = [];
  for (const m of path.matchAll(/\[[^\]]*\]|[^.[\]]+/g)) tokens.push(m[0]);
  return tokens;
}

const leafText = (v: unknown): string[] =>
  typeof v === "string" || typeof v === "number" || typeof v === "boolean" ? [String(v)]
    : v !== null && typeof v === "object" ? [JSON.stringify(v)] : [];

/** The texts at `path` in `value` (LangGraph's getTextAtPath): `$` is the whole value as JSON. */
export function textsAt(value: unknown, path: string): string[] {
  if (!path || path === "$") return [JSON.stringify(value)];
  const tokens = tokenizePath(path.startsWith("$.") ? path.slice(2) : path);
  const walk = (v: unknown, i: number): string[] => {
    if (i >= tokens.length) return leafText(v);
    const t = tokens[i];
    if (t.startsWith("[")) {
      if (!Array.isArray(v)) return [];
      const ix = t.slice(1, -1);
      if (ix === "*") return v.flatMap((x) => walk(x, i + 1));
      let n = Number.parseInt(ix, 10);
      if (Number.isNaN(n)) return [];
      if (n < 0) n += v.length;
      return n >= 0 && n < v.length ? walk(v[n], i + 1) : [];
    }
    if (t === "*") {
      if (Array.isArray(v)) return v.flatMap((x) => walk(x, i + 1));
      return v !== null && typeof v === "object" ? Object.values(v).flatMap((x) => walk(x, i + 1)) : [];
    }
    return v !== null && typeof v === "object" && !Array.isArray(v) && t in v ? walk((v as Record<string, unknown>)[t], i + 1) : [];
  };
  return walk(value, 0);
}

/** A LangGraph store on memory_ext's items, acting for one org. `db`: a `pg.Pool` (each batch on a
 * pooled connection) or a connected `pg.Client` (batches serialised). */
export class MemoryStore extends BaseStore {
  readonly org: string;
  readonly userLabel: number | null;
  readonly indexConfig: IndexConfig | null;
  readonly ttlConfig: TTLConfig | null;
  private readonly fields: string[];
  private readonly tx: Tx;
  private sweeper: ReturnType<typeof setInterval> | null = null;

  constructor(db: Db, options: MemoryStoreOptions) {
    super();
    const { org, index = null, ttl = null, userLabel = null } = options ?? ({} as MemoryStoreOptions);
    if (typeof org !== "string" || !org.trim()) throw new TypeError("org must name the org the store acts for");
    if (userLabel !== null && (!Number.isInteger(userLabel) || userLabel < 0)) {
      throw new TypeError("userLabel is the position (0-based) of the namespace label naming the end user");
    }
    if (index && (typeof index.embeddings?.embedDocuments !== "function" || typeof index.embeddings?.embedQuery !== "function")) {
      throw new TypeError("index.embeddings must have embedDocuments and embedQuery (a LangChain Embeddings)");
    }
    this.org = org;
    this.userLabel = userLabel;
    this.indexConfig = index;
    this.ttlConfig = ttl;
    this.fields = index?.fields?.length ? [...index.fields] : ["$"];
    this.tx = new Tx(db);
  }

  /** Checks that memory_ext is installed at a version with items; creates nothing (the schema is
   * the extension's). */
  async setup(): Promise<void> {
    const rows = await this.tx.run(null, null, (q) => q("SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'memory_ext'"));
    const v: string | undefined = rows[0]?.extversion;
    if (v === undefined) {
      throw new MemoryError("memory_ext is not installed in this database", {
        sqlstate: "55000", hint: "A superuser runs CREATE EXTENSION memory_ext; the store creates no schema of its own." });
    }
    const have = v.split(".").slice(0, 3).map((x) => Number.parseInt(x, 10) || 0);
    for (let i = 0; i < 3; i++) {
      if ((have[i] ?? 0) > MIN_VERSION[i]) return;
      if ((have[i] ?? 0) < MIN_VERSION[i]) {
        throw new MemoryError(`memory_ext ${v} is installed; the store needs ${MIN_VERSION.join(".")} or later`, {
          sqlstate: "55000", hint: "ALTER EXTENSION memory_ext UPDATE" });
      }
    }
  }

  /** The searchable and embedded text of a put: its index fields' texts joined by newlines. */
  indexText(op: PutOperation): string {
    const fields = Array.isArray(op.index) ? op.index : this.fields;
    return fields.flatMap((f) => textsAt(op.value, f)).filter((t) => t).join("\n");
  }

  private refresh(op: RefreshOption): boolean {
    return op.refreshTtl ?? (this.ttlConfig ? this.ttlConfig.refreshOnRead ?? true : false);
  }

  private statement(op: Operation, kind: Kind, vector: number[] | null): [string, unknown[]] {
    switch (kind) {
      case "get": {
        const g = op as GetOperation & RefreshOption;
        return [SQL.get, [this.org, g.namespace, g.key, this.refresh(g)]];
      }
      case "put": {
        const p = op as MemoryPutOperation;
        if (p.value === null) return [SQL.delete, [this.org, p.namespace, p.key]];
        const index = p.index === false ? [] : Array.isArray(p.index) ? p.index.map(jsonPath)
          : this.indexConfig ? this.fields.map(jsonPath) : null;
        const minutes = p.ttl !== undefined ? p.ttl : this.ttlConfig?.defaultTtl ?? null;
        const user = this.userLabel !== null && p.namespace.length > this.userLabel ? p.namespace[this.userLabel] : null;
        return [SQL.put, [this.org, p.namespace, p.key, json(p.value), index, interval(minutes == null ? null : minutes * 60), vector, user]];
      }
      case "search": {
        const s = op as SearchOperation & RefreshOption;
        return [SQL.search, [this.org, s.namespacePrefix, s.query ?? null, json(s.filter && Object.keys(s.filter).length ? s.filter : null),
          s.limit ?? 10, s.offset ?? 0, vector, this.refresh(s)]];
      }
      case "list": {
        const l = op as ListNamespacesOperation;
        let prefix: string[] | null = null;
        let suffix: string[] | null = null;
        for (const c of l.matchConditions ?? []) {
          if (c.matchType === "prefix") {
            if (prefix !== null) throw new TypeError("memory.list_namespaces takes one prefix condition");
            prefix = [...c.path];
          } else if (c.matchType === "suffix") {
            if (suffix !== null) throw new TypeError("memory.list_namespaces takes one suffix condition");
            suffix = [...c.path];
          } else {
            throw new TypeError(`unknown match type ${JSON.stringify((c as { matchType: unknown }).matchType)}`);
          }
        }
        return [SQL.listNamespaces, [this.org, prefix, suffix, l.maxDepth ?? null, l.limit ?? 100, l.offset ?? 0]];
      }
    }
  }

  private static result(kind: Kind, rows: Row[]): Item | null | SearchItem[] | string[][] | undefined {
    const item = (r: Row): Item => ({ value: r.value, key: r.key, namespace: r.namespace, createdAt: r.created_at, updatedAt: r.updated_at });
    switch (kind) {
      case "get":
        return rows.length ? item(rows[0]) : null;
      case "put":
        return undefined;
      case "search":
        return rows.map((r) => ({ ...item(r), score: r.score ?? undefined }));
      case "list":
        return rows.map((r) => r.ns as string[]);
    }
  }

  /** The operations in one transaction, in the caller's order (a put is seen by a later get of
   * the same batch); results in that order. Texts are embedded before the transaction. */
  async batch<Op extends Operation[]>(operations: Op): Promise<OperationResults<Op>> {
    const ops = [...operations];
    if (!ops.length) return [] as unknown as OperationResults<Op>;
    const kinds = ops.map(kindOf);
    const vectors: (number[] | null)[] = ops.map(() => null);
    const emb = this.indexConfig?.embeddings;
    if (emb) {
      const docs: [number, string][] = [];
      const queries = new Map<string, number[]>();
      ops.forEach((op, i) => {
        if (kinds[i] === "put") {
          const p = op as PutOperation;
          if (p.value !== null && p.index !== false) {
            const text = this.indexText(p);
            if (text) docs.push([i, text]);
          }
        } else if (kinds[i] === "search" && (op as SearchOperation).query) {
          queries.set((op as SearchOperation).query as string, []);
        }
      });
      if (docs.length) {
        const vs = await emb.embedDocuments(docs.map(([, t]) => t));
        if (vs.length !== docs.length) throw new Error(`embedDocuments returned ${vs.length} vectors for ${docs.length} texts`);
        docs.forEach(([i], n) => { vectors[i] = Array.from(vs[n]); });
      }
      for (const q of queries.keys()) queries.set(q, Array.from(await emb.embedQuery(q)));
      ops.forEach((op, i) => {
        if (kinds[i] === "search" && (op as SearchOperation).query) vectors[i] = queries.get((op as SearchOperation).query as string) ?? null;
      });
    }
    const stmts = ops.map((op, i) => this.statement(op, kinds[i], vectors[i]));
    const rows = await this.tx.run(this.org, null, async (q) => {
      const out: Row[][] = [];
      for (const [text, values] of stmts) out.push(await q(text, values));
      return out;
    });
    return rows.map((r, i) => MemoryStore.result(kinds[i], r)) as unknown as OperationResults<Op>;
  }

  /** Deletes the org's items past their ttl (memory.purge_expired); how many. */
  async sweepTtl(): Promise<number> {
    const [r] = await this.tx.run(this.org, null, (q) => q(SQL.purgeExpired, [this.org]));
    return Number(r.n);
  }

  /** Calls memory.purge_expired every `sweepIntervalMinutes` (the TTLConfig's, else 5) until
   * `stopTtlSweeper` or `stop`; the timer does not keep the process alive. A failed sweep is
   * passed to `onError` (default: ignored until the next one). */
  startTtlSweeper(sweepIntervalMinutes?: number | null, onError: (e: unknown) => void = () => {}): void {
    if (this.sweeper !== null) return;
    const minutes = sweepIntervalMinutes ?? this.ttlConfig?.sweepIntervalMinutes ?? 5;
    this.sweeper = setInterval(() => { this.sweepTtl().catch(onError); }, minutes * 60_000);
    this.sweeper.unref();
  }

  stopTtlSweeper(): void {
    if (this.sweeper !== null) clearInterval(this.sweeper);
    this.sweeper = null;
  }

  override stop(): void {
    this.stopTtlSweeper();
  }
}
