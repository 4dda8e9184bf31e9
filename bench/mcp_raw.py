"""A small MCP client over streamable HTTP for the benchmarks: what a call costs the server, not what the
Python MCP SDK costs its caller (the SDK spends 1.6-2.4 ms of CPU a call in the client alone, ten times a
psycopg insert; bench/RESULTS.md, issue 51).

It is a correct client of the streamable HTTP transport (MCP 2025-06-18 and 2025-11-25), only without the
SDK's machinery: one kept-alive HTTP/1.1 connection (TCP_NODELAY), the `initialize` handshake and the
`notifications/initialized` notification, the session's `Mcp-Session-Id` and the negotiated
`MCP-Protocol-Version` on every later request, `Accept: application/json, text/event-stream`, JSON-RPC
requests with their own ids, and a response read as either `application/json` or an SSE stream (events
separated by a blank line, `data:` lines joined; priming events without data, and notifications or
requests of the server before the response, are skipped), with a Content-Length or chunked body.
`close()` ends the session (HTTP DELETE).
"""
import json
import socket
import urllib.parse

HANDSHAKE_VERSION = "2025-11-25"


class McpHttpError(Exception):
    def __init__(self, status, body):
        super().__init__(f"HTTP {status}: {body[:300]!r}")
        self.status, self.body = status, body


class RawMcp:
    def __init__(self, url, token=None, client_name="bench", timeout=60):
        u = urllib.parse.urlsplit(url)
        assert u.scheme == "http", "this client speaks plain HTTP (the benchmark's loopback server)"
        self.host, self.port, self.path = u.hostname, u.port or 80, u.path or "/"
        self.authority = u.netloc
        self.token, self.client_name, self.timeout = token, client_name, timeout
        self.sock = None
        self.buf = b""
        self.session = None
        self.version = None
        self.next_id = 0
        self.server_info = None

    # --- HTTP/1.1 over one connection -------------------------------------------------------------

    def _connect(self):
        self.sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def _fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        self.buf += chunk

    def _line(self):
        while (i := self.buf.find(b"\r\n")) < 0:
            self._fill()
        line, self.buf = self.buf[:i], self.buf[i + 2:]
        return line

    def _exactly(self, n):
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def _request(self, method, body=None, extra=()):
        if self.sock is None:
            self._connect()
        head = [f"{method} {self.path} HTTP/1.1", f"Host: {self.authority}",
                "Accept: application/json, text/event-stream"]
        if self.token:
            head.append(f"Authorization: Bearer {self.token}")
        if self.session:
            head.append(f"Mcp-Session-Id: {self.session}")
        if self.version:
            head.append(f"MCP-Protocol-Version: {self.version}")
        head.extend(extra)
        if body is not None:
            head.append("Content-Type: application/json")
        head.append(f"Content-Length: {len(body) if body is not None else 0}")
        self.sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + (body or b""))
        status_line = self._line().decode("latin-1")
        version, status = status_line.split(" ", 2)[:2]
        assert version.startswith("HTTP/1."), status_line
        headers = {}
        while line := self._line():
            k, _, v = line.decode("latin-1").partition(":")
            headers[k.strip().lower()] = v.strip()
        status = int(status)
        if "chunked" in headers.get("transfer-encoding", "").lower():
            body = self._chunked()
        elif "content-length" in headers:
            body = self._exactly(int(headers["content-length"]))
        elif status in (202, 204, 304) or method == "HEAD":
            body = b""
        else:  # delimited by the connection's end
            body = self.buf
            try:
                while chunk := self.sock.recv(65536):
                    body += chunk
            finally:
                self.sock.close()
                self.sock = None
        if headers.get("connection", "").lower() == "close" and self.sock is not None:
            self.sock.close()
            self.sock = None
        return status, headers, body

    def _chunked(self):
        parts = []
        while True:
            size = int(self._line().split(b";", 1)[0].strip(), 16)
            if size == 0:
                while self._line():  # trailers, up to the blank line
                    pass
                return b"".join(parts)
            parts.append(self._exactly(size))
            if self._exactly(2) != b"\r\n":
                raise ValueError("malformed chunked body")

    # --- JSON-RPC over streamable HTTP ------------------------------------------------------------

    @staticmethod
    def _messages(headers, body):
        """The JSON-RPC messages of a response: one JSON body, or the data of each SSE event."""
        kind = headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if kind == "application/json":
            v = json.loads(body)
            return v if isinstance(v, list) else [v]
        if kind == "text/event-stream":
            out = []
            for event in body.decode().replace("\r\n", "\n").replace("\r", "\n").split("\n\n"):
                data = [line[5:].removeprefix(" ") for line in event.split("\n") if line.startswith("data:")]
                if data and "".join(data).strip():
                    out.append(json.loads("\n".join(data)))
            return out
        raise ValueError(f"unexpected response type {kind!r}")

    def request(self, method, params=None):
        """A JSON-RPC request; its result (a JSON-RPC error raises)."""
        self.next_id += 1
        rid = self.next_id
        msg = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        status, headers, body = self._request("POST", json.dumps(msg, separators=(",", ":")).encode())
        if status != 200:
            raise McpHttpError(status, body)
        if method == "initialize" and "mcp-session-id" in headers:
            self.session = headers["mcp-session-id"]
        for m in self._messages(headers, body):
            if m.get("id") == rid and ("result" in m or "error" in m):
                if "error" in m:
                    raise RuntimeError(f"{method}: JSON-RPC error {m['error']}")
                return m["result"]
        raise ValueError(f"{method}: no response with id {rid} in the reply")

    def notify(self, method, params=None):
        msg = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        status, _, body = self._request("POST", json.dumps(msg, separators=(",", ":")).encode())
        if status not in (200, 202):
            raise McpHttpError(status, body)

    def initialize(self):
        r = self.request("initialize", {"protocolVersion": HANDSHAKE_VERSION, "capabilities": {},
                                        "clientInfo": {"name": self.client_name, "version": "1"}})
        self.version = r["protocolVersion"]
        self.server_info = r.get("serverInfo")
        self.notify("notifications/initialized")
        return r

    def call_tool(self, name, arguments):
        """tools/call: the CallToolResult (content, structuredContent, isError)."""
        return self.request("tools/call", {"name": name, "arguments": arguments})

    def ping(self):
        return self.request("ping")

    def close(self):
        if self.sock is not None and self.session:
            try:
                self._request("DELETE")
            except OSError:
                pass
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def __enter__(self):
        self.initialize()
        return self

    def __exit__(self, *exc):
        self.close()
