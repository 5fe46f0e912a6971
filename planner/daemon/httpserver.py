"""The API server's connection limits, on top of uvicorn's HTTP protocol.

A flood of idle connections (sockets that connect, say nothing, and reconnect when closed) must
not keep ``/healthz`` or an authenticated client from being served. A connection is *pending*
until it has delivered a whole request; only a request can carry a token, so pending connections
are the unauthenticated ones, and it is their time that the limits shorten:

* **normal**: while fewer than ``max_connections`` are open, and the client address holds fewer
  than ``max_per_peer``, a new connection has ``header_timeout_s`` to deliver its request
  (slowloris: a client that dribbles its headers, or connects and says nothing, is cut);
* **busy**: beyond either limit a new connection is still accepted, but has ``busy_timeout_s``
  (0.5 s) to deliver its request: a probe or a client sends at once and is served, an idle socket
  is closed almost at once (reserved capacity for those who talk, without refusing them);
* **hard cap**: at ``2 x max_connections`` open, the oldest pending connection of the address
  holding the most is closed to make room; with none pending the newcomer gets 503 and is closed;
* **idle time**: uvicorn's keep-alive timeout (``idle_timeout_s``) closes idle connections after
  a request; they are re-armed with the same pre-request timeout as when they came;
* **header size**: a request line and headers over ``max_header_bytes`` (64 KiB) are answered
  431 and the connection closed (httptools sets no limit of its own);
* **shutdown** (SIGTERM): a request whose body is still arriving cannot be served any more; it is
  answered 503 (JSON, ``connection: close``) and closed at once, its handler told the client is
  gone, rather than waited for until uvicorn's graceful timeout cancels it (a 500 and a
  ``CancelledError`` traceback in the log). Requests whose body has arrived are finished.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Optional

from planner.daemon.auth import Limits

_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\nretry-after: 1\r\n"
         b"content-length: %d\r\n\r\n%s")
_BUSY_BODY = (b'{"error": "too many connections", "problems": [{"field": "", "message": "the daemon serves at most its '
              b'--max-connections connections at once", "fix": "retry later, or reuse one keep-alive connection"}]}')
_BIG = (b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\nconnection: close\r\n"
        b"content-length: %d\r\n\r\n%s")
_BIG_BODY = (b'{"error": "request headers too large", "problems": [{"field": "", "message": "the request line and headers '
             b'exceed the limit", "fix": "send shorter headers"}]}')
_STOPPING = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\n"
             b"content-length: %d\r\n\r\n%s")
_STOPPING_BODY = (b'{"error": "the daemon is stopping", "problems": [{"field": "", "message": "the daemon stopped while the request '
                  b'body was still arriving; nothing of it was stored", "fix": "send the request again (to this daemon once it is '
                  b'back, or to the one that takes over)"}]}')


def protocol_class(limits: Limits) -> type:
    """uvicorn's HTTP protocol (httptools when installed, else h11) with the limits above."""
    Base: type
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
        Base = HttpToolsProtocol
    except ImportError:  # pragma: no cover - httptools is optional
        from uvicorn.protocols.http.h11_impl import H11Protocol
        Base = H11Protocol
    counts_head = hasattr(Base, "on_headers_complete")  # httptools (h11 limits its headers itself)
    peers: Counter = Counter()  # open connections per client address (this server's, all on its one event loop)

    class Limited(Base):  # type: ignore[misc, valid-type]
        _rlp_timer: Optional[asyncio.TimerHandle] = None
        _rlp_peer: Optional[str] = None
        _rlp_timeout: float = limits.header_timeout_s
        _rlp_since: float = 0.0
        _rlp_head: int = 0  # bytes of the current request's line and headers so far
        _rlp_tail: bytes = b""  # the last bytes of the chunk before (a blank line may span two reads)
        _rlp_in_body: bool = False
        _rlp_served: bool = False  # has delivered a request's headers (then it is not pending)
        _rlp_ended: bool = False  # a request ended in the chunk being read

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._rlp_peer = self.client[0] if self.client else "-"
            peers[self._rlp_peer] += 1
            self._rlp_since = time.monotonic()
            total = len(self.connections)
            if total > 2 * limits.max_connections and not self._rlp_evict():
                transport.write(_BUSY % (len(_BUSY_BODY), _BUSY_BODY))
                transport.close()
                return
            if total > limits.max_connections or peers[self._rlp_peer] > limits.max_per_peer:
                self._rlp_timeout = min(limits.busy_timeout_s, limits.header_timeout_s)
            self._rlp_arm()

        def _rlp_pending(self) -> bool:
            return not self._rlp_served and self.cycle is None and not self.transport.is_closing()

        def _rlp_evict(self) -> bool:
            """Close the oldest pending connection of the address that holds the most; whether one was."""
            victims = [c for c in self.connections if c is not self and isinstance(c, Limited) and c._rlp_pending()]
            if not victims:
                return False
            top = max(peers[c._rlp_peer] for c in victims)
            victim = min((c for c in victims if peers[c._rlp_peer] == top), key=lambda c: c._rlp_since)
            victim.transport.close()
            return True

        def _rlp_arm(self) -> None:
            if self._rlp_timer is not None:
                self._rlp_timer.cancel()
            self._rlp_timer = self.loop.call_later(self._rlp_timeout, self._rlp_check)

        def _rlp_check(self) -> None:
            self._rlp_timer = None
            if self.transport.is_closing():
                return
            c = self.cycle
            # no request since the timer was armed (none yet, or the last one answered), or one whose body has not all arrived
            if c is None or c.response_complete or getattr(c, "more_body", False):
                self.transport.close()

        def data_received(self, data: bytes) -> None:
            self._rlp_ended = False
            if counts_head and not self._rlp_in_body and not self.transport.is_closing():
                # the request line and headers so far: the earlier chunks, and this one up to the blank
                # line that ends them (a read holds up to 64 KiB: headers that end in the second read
                # are measured there, not only once a whole read stays incomplete)
                seen = self._rlp_tail + data
                end = seen.find(b"\r\n\r\n")
                head = self._rlp_head + (end + 4 - len(self._rlp_tail) if end >= 0 else len(data))
                if head > limits.max_header_bytes:
                    self.transport.write(_BIG % (len(_BIG_BODY), _BIG_BODY))
                    self.transport.close()
                    return
            super().data_received(data)
            # bytes of a request whose headers are still incomplete after this chunk (a chunk that ended a
            # request or began a body is not counted: its header part is bounded by the chunk)
            if counts_head and not self._rlp_in_body and not self._rlp_ended and not self.transport.is_closing():
                self._rlp_head += len(data)
                self._rlp_tail = data[-3:]
            else:
                self._rlp_tail = b""

        def send_400_response(self, msg: str) -> None:
            """A request the HTTP parser refuses (``Content-Length: -1``, a broken request line): the
            API's JSON error, not uvicorn's plain text."""
            import json

            body = json.dumps({"error": "invalid HTTP request", "problems": [{
                "field": "", "message": str(msg)[:200], "fix": "send a well-formed HTTP/1.1 request (request line, headers, a "
                                                               "non-negative Content-Length)"}]}).encode()
            self.transport.write(b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\nconnection: close\r\n"
                                 b"content-length: %d\r\n\r\n%s" % (len(body), body))
            self.transport.close()

        def on_headers_complete(self) -> None:
            self._rlp_in_body, self._rlp_served = True, True
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            self._rlp_in_body, self._rlp_head, self._rlp_ended, self._rlp_tail = False, 0, True, b""
            super().on_message_complete()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._rlp_arm()

        def shutdown(self) -> None:
            """Graceful shutdown: a request still receiving its body is answered 503 and closed now (above)."""
            c = self.cycle
            if c is not None and not c.response_started and not c.response_complete and getattr(c, "more_body", False) \
                    and not self.transport.is_closing():
                self.transport.write(_STOPPING % (len(_STOPPING_BODY), _STOPPING_BODY))
                c.disconnected = True  # the handler's next receive() says the client is gone; its send() does nothing
                c.message_event.set()
                self.transport.close()
                return
            super().shutdown()

        def connection_lost(self, exc) -> None:
            if self._rlp_timer is not None:
                self._rlp_timer.cancel()
                self._rlp_timer = None
            if self._rlp_peer is not None:
                peers[self._rlp_peer] -= 1
                if peers[self._rlp_peer] <= 0:
                    del peers[self._rlp_peer]
                self._rlp_peer = None
            super().connection_lost(exc)

    return Limited
