"""Independent verifier for memory_ext's hash-chained audit log (standard library only).

Every row of memory.audit_log carries
    entry_hash = HMAC-SHA256(key[key_id], JCS(event))
where JCS is RFC 8785 and `event` is the JSON object of the row's fields:
    chain_id, seq, prev_hash (lowercase hex), event_type,
    recorded_at (UTC "YYYY-MM-DDTHH:MM:SS.ffffffZ", always 6 fractional digits),
    actor_id, org_id, project_id, workspace_id (string or null), key_id, payload.
A chain starts at seq 1 with prev_hash = 32 zero bytes; every later prev_hash is the previous
entry_hash. memory.audit_heads records the last (seq, entry_hash) of each chain, which exposes
a truncated tail. Payloads are read as text and parsed with floats as IEEE doubles, as the
extension does. Chains with sealed-and-pruned ranges are not handled here (they show as a gap).

Usage (needs a role that can read memory.audit_keys, i.e. the extension owner / superuser):
    python verify_chain.py "host=... dbname=... user=postgres" acme
"""
import hashlib
import hmac
import json
import sys

ZERO_HASH = bytes(32)
_SHORT = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _es_number(x: float) -> str:
    """ECMAScript Number.prototype.toString of a finite double (RFC 8785 §3.2.2.3)."""
    if x != x or x in (float("inf"), float("-inf")):
        raise ValueError("NaN and Infinity are not JSON")
    if x == 0:
        return "0"  # also -0.0
    sign = "-" if x < 0 else ""
    mantissa, _, exp = repr(abs(x)).partition("e")  # repr: shortest digits that round-trip
    whole, _, frac = mantissa.partition(".")
    digits, shift = (whole + frac).lstrip("0"), int(exp or 0) - len(frac)
    stripped = digits.rstrip("0")
    shift += len(digits) - len(stripped)
    digits = stripped  # value = int(digits) * 10**shift
    k, n = len(digits), len(digits) + shift  # ES: value = 0.d1d2..dk * 10**n
    if k <= n <= 21:
        out = digits + "0" * (n - k)
    elif 0 < n <= 21:
        out = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        out = "0." + "0" * -n + digits
    else:
        e = n - 1
        out = digits[0] + ("." + digits[1:] if k > 1 else "") + ("e+" if e >= 0 else "e-") + str(abs(e))
    return sign + out


def _jcs_str(s: str) -> str:
    return '"' + "".join(_SHORT.get(c) or (f"\\u{ord(c):04x}" if c < " " else c) for c in s) + '"'


def _jcs(v) -> str:
    if v is None or isinstance(v, bool):
        return {None: "null", True: "true", False: "false"}[v]
    if isinstance(v, int):  # JSON numbers are doubles: exact decimals only up to 2**53
        return str(v) if abs(v) <= 2**53 else _es_number(float(v))
    if isinstance(v, float):
        return _es_number(v)
    if isinstance(v, str):
        return _jcs_str(v)
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_jcs(x) for x in v) + "]"
    if isinstance(v, dict):  # members ordered by UTF-16 code units
        keys = sorted(v, key=lambda k: k.encode("utf-16-be", "surrogatepass"))
        return "{" + ",".join(_jcs_str(k) + ":" + _jcs(v[k]) for k in keys) + "}"
    raise TypeError(f"not a JSON value: {type(v).__name__}")


def jcs(value) -> bytes:
    """RFC 8785 canonical form of a JSON value, as UTF-8 bytes."""
    return _jcs(value).encode("utf-8")


def event_of(row: dict) -> dict:
    """The hashed event object of a row (payload as JSON text or already parsed)."""
    payload = row["payload"]
    if isinstance(payload, (str, bytes)):
        payload = json.loads(payload, parse_float=float)
    event = {k: row[k] for k in ("chain_id", "seq", "event_type", "recorded_at", "actor_id",
                                 "org_id", "project_id", "workspace_id", "key_id")}
    event["prev_hash"] = bytes(row["prev_hash"]).hex()
    event["payload"] = payload
    return event


def event_hash(key: bytes, row: dict) -> bytes:
    """HMAC-SHA256(key, JCS(event)): what the row's entry_hash must be."""
    return hmac.new(bytes(key), jcs(event_of(row)), hashlib.sha256).digest()


def verify(rows, keys: dict, head=None):
    """Check one chain's rows in seq order. head: (seq, entry_hash) from memory.audit_heads.

    Returns (ok, first_bad_seq, reason). Checks per row, in the extension's order: seq
    continuity ("gap" / "reorder"), "unknown key", "hash mismatch" (prev_hash is hashed, so an
    edited link shows here too), "broken link" (a self-consistent row chained elsewhere). Then
    the head: a head beyond the last row is "tail missing".
    """
    last_seq, last_hash = 0, ZERO_HASH
    for row in rows:
        seq = row["seq"]
        if seq > last_seq + 1:
            return False, last_seq + 1, "gap"
        if seq <= last_seq:
            return False, seq, "reorder"
        if row["key_id"] not in keys:
            return False, seq, "unknown key"
        computed = event_hash(keys[row["key_id"]], row)
        if not hmac.compare_digest(computed, bytes(row["entry_hash"])):
            return False, seq, "hash mismatch"
        if bytes(row["prev_hash"]) != last_hash:
            return False, seq, "broken link"
        last_seq, last_hash = seq, computed
    if head is not None:
        head_seq, head_hash = head
        if head_seq > last_seq:
            return False, last_seq + 1, "tail missing"
        if head_seq < last_seq:
            return False, head_seq + 1, "broken link"  # entries beyond the recorded head
        if bytes(head_hash) != last_hash:
            return False, head_seq, "hash mismatch"  # head differs from the last entry
    return True, None, None


ROWS_SQL = """
SELECT chain_id, seq, event_type,
       to_char(recorded_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS recorded_at,
       actor_id, org_id, project_id, workspace_id, key_id, payload::text AS payload, prev_hash, entry_hash
  FROM memory.audit_log WHERE chain_id = %s ORDER BY seq"""


def load(conn, chain_id):
    """(rows, keys, head) of one chain through a DB-API connection (psycopg 3 here)."""
    cur = conn.cursor()
    keys = {k: bytes(v) for k, v in cur.execute("SELECT key_id, key FROM memory.audit_keys")}
    cur.execute(ROWS_SQL, (chain_id,))
    names = [d[0] for d in cur.description]
    rows = [dict(zip(names, r)) for r in cur.fetchall()]
    head = cur.execute("SELECT seq, entry_hash FROM memory.audit_heads WHERE chain_id = %s", (chain_id,)).fetchone()
    return rows, keys, (head[0], bytes(head[1])) if head else None


def main(argv):
    if len(argv) != 3:
        sys.exit(f"usage: {argv[0]} DSN CHAIN_ID")
    import psycopg  # the only non-stdlib piece: reading the rows

    with psycopg.connect(argv[1]) as conn:
        rows, keys, head = load(conn, argv[2])
    ok, bad, reason = verify(rows, keys, head)
    print(f"chain {argv[2]!r}: {len(rows)} entries, " + ("ok" if ok else f"FAILED at seq {bad}: {reason}"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
