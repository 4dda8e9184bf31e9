"""LangGraph stores over memory_ext's items (SPEC §16): `MemoryStore` (sync) and
`AsyncMemoryStore` (async) are `BaseStore`s whose every op is one call of memory.get, memory.put,
memory.delete, memory.search or memory.list_namespaces, a batch in one transaction sent as one
pipeline (SET LOCAL, the calls, one Sync: one round trip, `_tx._implicit`; a batch of more than
READS_PER_TX reads in several), acting for one org set with SET LOCAL. Items are memories: classified,
stamped, audited, held, forgotten and erased by the database; this module holds no rule of its own.

Where it differs from LangGraph's PostgresStore: scores are hybrid relevance × weight (memory.search);
an item has one embedding (of its index fields' text joined), not one per field; a put of a held
item raises memory_ext.Held; `setup()` creates nothing (the schema is the extension's)."""
from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any, cast

import psycopg
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from langgraph.store.base.batch import AsyncBatchedBaseStore
from langgraph.store.base import (BaseStore, GetOp, IndexConfig, Item, ListNamespacesOp, Op, PutOp, Result, SearchItem, SearchOp,
                                  TTLConfig, ensure_embeddings, get_text_at_path, tokenize_path)

try:  # langgraph >= 1.1: what LangGraph's own stores check of every op's labels
    from langgraph.store.base import validate_op_namespace
except ImportError:  # pragma: no cover (older langgraph: the SQL's 22023 answers instead)
    def validate_op_namespace(op: Op) -> None:
        return None

from ._tx import AsyncConn, AsyncTx, SyncConn, SyncTx
from .errors import MemoryError

__all__ = ["MemoryStore", "AsyncMemoryStore"]

MIN_VERSION = (0, 4, 0)

GET = ("SELECT key, namespace, value, created_at, updated_at FROM memory.get(%s, %s::text[], %s, %s)")
PUT = "SELECT memory.put(%s, %s::text[], %s, %s, %s::text[], %s::interval, %s::real[], %s)"
DELETE = "SELECT memory.delete(%s, %s::text[], %s)"
SEARCH = ("SELECT key, namespace, value, created_at, updated_at, score "
          "FROM memory.search(%s, %s::text[], %s, %s, %s, %s, %s::real[], %s)")
LIST = "SELECT ns FROM memory.list_namespaces(%s, %s::text[], %s::text[], %s, %s, %s) ns"
VERSION = "SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'memory_ext'"


# Reads (get, search, list_namespaces) per transaction: each audited read holds one of the
# database's 256 read-event places until its transaction ends (53000 past them), so a large batch
# (LangGraph's async stores gather every concurrent call into one) is sent as several transactions.
READS_PER_TX = 16


def _chunks(ops: list[Op], stmts: list[tuple[str, tuple[Any, ...]]]) -> list[list[tuple[str, tuple[Any, ...]]]]:
    """`stmts` (one per op) cut into runs of at most READS_PER_TX reads, in order."""
    out: list[list[tuple[str, tuple[Any, ...]]]] = [[]]
    reads = 0
    for op, st in zip(ops, stmts):
        if not isinstance(op, PutOp):
            if reads == READS_PER_TX:
                out.append([])
                reads = 0
            reads += 1
        out[-1].append(st)
    return out


# The reads take the org as their argument (memory.get, memory.search, memory.list_namespaces
# check it against the role themselves), so a transaction of reads only is sent without the
# tenant's SET LOCAL: one statement, not two (each a separate message the server may wake for).
_READS = (GET, SEARCH, LIST)


def _tenant(org: str | None, chunk: list[tuple[str, tuple[Any, ...]]]) -> str | None:
    """The org to SET LOCAL for `chunk`: none when it is reads only."""
    return None if all(sql in _READS for sql, _ in chunk) else org


def _tokenized(field: str) -> tuple[str, str | list[str]]:
    """A LangGraph index field and what get_text_at_path takes for it: "$" (the whole value, as
    LangGraph's stores embed it) stays "$" (tokenized, it would find nothing)."""
    return field, "$" if field == "$" else tokenize_path(field)


def _json_path(field: str) -> str:
    """A LangGraph index field ("text", "a.b", "tags[*]", "$") as memory.put's JSON path."""
    return field if field.startswith("$") else "$." + field


class _Prepared:
    """The statements of a batch (shared by the sync and async stores): `texts` are the items'
    and queries' texts to embed, filled in by `embedded`."""

    def __init__(self, store: "_Base", ops: Sequence[Op]) -> None:
        self.store, self.ops = store, list(ops)
        # Labels are checked before anything is sent (InvalidNamespaceError, as LangGraph's stores):
        # a bad op fails its batch with nothing written.
        for op in self.ops:
            validate_op_namespace(op)
        self.texts: list[str] = []
        self.queries: list[str] = []
        self.slot: dict[int, tuple[str, int]] = {}
        if store.embeddings is not None:
            for i, op in enumerate(self.ops):
                if isinstance(op, PutOp) and op.value is not None and op.index is not False:
                    text = store.index_text(op)
                    if text:
                        self.slot[i] = ("doc", len(self.texts))
                        self.texts.append(text)
                elif isinstance(op, SearchOp) and op.query:
                    self.slot[i] = ("query", len(self.queries))
                    self.queries.append(op.query)

    def statements(self, docs: list[list[float]], queries: list[list[float]]) -> list[tuple[str, tuple[Any, ...]]]:
        out = []
        for i, op in enumerate(self.ops):
            vec = None
            if i in self.slot:
                kind, n = self.slot[i]
                vec = docs[n] if kind == "doc" else queries[n]
            out.append(self.store.statement(op, vec))
        return out


class _Base:
    """What both stores share: the org, the index and TTL configuration, and each op's statement
    and result."""

    supports_ttl = True

    def __init__(self, *, org: str, index: IndexConfig | None, ttl: TTLConfig | None, user_label: int | None) -> None:
        if not isinstance(org, str) or not org.strip():
            raise ValueError("org must name the org the store acts for")
        if user_label is not None and (not isinstance(user_label, int) or user_label < 0):
            raise ValueError("user_label is the position (0-based) of the namespace label naming the end user")
        self.org, self.user_label = org, user_label
        self.ttl_config = ttl
        self.index_config = dict(index) if index else None
        self.embeddings = None
        self.fields: list[str] = ["$"]
        if self.index_config:
            self.embeddings = ensure_embeddings(self.index_config.get("embed"))
            self.fields = list(self.index_config.get("fields") or ["$"])
        self._tokenized = [_tokenized(f) for f in self.fields]

    def index_text(self, op: PutOp) -> str:
        paths = self._tokenized if op.index is None else [_tokenized(f) for f in op.index]
        texts: list[str] = []
        for _, tok in paths:
            texts.extend(t for t in get_text_at_path(op.value, tok) if t)
        return "\n".join(texts)

    def statement(self, op: Op, vector: list[float] | None) -> tuple[str, tuple[Any, ...]]:
        if isinstance(op, GetOp):
            return GET, (self.org, list(op.namespace), op.key, bool(op.refresh_ttl))
        if isinstance(op, PutOp):
            if op.value is None:
                return DELETE, (self.org, list(op.namespace), op.key)
            if op.index is False:
                index: list[str] | None = []
            elif op.index is None:
                index = [_json_path(f) for f in self.fields] if self.index_config else None
            else:
                index = [_json_path(f) for f in op.index]
            ttl = f"{float(op.ttl) * 60} seconds" if op.ttl is not None else None
            user = None
            if self.user_label is not None and len(op.namespace) > self.user_label:
                user = op.namespace[self.user_label]
            return PUT, (self.org, list(op.namespace), op.key, Jsonb(dict(op.value)), index, ttl, vector, user)
        if isinstance(op, SearchOp):
            return SEARCH, (self.org, list(op.namespace_prefix), op.query, Jsonb(op.filter) if op.filter else None,
                            op.limit, op.offset, vector, bool(op.refresh_ttl))
        if isinstance(op, ListNamespacesOp):
            prefix = suffix = None
            for c in op.match_conditions or ():
                if c.match_type == "prefix":
                    if prefix is not None:
                        raise ValueError("memory.list_namespaces takes one prefix condition")
                    prefix = list(c.path)
                elif c.match_type == "suffix":
                    if suffix is not None:
                        raise ValueError("memory.list_namespaces takes one suffix condition")
                    suffix = list(c.path)
                else:
                    raise ValueError(f"unknown match type {c.match_type!r}")
            return LIST, (self.org, prefix, suffix, op.max_depth, op.limit, op.offset)
        raise ValueError(f"unknown operation {type(op).__name__}")

    @staticmethod
    def result(op: Op, rows: list[dict[str, Any]]) -> Result:
        if isinstance(op, GetOp):
            return None if not rows else Item(value=rows[0]["value"], key=rows[0]["key"], namespace=tuple(rows[0]["namespace"]),
                                              created_at=rows[0]["created_at"], updated_at=rows[0]["updated_at"])
        if isinstance(op, PutOp):
            return None
        if isinstance(op, SearchOp):
            return [SearchItem(namespace=tuple(r["namespace"]), key=r["key"], value=r["value"], created_at=r["created_at"],
                               updated_at=r["updated_at"], score=r["score"]) for r in rows]
        return [tuple(r["ns"]) for r in rows]

    @staticmethod
    def check_version(v: str | None) -> None:
        if v is None:
            raise MemoryError("memory_ext is not installed in this database", sqlstate="55000",
                              hint="A superuser runs CREATE EXTENSION memory_ext; the store creates no schema of its own.")
        try:
            have = tuple(int(x) for x in v.split(".")[:3])
        except ValueError:
            have = (0,)
        if have < MIN_VERSION:
            raise MemoryError(f"memory_ext {v} is installed; the store needs {'.'.join(map(str, MIN_VERSION))} or later",
                              sqlstate="55000", hint="ALTER EXTENSION memory_ext UPDATE")

    def ttl_sweep_interval(self, minutes: int | None) -> float:
        m = minutes if minutes is not None else (self.ttl_config or {}).get("sweep_interval_minutes") or 5
        return float(m) * 60


class MemoryStore(_Base, BaseStore):
    """A LangGraph store on memory_ext's items. `conn`: a psycopg Connection (shared under a lock)
    or a ConnectionPool; `org`: the org every op acts for; `index`: LangGraph's IndexConfig (dims,
    embed, fields); `ttl`: LangGraph's TTLConfig (default_ttl minutes, refresh_on_read,
    sweep_interval_minutes); `user_label`: the namespace label position naming the end user."""

    def __init__(self, conn: SyncConn, *, org: str, index: IndexConfig | None = None, ttl: TTLConfig | None = None,
                 user_label: int | None = None) -> None:
        _Base.__init__(self, org=org, index=index, ttl=ttl, user_label=user_label)
        self._tx = SyncTx(conn)
        self._sweeper: threading.Thread | None = None
        self._stop = threading.Event()

    @classmethod
    @contextmanager
    def from_conn_string(cls, conn_string: str, *, org: str, index: IndexConfig | None = None, ttl: TTLConfig | None = None,
                         user_label: int | None = None, pool_config: dict[str, Any] | None = None) -> Iterator["MemoryStore"]:
        """A store on a new connection (or, with pool_config, a ConnectionPool: min_size, max_size,
        kwargs), closed when the block ends."""
        if pool_config is not None:
            cfg = dict(pool_config)
            kwargs = {"autocommit": True, **cfg.pop("kwargs", {})}
            with ConnectionPool(conn_string, min_size=cfg.pop("min_size", 1), max_size=cfg.pop("max_size", None),
                                kwargs=kwargs, open=True, **cfg) as pool:
                yield cls(pool, org=org, index=index, ttl=ttl, user_label=user_label)
        else:
            with psycopg.Connection.connect(conn_string, autocommit=True) as c:
                yield cls(c, org=org, index=index, ttl=ttl, user_label=user_label)

    def setup(self) -> None:
        """Checks that memory_ext is installed at a version with items; creates nothing."""
        with self._tx.cursor(None) as cur:
            row = cur.execute(VERSION).fetchone()
        self.check_version(row["extversion"] if row else None)

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        prep = _Prepared(self, list(ops))
        if not prep.ops:
            return []
        docs = self.embeddings.embed_documents(prep.texts) if (self.embeddings is not None and prep.texts) else []
        queries = [self.embeddings.embed_query(q) for q in prep.queries] if self.embeddings is not None else []
        stmts = prep.statements(docs, queries)
        rows = [r for chunk in _chunks(prep.ops, stmts) for r in self._tx.run(_tenant(self.org, chunk), chunk)]
        return [self.result(op, r) for op, r in zip(prep.ops, rows)]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await asyncio.get_running_loop().run_in_executor(None, self.batch, list(ops))

    def sweep_ttl(self) -> int:
        """Deletes the org's items past their ttl (memory.purge_expired); how many."""
        with self._tx.cursor(self.org) as cur:
            return int(cur.execute("SELECT memory.purge_expired(%s) AS n", (self.org,)).fetchone()["n"])

    def start_ttl_sweeper(self, sweep_interval_minutes: int | None = None) -> concurrent.futures.Future[None]:
        """Calls memory.purge_expired every sweep_interval_minutes (TTLConfig's, else 5) in a thread."""
        fut: concurrent.futures.Future[None] = concurrent.futures.Future()
        if self._sweeper is not None and self._sweeper.is_alive():
            fut.set_result(None)
            return fut
        interval = self.ttl_sweep_interval(sweep_interval_minutes)
        self._stop.clear()

        def loop() -> None:
            try:
                while not self._stop.wait(interval):
                    self.sweep_ttl()
            finally:
                fut.set_result(None)

        self._sweeper = threading.Thread(target=loop, name="memory_ext-ttl-sweeper", daemon=True)
        self._sweeper.start()
        return fut

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        if self._sweeper is None:
            return True
        self._stop.set()
        self._sweeper.join(timeout)
        stopped = not self._sweeper.is_alive()
        if stopped:
            self._sweeper = None
        return stopped


class AsyncMemoryStore(_Base, AsyncBatchedBaseStore):
    """MemoryStore for an AsyncConnection or AsyncConnectionPool. As LangGraph's async stores,
    concurrent calls (aget, aput, asearch, ...) are queued and run together, one abatch (one
    transaction) at a time: an error fails the calls batched with it."""

    def __init__(self, conn: AsyncConn, *, org: str, index: IndexConfig | None = None, ttl: TTLConfig | None = None,
                 user_label: int | None = None) -> None:
        _Base.__init__(self, org=org, index=index, ttl=ttl, user_label=user_label)
        AsyncBatchedBaseStore.__init__(self)
        self._tx = AsyncTx(conn)
        self.loop = self._loop
        self._sweeper: asyncio.Task[None] | None = None

    @classmethod
    @asynccontextmanager
    async def from_conn_string(cls, conn_string: str, *, org: str, index: IndexConfig | None = None, ttl: TTLConfig | None = None,
                               user_label: int | None = None, pool_config: dict[str, Any] | None = None) -> AsyncIterator["AsyncMemoryStore"]:
        if pool_config is not None:
            cfg = dict(pool_config)
            kwargs = {"autocommit": True, **cfg.pop("kwargs", {})}
            async with AsyncConnectionPool(conn_string, min_size=cfg.pop("min_size", 1), max_size=cfg.pop("max_size", None),
                                           kwargs=kwargs, open=False, **cfg) as pool:
                yield cls(pool, org=org, index=index, ttl=ttl, user_label=user_label)
        else:
            async with await psycopg.AsyncConnection.connect(conn_string, autocommit=True) as c:
                yield cls(c, org=org, index=index, ttl=ttl, user_label=user_label)

    async def setup(self) -> None:
        async with self._tx.cursor(None) as cur:
            await cur.execute(VERSION)
            row = await cur.fetchone()
        self.check_version(row["extversion"] if row else None)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        prep = _Prepared(self, list(ops))
        if not prep.ops:
            return []
        docs = await self.embeddings.aembed_documents(prep.texts) if (self.embeddings is not None and prep.texts) else []
        queries = [await self.embeddings.aembed_query(q) for q in prep.queries] if self.embeddings is not None else []
        stmts = prep.statements(docs, queries)
        rows = []
        for chunk in _chunks(prep.ops, stmts):
            rows.extend(await self._tx.run(_tenant(self.org, chunk), chunk))
        return [self.result(op, r) for op, r in zip(prep.ops, rows)]

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """From another thread than the store's event loop (as LangGraph's async stores)."""
        try:
            if asyncio.get_running_loop() is self.loop:
                raise asyncio.InvalidStateError("Synchronous calls to AsyncMemoryStore are made from another thread; "
                                                "in the event loop, await abatch (aget, aput, ...)")
        except RuntimeError:
            pass
        return asyncio.run_coroutine_threadsafe(self.abatch(ops), self.loop).result()

    async def sweep_ttl(self) -> int:
        async with self._tx.cursor(self.org) as cur:
            await cur.execute("SELECT memory.purge_expired(%s) AS n", (self.org,))
            return int(cast(dict, await cur.fetchone())["n"])

    async def start_ttl_sweeper(self, sweep_interval_minutes: int | None = None) -> asyncio.Task[None]:
        if self._sweeper is not None and not self._sweeper.done():
            return self._sweeper
        interval = self.ttl_sweep_interval(sweep_interval_minutes)

        async def loop() -> None:
            while True:
                await asyncio.sleep(interval)
                await self.sweep_ttl()

        self._sweeper = asyncio.create_task(loop())
        return self._sweeper

    async def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        if self._sweeper is None:
            return True
        self._sweeper.cancel()
        try:
            await asyncio.wait_for(asyncio.shield(self._sweeper), timeout)
        except (asyncio.CancelledError, asyncio.TimeoutError):
            pass
        done = self._sweeper.done()
        if done:
            self._sweeper = None
        return done


