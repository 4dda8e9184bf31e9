#!/usr/bin/env python3
"""Offline check of an erasure receipt of memory_ext (docs/audit.md#erasure-receipts), with the
audit key and nothing else: Python's standard library, no database.

    verify_receipt.py RECEIPT.json --key HEX [--ids IDS.txt] [--entry ENTRY.json] [--entry-key HEX]

- signature: HMAC-SHA256(key, JCS(receipt without "signature")) equals "signature";
- ids (with --ids, one id per line, as exported from memory.erasure_receipts or the
  application's own records): SHA-256 of the distinct lowercased ids, sorted bytewise, joined by
  "\\n", equals "ids_sha256", and their number "count";
- event (with --entry, the receipt's memory.forget.receipt row of memory.audit_log as JSON: chain_id,
  seq, prev_hash and entry_hash in hex, event_type, recorded_at as docs/audit.md writes it,
  actor_id, org_id, project_id, workspace_id, key_id, payload): its entry hash recomputes (with
  --entry-key when the entry was signed with another key), it names the receipt's event_id,
  ids_sha256 and count, and matches the receipt's seq and entry_hash when the receipt has them.
  That the entry is in an intact chain is verify_chain.py's check (tests/python/verify_chain.py).

Prints one line per check; exits 0 when all pass, 1 when one fails, 2 on unusable input.
"""
import argparse
import hashlib
import hmac
import json
import math
import sys


def _num(n):
    if isinstance(n, bool):
        return "true" if n else "false"
    if isinstance(n, int):
        if abs(n) <= 2 ** 53:
            return str(n)
        n = float(n)
    if math.isnan(n) or math.isinf(n):
        raise ValueError("JSON has no NaN or Infinity")
    if n == 0:
        return "0"
    if n.is_integer() and abs(n) < 1e21:
        return str(int(n))
    # ECMAScript Number::toString through Python's shortest repr.
    r = repr(n)
    if "e" in r:
        mant, exp = r.split("e")
        exp = int(exp)
        if mant.endswith(".0"):
            mant = mant[:-2]
        if -7 < exp < 21:
            return format(n, "f").rstrip("0").rstrip(".")
        return f"{mant}e{'+' if exp > 0 else '-'}{abs(exp)}"
    return r


def _str(s):
    out = ['"']
    for ch in s:
        c = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch in "\b\f\n\r\t":
            out.append({"\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}[ch])
        elif c < 0x20:
            out.append(f"\\u{c:04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def jcs(v):
    """RFC 8785 canonical form of a JSON value (as Python's json module reads it), as text."""
    if v is None:
        return "null"
    if isinstance(v, bool) or isinstance(v, (int, float)):
        return _num(v)
    if isinstance(v, str):
        return _str(v)
    if isinstance(v, list):
        return "[" + ",".join(jcs(x) for x in v) + "]"
    if isinstance(v, dict):
        keys = sorted(v, key=lambda k: k.encode("utf-16-be"))
        return "{" + ",".join(_str(k) + ":" + jcs(v[k]) for k in keys) + "}"
    raise ValueError(f"not a JSON value: {type(v).__name__}")


def mac(key, value):
    return hmac.new(key, jcs(value).encode("utf-8"), hashlib.sha256).hexdigest()


def ids_sha256(ids):
    return hashlib.sha256("\n".join(sorted({i.lower() for i in ids}, key=lambda s: s.encode())).encode()).hexdigest()


def check(receipt, key, ids=None, entry=None, entry_key=None):
    """[(check, ok, detail)] for a receipt; see the module's docstring."""
    out = []
    unsigned = {k: v for k, v in receipt.items() if k != "signature"}
    ok = hmac.compare_digest(mac(key, unsigned), str(receipt.get("signature", "")))
    out.append(("signature", ok, f"HMAC-SHA256 with audit key {receipt.get('key_id')}"))
    if ids is not None:
        ok = ids_sha256(ids) == receipt.get("ids_sha256") and len({i.lower() for i in ids}) == receipt.get("count")
        out.append(("ids", ok, f"{len(set(i.lower() for i in ids))} ids"))
    if entry is not None:
        event = {k: entry.get(k) for k in ("chain_id", "seq", "prev_hash", "event_type", "recorded_at", "actor_id",
                                            "org_id", "project_id", "workspace_id", "key_id", "payload")}
        payload = entry.get("payload") or {}
        problems = []
        if mac(entry_key or key, event) != entry.get("entry_hash"):
            problems.append("the entry does not hash to its entry_hash")
        if entry.get("event_type") != "memory.forget.receipt" or payload.get("event_id") != receipt.get("event_id"):
            problems.append("the entry is not the receipt's event")
        if payload.get("ids_sha256") != receipt.get("ids_sha256") or payload.get("count") != receipt.get("count"):
            problems.append("the entry records other ids")
        if entry.get("chain_id") != receipt.get("org_id"):
            problems.append("the entry is of another chain")
        if receipt.get("seq") is not None and (receipt["seq"], receipt.get("entry_hash")) != (entry.get("seq"), entry.get("entry_hash")):
            problems.append("the receipt names another seq or entry_hash")
        out.append(("event", not problems, "; ".join(problems) or f"seq {entry.get('seq')}"))
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description="Check a memory_ext erasure receipt offline.")
    p.add_argument("receipt", help="the receipt as JSON ('-' for standard input)")
    p.add_argument("--key", required=True, help="the audit key of the receipt's key_id, in hex")
    p.add_argument("--ids", help="a file of the forgotten ids, one a line")
    p.add_argument("--entry", help="the receipt's audit_log row as JSON")
    p.add_argument("--entry-key", help="the entry's key in hex, when it is not --key")
    a = p.parse_args(argv)
    try:
        text = sys.stdin.read() if a.receipt == "-" else open(a.receipt, encoding="utf-8").read()
        receipt = json.loads(text)
        if not isinstance(receipt, dict):
            raise ValueError("a receipt is a JSON object")
        key = bytes.fromhex(a.key)
        ids = None
        if a.ids:
            ids = [line.strip() for line in open(a.ids, encoding="utf-8") if line.strip()]
        entry = json.load(open(a.entry, encoding="utf-8")) if a.entry else None
        entry_key = bytes.fromhex(a.entry_key) if a.entry_key else None
        results = check(receipt, key, ids, entry, entry_key)
    except (OSError, ValueError) as e:
        print(f"verify_receipt: {e}", file=sys.stderr)
        return 2
    for name, ok, detail in results:
        print(f"{name}: {'ok' if ok else 'FAILED'} ({detail})")
    return 0 if all(ok for _, ok, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
