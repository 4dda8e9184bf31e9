"""One transaction per call, on a psycopg connection or pool, with the tenant set by SET LOCAL
(set_config(..., true)): a pooled connection never carries one org's setting into another's
call."""
from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager, nullcontext
from typing import Any, Union

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from .errors import from_psycopg

SyncConn = Union[psycopg.Connection[Any], ConnectionPool]
AsyncConn = Union[psycopg.AsyncConnection[Any], AsyncConnectionPool]



def tenant_sql(org: str | None, actor: str | None) -> tuple[str, tuple[str, ...]] | None:
    """The statement that sets the call's org and actor for its transaction only, or None."""
    parts, args = [], []
    for name, v in (("memory.org_id", org), ("memory.actor_id", actor)):
        if v is not None:
            parts.append(f"pg_catalog.set_config('{name}', %s, true)")
            args.append(v)
    return ("SELECT " + ", ".join(parts), tuple(args)) if parts else None


class SyncTx:
    """Transactions on `conn` (a Connection, shared under a lock, or a ConnectionPool)."""

    def __init__(self, conn: SyncConn) -> None:
        self.conn = conn
        self.lock = threading.Lock()

    @contextmanager
    def cursor(self, org: str | None, actor: str | None = None) -> Iterator[psycopg.Cursor[dict[str, Any]]]:
        try:
            if isinstance(self.conn, ConnectionPool):
                with self.conn.connection() as c, c.transaction(), c.cursor(row_factory=dict_row) as cur:
                    if (t := tenant_sql(org, actor)) is not None:
                        cur.execute(*t)
                    yield cur
            else:
                with self.lock, self.conn.transaction(), self.conn.cursor(row_factory=dict_row) as cur:
                    if (t := tenant_sql(org, actor)) is not None:
                        cur.execute(*t)
                    yield cur
        except psycopg.Error as e:
            raise from_psycopg(e) from e


    def run(self, org: str | None, stmts: list[tuple[str, tuple[Any, ...]]]) -> list[list[dict[str, Any]]]:
        """`stmts` in one transaction, sent as one pipeline (the tenant's SET LOCAL, the
        statements, one Sync: one round trip, not one per statement; see `_implicit`); each
        one's rows."""
        try:
            if isinstance(self.conn, ConnectionPool):
                with self.conn.connection() as c:
                    return _run_sync(c, org, stmts)
            with self.lock:
                return _run_sync(self.conn, org, stmts)
        except psycopg.Error as e:
            raise from_psycopg(e) from e


def _implicit(c: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """Whether `c` can run a pipeline as one implicit transaction: in autocommit and idle, the
    server runs everything up to the pipeline's Sync as one transaction (committed at the Sync,
    rolled back on any error: PostgreSQL's extended protocol), so BEGIN and COMMIT, each a round
    trip of their own in psycopg's pipeline, are not sent. Otherwise (the caller's transaction
    or a connection not in autocommit): an explicit transaction (a savepoint inside theirs)."""
    return bool(c.autocommit) and c.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def _single(c: psycopg.Connection[Any] | psycopg.AsyncConnection[Any], org: str | None,
            stmts: list[tuple[str, tuple[Any, ...]]]) -> bool:
    """Whether `stmts` is one statement with no tenant setting on a connection that can run it as
    its own implicit transaction (`_implicit`): then it is sent as a plain extended-protocol call
    (Bind, Execute and Sync in one message, one wait), without a pipeline's separate sends."""
    return len(stmts) == 1 and tenant_sql(org, None) is None and _implicit(c)


def _run_sync(c: psycopg.Connection[Any], org: str | None, stmts: list[tuple[str, tuple[Any, ...]]]) -> list[list[dict[str, Any]]]:
    if _single(c, org, stmts):
        cur = c.cursor(row_factory=dict_row)
        cur.execute(*stmts[0])
        return [cur.fetchall() if cur.description else []]
    curs = []
    with c.pipeline(), (nullcontext() if _implicit(c) else c.transaction()):
        if (t := tenant_sql(org, None)) is not None:
            c.execute(*t)
        for sql, args in stmts:
            cur = c.cursor(row_factory=dict_row)
            cur.execute(sql, args)
            curs.append(cur)
    return [cur.fetchall() if cur.description else [] for cur in curs]


async def _run_async(c: psycopg.AsyncConnection[Any], org: str | None,
                     stmts: list[tuple[str, tuple[Any, ...]]]) -> list[list[dict[str, Any]]]:
    if _single(c, org, stmts):
        cur = c.cursor(row_factory=dict_row)
        await cur.execute(*stmts[0])
        return [await cur.fetchall() if cur.description else []]
    curs = []
    async with c.pipeline(), (nullcontext() if _implicit(c) else c.transaction()):
        if (t := tenant_sql(org, None)) is not None:
            await c.execute(*t)
        for sql, args in stmts:
            cur = c.cursor(row_factory=dict_row)
            await cur.execute(sql, args)
            curs.append(cur)
    return [await cur.fetchall() if cur.description else [] for cur in curs]


class AsyncTx:
    """The same for an AsyncConnection or AsyncConnectionPool."""

    def __init__(self, conn: AsyncConn) -> None:
        import asyncio

        self.conn = conn
        self.lock = asyncio.Lock()

    @asynccontextmanager
    async def cursor(self, org: str | None, actor: str | None = None) -> AsyncIterator[psycopg.AsyncCursor[dict[str, Any]]]:
        try:
            if isinstance(self.conn, AsyncConnectionPool):
                async with self.conn.connection() as c, c.transaction(), c.cursor(row_factory=dict_row) as cur:
                    if (t := tenant_sql(org, actor)) is not None:
                        await cur.execute(*t)
                    yield cur
            else:
                async with self.lock, self.conn.transaction(), self.conn.cursor(row_factory=dict_row) as cur:
                    if (t := tenant_sql(org, actor)) is not None:
                        await cur.execute(*t)
                    yield cur
        except psycopg.Error as e:
            raise from_psycopg(e) from e

    async def run(self, org: str | None, stmts: list[tuple[str, tuple[Any, ...]]]) -> list[list[dict[str, Any]]]:
        """SyncTx.run for an AsyncConnection or AsyncConnectionPool."""
        try:
            if isinstance(self.conn, AsyncConnectionPool):
                async with self.conn.connection() as c:
                    return await _run_async(c, org, stmts)
            async with self.lock:
                return await _run_async(self.conn, org, stmts)
        except psycopg.Error as e:
            raise from_psycopg(e) from e
