"""memory_ext's agent API as typed calls (SPEC §12, §16): remember, recall, forget, retrieve,
record_outcome and audit_verify, sync (Memory) and async (AsyncMemory) over the same statements.
Each call is one transaction acting for the client's org (SET LOCAL); database errors are raised
as memory_ext.MemoryError subclasses."""
from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from psycopg.types.json import Jsonb

from ._tx import AsyncConn, AsyncTx, SyncConn, SyncTx

T = TypeVar("T")


@dataclass(frozen=True)
class Remembered:
    id: uuid.UUID
    classification: str
    created_at: dt.datetime
    expires_at: dt.datetime | None


@dataclass(frozen=True)
class Recalled:
    id: uuid.UUID
    content: str
    classification: str
    weight: float
    score: float | None
    created_at: dt.datetime
    user_id: str | None
    session_id: str | None
    memory_type: str
    lexical_rank: int | None
    vector_rank: int | None


@dataclass(frozen=True)
class Forgotten:
    forgotten: list[str]
    held: list[str]
    not_found: list[str]
    # What was made from the forgotten memories (their lineage) and went with them.
    derived_forgotten: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Retrieved:
    id: uuid.UUID
    entity: uuid.UUID
    claim_text: str
    field: str | None
    kind: str | None
    source: str | None
    supports: Any
    subject_id: str | None
    confidence_score: float | None
    classification: str
    score: float | None
    t_created: dt.datetime
    decay_at: dt.datetime | None
    stale_fields: list[str] | None
    lexical_rank: int | None
    vector_rank: int | None


@dataclass(frozen=True)
class Outcome:
    observation_id: uuid.UUID
    previous_weight: float | None
    new_weight: float | None
    alpha: float | None
    applied: bool
    reason: str


@dataclass(frozen=True)
class ChainCheck:
    chain_id: str
    entries: int
    ok: bool
    first_bad_seq: int | None
    reason: str | None
    pruned: int
    pending: int


def _rows(cls: type[T], rows: Sequence[dict[str, Any]]) -> list[T]:
    names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
    return [cls(**{n: (str(r[n]) if n in ("classification", "memory_type") and r[n] is not None else r[n]) for n in names}) for r in rows]


# The statements, shared by Memory and AsyncMemory.
REMEMBER = ("INSERT INTO memory.observations (org_id, content, user_id, session_id, task_id, project_id, memory_type, metadata, source_type, derived_from) "
            "VALUES (%(org)s, %(content)s, %(user_id)s, %(session_id)s, %(task_id)s, %(project_id)s, "
            "coalesce(%(memory_type)s::memory.memory_type, 'long_term'), %(metadata)s, %(source_type)s::memory.source_type, "
            "%(derived_from)s::uuid[]) "
            "RETURNING id, classification::text AS classification, created_at, expires_at")
RECALL = ("SELECT id, content, classification::text AS classification, weight, score, created_at, user_id, session_id, "
          "memory_type::text AS memory_type, lexical_rank, vector_rank "
          "FROM memory.recall(%(org)s, %(query)s, %(k)s, %(project_id)s, %(filters)s, %(query_embedding)s::real[])")
# Only the client's org: memory.forget(ids) forgets an id in any org the role may act for (a role
# bound to several orgs, one client per org), so ids the role reads in this org (hot or archived)
# are forgotten and every other id is not_found.
FORGET = ("WITH w AS (SELECT w.u, w.n FROM pg_catalog.unnest(%(ids)s::uuid[]) WITH ORDINALITY w(u, n)), "
          "mine AS (SELECT w.u FROM w WHERE EXISTS (SELECT FROM memory.observations o WHERE o.id = w.u AND o.org_id = %(org)s) "
          "OR EXISTS (SELECT FROM memory.observations_archive a WHERE a.id = w.u AND a.org_id = %(org)s)), "
          "f AS (SELECT memory.forget(ARRAY(SELECT mine.u FROM mine), %(reason)s) AS r) "
          "SELECT f.r || pg_catalog.jsonb_build_object('not_found', (f.r -> 'not_found') || coalesce("
          "(SELECT pg_catalog.jsonb_agg(w.u ORDER BY w.n) FROM w WHERE w.u NOT IN (SELECT mine.u FROM mine)), '[]')) AS r FROM f")
RETRIEVE = ("SELECT id, entity, claim_text, field, kind::text AS kind, source, supports, subject_id, confidence_score, "
            "classification::text AS classification, score, t_created, decay_at, stale_fields, lexical_rank, vector_rank "
            "FROM memory.retrieve(%(org)s, %(query)s, %(k)s, %(entity_id)s::uuid, %(screen_profile)s, %(user_id)s, "
            "%(query_embedding)s::real[], coalesce(%(at)s::timestamptz, now()))")
RECORD_OUTCOME = "SELECT * FROM memory.record_outcome(%s, %s::memory.outcome, %s::uuid[])"
AUDIT_VERIFY = "SELECT * FROM memory.audit_verify(%s)"


def _remember_args(org: str, content: str, kw: dict[str, Any]) -> dict[str, Any]:
    return {"org": org, "content": content, "user_id": kw.get("user_id"), "session_id": kw.get("session_id"),
            "task_id": kw.get("task_id"), "project_id": kw.get("project_id"), "memory_type": kw.get("memory_type"),
            "metadata": Jsonb(kw.get("metadata") or {}), "source_type": kw.get("source_type"),
            "derived_from": [str(i) for i in kw["derived_from"]] if kw.get("derived_from") is not None else None}


def _recall_args(org: str, query: str, k: int, project_id: str | None, filters: dict[str, Any] | None,
                 query_embedding: Sequence[float] | None) -> dict[str, Any]:
    return {"org": org, "query": query, "k": k, "project_id": project_id, "filters": Jsonb(filters or {}),
            "query_embedding": list(query_embedding) if query_embedding is not None else None}


def _retrieve_args(org: str, query: str, k: int, entity_id: Any, screen_profile: str | None, user_id: str | None,
                   query_embedding: Sequence[float] | None, at: dt.datetime | None) -> dict[str, Any]:
    return {"org": org, "query": query, "k": k, "entity_id": entity_id, "screen_profile": screen_profile, "user_id": user_id,
            "query_embedding": list(query_embedding) if query_embedding is not None else None, "at": at}


class Memory:
    """The agent API for one org. `conn`: a psycopg Connection (shared under a lock) or a
    ConnectionPool; `actor`: the application's actor id for the audit trail (memory.actor_id)."""

    def __init__(self, conn: SyncConn, *, org: str, actor: str | None = None) -> None:
        self.org, self.actor, self._tx = org, actor, SyncTx(conn)

    def _all(self, sql: str, args: Any) -> list[dict[str, Any]]:
        with self._tx.cursor(self.org, self.actor) as cur:
            cur.execute(sql, args)
            return cur.fetchall()

    def remember(self, content: str, **kw: Any) -> Remembered:
        """INSERT a memory (classified, stamped and audited by the database). Keywords: user_id,
        session_id, task_id, project_id, memory_type, metadata, source_type, derived_from (the ids of
        the memories it was made from: its tier, trust and retention follow theirs)."""
        return _rows(Remembered, self._all(REMEMBER, _remember_args(self.org, content, kw)))[0]

    def recall(self, query: str, k: int = 10, *, project_id: str | None = None, filters: dict[str, Any] | None = None,
               query_embedding: Sequence[float] | None = None) -> list[Recalled]:
        return _rows(Recalled, self._all(RECALL, _recall_args(self.org, query, k, project_id, filters, query_embedding)))

    def forget(self, ids: Sequence[uuid.UUID | str], reason: str) -> Forgotten:
        r = self._all(FORGET, {"ids": [str(i) for i in ids], "reason": reason, "org": self.org})[0]["r"]
        return Forgotten(r["forgotten"], r["held"], r["not_found"], r.get("derived_forgotten", []))

    def retrieve(self, query: str, k: int = 10, *, entity_id: uuid.UUID | str | None = None, screen_profile: str | None = None,
                 user_id: str | None = None, query_embedding: Sequence[float] | None = None, at: dt.datetime | None = None) -> list[Retrieved]:
        return _rows(Retrieved, self._all(RETRIEVE, _retrieve_args(self.org, query, k, entity_id, screen_profile, user_id, query_embedding, at)))

    def record_outcome(self, session_id: str, outcome: str, observation_ids: Sequence[uuid.UUID | str]) -> list[Outcome]:
        return _rows(Outcome, self._all(RECORD_OUTCOME, (session_id, outcome, [str(i) for i in observation_ids])))

    def audit_verify(self, chain_id: str | None = None) -> list[ChainCheck]:
        return _rows(ChainCheck, self._all(AUDIT_VERIFY, (chain_id,)))


class AsyncMemory:
    """Memory's calls for an AsyncConnection or AsyncConnectionPool."""

    def __init__(self, conn: AsyncConn, *, org: str, actor: str | None = None) -> None:
        self.org, self.actor, self._tx = org, actor, AsyncTx(conn)

    async def _all(self, sql: str, args: Any) -> list[dict[str, Any]]:
        async with self._tx.cursor(self.org, self.actor) as cur:
            await cur.execute(sql, args)
            return await cur.fetchall()

    async def remember(self, content: str, **kw: Any) -> Remembered:
        return _rows(Remembered, await self._all(REMEMBER, _remember_args(self.org, content, kw)))[0]

    async def recall(self, query: str, k: int = 10, *, project_id: str | None = None, filters: dict[str, Any] | None = None,
                     query_embedding: Sequence[float] | None = None) -> list[Recalled]:
        return _rows(Recalled, await self._all(RECALL, _recall_args(self.org, query, k, project_id, filters, query_embedding)))

    async def forget(self, ids: Sequence[uuid.UUID | str], reason: str) -> Forgotten:
        r = (await self._all(FORGET, {"ids": [str(i) for i in ids], "reason": reason, "org": self.org}))[0]["r"]
        return Forgotten(r["forgotten"], r["held"], r["not_found"], r.get("derived_forgotten", []))

    async def retrieve(self, query: str, k: int = 10, *, entity_id: uuid.UUID | str | None = None, screen_profile: str | None = None,
                       user_id: str | None = None, query_embedding: Sequence[float] | None = None,
                       at: dt.datetime | None = None) -> list[Retrieved]:
        return _rows(Retrieved, await self._all(RETRIEVE, _retrieve_args(self.org, query, k, entity_id, screen_profile, user_id, query_embedding, at)))

    async def record_outcome(self, session_id: str, outcome: str, observation_ids: Sequence[uuid.UUID | str]) -> list[Outcome]:
        return _rows(Outcome, await self._all(RECORD_OUTCOME, (session_id, outcome, [str(i) for i in observation_ids])))

    async def audit_verify(self, chain_id: str | None = None) -> list[ChainCheck]:
        return _rows(ChainCheck, await self._all(AUDIT_VERIFY, (chain_id,)))
