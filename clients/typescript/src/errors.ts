/**
 * Database errors of memory_ext as JavaScript errors: each carries the SQLSTATE, message, detail
 * and hint the server sent (docs/reference.md, "Errors"), the same classes as the Python package's.
 */

export interface MemoryErrorFields {
  sqlstate?: string | null;
  detail?: string | null;
  hint?: string | null;
  cause?: unknown;
}

/** An error memory_ext (or PostgreSQL) raised for a call. */
export class MemoryError extends Error {
  readonly sqlstate: string | null;
  readonly detail: string | null;
  readonly hint: string | null;

  constructor(message: string, fields: MemoryErrorFields = {}) {
    super(message, fields.cause === undefined ? undefined : { cause: fields.cause });
    this.name = new.target.name;
    this.sqlstate = fields.sqlstate ?? null;
    this.detail = fields.detail ?? null;
    this.hint = fields.hint ?? null;
  }

  override toString(): string {
    const text = this.sqlstate ? `${this.sqlstate}: ${this.message}` : this.message;
    return this.hint ? `${text} (hint: ${this.hint})` : text;
  }
}

/** MX001: a lifecycle transition the state machine refuses. */
export class InvalidTransition extends MemoryError {}
/** MX002: a write to the audit log other than append. */
export class AuditAppendOnly extends MemoryError {}
/** MX003: the user's consent is not in force. */
export class ConsentRequired extends MemoryError {}
/** MX004: a classification downgrade outside memory.reclassify. */
export class DowngradeRefused extends MemoryError {}
/** MX005: a supersession the rules refuse. */
export class SupersessionRefused extends MemoryError {}
/** MX006: a legal hold blocks the write or deletion. */
export class Held extends MemoryError {}
/** MX007: a user context value a detector refused. */
export class SensitiveInput extends MemoryError {}
/** 22023: an argument memory_ext refuses (the hint says what it takes). */
export class BadArgument extends MemoryError {}
/** 23503 / P0002: a referenced memory, entity or claim does not exist. */
export class NotFound extends MemoryError {}
/** 42501: the role may not do this, or may not act for this org. */
export class NotAllowed extends MemoryError {}

export const BY_SQLSTATE: Readonly<Record<string, typeof MemoryError>> = {
  MX001: InvalidTransition,
  MX002: AuditAppendOnly,
  MX003: ConsentRequired,
  MX004: DowngradeRefused,
  MX005: SupersessionRefused,
  MX006: Held,
  MX007: SensitiveInput,
  "22023": BadArgument,
  "23503": NotFound,
  P0002: NotFound,
  "42501": NotAllowed,
};

/** The MemoryError subclass for an error of node-postgres (a DatabaseError has `code`, `detail`,
 * `hint`); any other error (a lost connection, a bug) is returned as it is. */
export function fromPg(e: unknown): unknown {
  if (e instanceof MemoryError || !(e instanceof Error)) return e;
  const db = e as Error & { code?: unknown; detail?: unknown; hint?: unknown; severity?: unknown };
  if (typeof db.code !== "string" || typeof db.severity !== "string") return e;
  const cls = BY_SQLSTATE[db.code] ?? MemoryError;
  return new cls(e.message, {
    sqlstate: db.code,
    detail: typeof db.detail === "string" ? db.detail : null,
    hint: typeof db.hint === "string" ? db.hint : null,
    cause: e,
  });
}
