/**
 * memory_ext's agent API (SPEC §12) and its namespaced items (SPEC §16) as typed calls on
 * node-postgres: `Memory` mirrors the Python package's `memory_ext.Memory` (remember, recall,
 * forget, retrieve, recordOutcome, auditVerify) and adds the item calls (put, get, search, delete,
 * listNamespaces, purgeExpired). Each call is one transaction acting for the client's org (SET
 * LOCAL); database errors are thrown as MemoryError subclasses. Every value is a bind parameter.
 */
import { Tx, type Db, type Row } from "./tx.js";

export type Classification = "public" | "internal" | "confidential" | "restricted" | (string & {});
export type JsonObject = { [key: string]: unknown };

export interface Remembered {
  id: string;
  classification: Classification;
  createdAt: Date;
  expiresAt: Date | null;
}

export interface Recalled {
  id: string;
  content: string;
  classification: Classification;
  weight: number;
  score: number | null;
  createdAt: Date;
  userId: string | null;
  sessionId: string | null;
  memoryType: string;
  lexicalRank: number | null;
  vectorRank: number | null;
}

export interface Forgotten {
  forgotten: string[];
  held: string[];
  notFound: string[];
  /** What was made from the forgotten memories (their lineage) and went with them. */
  derivedForgotten: string[];
}

export interface Retrieved {
  id: string;
  entity: string;
  claimText: string;
  field: string | null;
  kind: string | null;
  source: string | null;
  supports: string[] | null;
  subjectId: string | null;
  confidenceScore: number | null;
  classification: Classification;
  score: number | null;
  tCreated: Date;
  decayAt: Date | null;
  staleFields: string[] | null;
  lexicalRank: number | null;
  vectorRank: number | null;
}

export interface Outcome {
  observationId: string;
  previousWeight: number | null;
  newWeight: number | null;
  alpha: number | null;
  applied: boolean;
  reason: string;
}

export interface ChainCheck {
  chainId: string;
  entries: number;
  ok: boolean;
  firstBadSeq: number | null;
  reason: string | null;
  pruned: number;
  pending: number;
}

/** An item as memory.get returns it. */
export interface StoredItem {
  id: string;
  namespace: string[];
  key: string;
  value: JsonObject;
  classification: Classification;
  createdAt: Date;
  updatedAt: Date;
  expiresAt: Date | null;
}

/** An item as memory.search returns it: `score` is hybrid relevance × weight, null without a
 * query or embedding. */
export interface FoundItem extends StoredItem {
  score: number | null;
}

export interface RememberOptions {
  userId?: string | null;
  sessionId?: string | null;
  taskId?: string | null;
  projectId?: string | null;
  memoryType?: string | null;
  metadata?: JsonObject | null;
  sourceType?: string | null;
}

export interface RecallOptions {
  k?: number;
  projectId?: string | null;
  filters?: JsonObject | null;
  queryEmbedding?: readonly number[] | null;
}

export interface RetrieveOptions {
  k?: number;
  entityId?: string | null;
  screenProfile?: string | null;
  userId?: string | null;
  queryEmbedding?: readonly number[] | null;
  at?: Date | null;
}

export interface PutOptions {
  /** JSON paths (`$`, `$.a.b`, `$.tags[*]`) whose text is searchable; null: the whole value; []: none. */
  index?: readonly string[] | null;
  /** Time to live: seconds, or a PostgreSQL interval (`'90 minutes'`); it only shortens retention. */
  ttl?: number | string | null;
  embedding?: readonly number[] | null;
  /** The end user the item is about (consent, export and erasure reach it). */
  userId?: string | null;
}

export interface SearchOptions {
  query?: string | null;
  filter?: JsonObject | null;
  /** How many items (memory.search's `k`), 1 to 1000; default 10. */
  limit?: number;
  offset?: number;
  queryEmbedding?: readonly number[] | null;
  refreshTtl?: boolean;
}

export interface ListNamespacesOptions {
  prefix?: readonly string[] | null;
  suffix?: readonly string[] | null;
  maxDepth?: number | null;
  limit?: number;
  offset?: number;
}

export interface MemoryOptions {
  /** The org every call acts for (memory.org_id). */
  org: string;
  /** The application's actor id for the audit trail (memory.actor_id; stored pseudonymised). */
  actor?: string | null;
}

// The statements (the Python package's, with positional parameters).
export const SQL = {
  remember:
    "INSERT INTO memory.observations (org_id, content, user_id, session_id, task_id, project_id, memory_type, metadata, source_type) " +
    "VALUES ($1, $2, $3, $4, $5, $6, coalesce($7::memory.memory_type, 'long_term'), $8::jsonb, $9::memory.source_type) " +
    "RETURNING id, classification::text AS classification, created_at, expires_at",
  recall:
    "SELECT id, content, classification::text AS classification, weight, score, created_at, user_id, session_id, " +
    "memory_type::text AS memory_type, lexical_rank, vector_rank " +
    "FROM memory.recall($1, $2, $3, $4, $5::jsonb, $6::real[])",
  // Only the client's org: memory.forget(ids) forgets an id in any org the role may act for (a
  // role bound to several orgs, one client per org), so ids the role reads in this org (hot or
  // archived) are forgotten and every other id is not_found.
  forget:
    "WITH w AS (SELECT w.u, w.n FROM pg_catalog.unnest($1::uuid[]) WITH ORDINALITY w(u, n)), " +
    "mine AS (SELECT w.u FROM w WHERE EXISTS (SELECT FROM memory.observations o WHERE o.id = w.u AND o.org_id = $2::text) " +
    "OR EXISTS (SELECT FROM memory.observations_archive a WHERE a.id = w.u AND a.org_id = $2::text)), " +
    "f AS (SELECT memory.forget(ARRAY(SELECT mine.u FROM mine), $3::text) AS r) " +
    "SELECT f.r || pg_catalog.jsonb_build_object('not_found', (f.r -> 'not_found') || coalesce(" +
    "(SELECT pg_catalog.jsonb_agg(w.u ORDER BY w.n) FROM w WHERE w.u NOT IN (SELECT mine.u FROM mine)), '[]')) AS r FROM f",
  retrieve:
    "SELECT id, entity, claim_text, field, kind::text AS kind, source, supports, subject_id, confidence_score, " +
    "classification::text AS classification, score, t_created, decay_at, stale_fields, lexical_rank, vector_rank " +
    "FROM memory.retrieve($1, $2, $3, $4::uuid, $5, $6, $7::real[], coalesce($8::timestamptz, now()))",
  recordOutcome: "SELECT * FROM memory.record_outcome($1, $2::memory.outcome, $3::uuid[])",
  auditVerify: "SELECT * FROM memory.audit_verify($1)",
  put: "SELECT memory.put($1, $2::text[], $3, $4::jsonb, $5::text[], $6::interval, $7::real[], $8) AS id",
  get:
    "SELECT id, namespace, key, value, classification::text AS classification, created_at, updated_at, expires_at " +
    "FROM memory.get($1, $2::text[], $3, $4)",
  search:
    "SELECT id, namespace, key, value, classification::text AS classification, created_at, updated_at, expires_at, score " +
    "FROM memory.search($1, $2::text[], $3, $4::jsonb, $5, $6, $7::real[], $8)",
  delete: "SELECT memory.delete($1, $2::text[], $3) AS deleted",
  listNamespaces: "SELECT ns FROM memory.list_namespaces($1, $2::text[], $3::text[], $4, $5, $6) ns",
  purgeExpired: "SELECT memory.purge_expired($1)::text AS n",
} as const;

/** A jsonb parameter (node-postgres would send a JS array as a PostgreSQL array). */
export const json = (v: unknown): string | null => (v === undefined || v === null ? null : JSON.stringify(v));
const vec = (v: readonly number[] | null | undefined): number[] | null => (v == null ? null : Array.from(v));
const int = (v: unknown): number | null => (v === null || v === undefined ? null : Number(v));
/** A ttl as memory.put's interval: seconds, or an interval's text. */
export const interval = (ttl: number | string | null | undefined): string | null =>
  ttl == null ? null : typeof ttl === "number" ? `${ttl} seconds` : ttl;

export const toStoredItem = (r: Row): StoredItem => ({
  id: r.id,
  namespace: r.namespace,
  key: r.key,
  value: r.value,
  classification: r.classification,
  createdAt: r.created_at,
  updatedAt: r.updated_at,
  expiresAt: r.expires_at,
});

/** The agent API and the items of one org. `db`: a `pg.Pool` (each call on a pooled connection)
 * or a connected `pg.Client` (calls serialised). */
export class Memory {
  readonly org: string;
  readonly actor: string | null;
  private readonly tx: Tx;

  constructor(db: Db, options: MemoryOptions) {
    if (typeof options?.org !== "string" || !options.org.trim()) throw new TypeError("org must name the org the client acts for");
    this.org = options.org;
    this.actor = options.actor ?? null;
    this.tx = new Tx(db);
  }

  private all(text: string, values: unknown[]): Promise<Row[]> {
    return this.tx.run(this.org, this.actor, (q) => q(text, values));
  }

  /** INSERTs a memory (classified, stamped and audited by the database). */
  async remember(content: string, o: RememberOptions = {}): Promise<Remembered> {
    const [r] = await this.all(SQL.remember, [this.org, content, o.userId ?? null, o.sessionId ?? null, o.taskId ?? null,
      o.projectId ?? null, o.memoryType ?? null, json(o.metadata ?? {}), o.sourceType ?? null]);
    return { id: r.id, classification: r.classification, createdAt: r.created_at, expiresAt: r.expires_at };
  }

  /** memory.recall: the top `k` live memories the caller is cleared for. */
  async recall(query: string, o: RecallOptions = {}): Promise<Recalled[]> {
    const rows = await this.all(SQL.recall, [this.org, query, o.k ?? 10, o.projectId ?? null, json(o.filters ?? {}), vec(o.queryEmbedding)]);
    return rows.map((r) => ({
      id: r.id, content: r.content, classification: r.classification, weight: r.weight, score: r.score, createdAt: r.created_at,
      userId: r.user_id, sessionId: r.session_id, memoryType: r.memory_type, lexicalRank: r.lexical_rank, vectorRank: r.vector_rank,
    }));
  }

  /** memory.forget of those of `ids` that are this org's; the others are `notFound`. */
  async forget(ids: readonly string[], reason: string): Promise<Forgotten> {
    const [{ r }] = await this.all(SQL.forget, [Array.from(ids), this.org, reason]);
    return { forgotten: r.forgotten, held: r.held, notFound: r.not_found, derivedForgotten: r.derived_forgotten ?? [] };
  }

  /** memory.retrieve: claims of the knowledge store. */
  async retrieve(query: string, o: RetrieveOptions = {}): Promise<Retrieved[]> {
    const rows = await this.all(SQL.retrieve, [this.org, query, o.k ?? 10, o.entityId ?? null, o.screenProfile ?? null, o.userId ?? null,
      vec(o.queryEmbedding), o.at ?? null]);
    return rows.map((r) => ({
      id: r.id, entity: r.entity, claimText: r.claim_text, field: r.field, kind: r.kind, source: r.source, supports: r.supports,
      subjectId: r.subject_id, confidenceScore: r.confidence_score, classification: r.classification, score: r.score,
      tCreated: r.t_created, decayAt: r.decay_at, staleFields: r.stale_fields, lexicalRank: r.lexical_rank, vectorRank: r.vector_rank,
    }));
  }

  /** memory.record_outcome: feedback on the memories a session used. */
  async recordOutcome(sessionId: string, outcome: string, observationIds: readonly string[]): Promise<Outcome[]> {
    const rows = await this.all(SQL.recordOutcome, [sessionId, outcome, Array.from(observationIds)]);
    return rows.map((r) => ({
      observationId: r.observation_id, previousWeight: r.previous_weight, newWeight: r.new_weight, alpha: r.alpha,
      applied: r.applied, reason: r.reason,
    }));
  }

  /** memory.audit_verify: the audit chains' verification (one chain, or every chain the caller sees). */
  async auditVerify(chainId: string | null = null): Promise<ChainCheck[]> {
    const rows = await this.all(SQL.auditVerify, [chainId]);
    return rows.map((r) => ({
      chainId: r.chain_id, entries: Number(r.entries), ok: r.ok, firstBadSeq: int(r.first_bad_seq), reason: r.reason,
      pruned: Number(r.pruned), pending: Number(r.pending),
    }));
  }

  /** memory.put: creates or replaces the item at (namespace, key); its id. */
  async put(namespace: readonly string[], key: string, value: JsonObject, o: PutOptions = {}): Promise<string> {
    const [r] = await this.all(SQL.put, [this.org, Array.from(namespace), key, json(value), o.index == null ? null : Array.from(o.index),
      interval(o.ttl), vec(o.embedding), o.userId ?? null]);
    return r.id;
  }

  /** memory.get: the live item at (namespace, key) within the caller's clearance, else null. */
  async get(namespace: readonly string[], key: string, o: { refreshTtl?: boolean } = {}): Promise<StoredItem | null> {
    const rows = await this.all(SQL.get, [this.org, Array.from(namespace), key, o.refreshTtl ?? false]);
    return rows.length ? toStoredItem(rows[0]) : null;
  }

  /** memory.search: items under the prefix, by relevance with a query or embedding, else newest first. */
  async search(namespacePrefix: readonly string[], o: SearchOptions = {}): Promise<FoundItem[]> {
    const rows = await this.all(SQL.search, [this.org, Array.from(namespacePrefix), o.query ?? null, json(o.filter), o.limit ?? 10,
      o.offset ?? 0, vec(o.queryEmbedding), o.refreshTtl ?? false]);
    return rows.map((r) => ({ ...toStoredItem(r), score: r.score }));
  }

  /** memory.delete: forgets the item; whether there was one. */
  async delete(namespace: readonly string[], key: string): Promise<boolean> {
    const [r] = await this.all(SQL.delete, [this.org, Array.from(namespace), key]);
    return r.deleted;
  }

  /** memory.list_namespaces: the distinct namespaces of live items, sorted. */
  async listNamespaces(o: ListNamespacesOptions = {}): Promise<string[][]> {
    const rows = await this.all(SQL.listNamespaces, [this.org, o.prefix == null ? null : Array.from(o.prefix),
      o.suffix == null ? null : Array.from(o.suffix), o.maxDepth ?? null, o.limit ?? 100, o.offset ?? 0]);
    return rows.map((r) => r.ns);
  }

  /** memory.purge_expired: deletes the org's items past their ttl (not held); how many. */
  async purgeExpired(): Promise<number> {
    const [r] = await this.all(SQL.purgeExpired, [this.org]);
    return Number(r.n);
  }
}
