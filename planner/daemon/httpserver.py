"""The API server's connection limits, on top of uvicorn's HTTP protocol.

* **connections**: at most ``max_connections`` open at once; the next is answered 503 and closed at
  once (uvicorn's own ``limit_concurrency`` answers 503 but keeps the socket open);
* **header/body time**: from connecting, or from the previous answer on a keep-alive connection,
  a whole request (headers and body) must arrive within ``header_timeout_s`` (slowloris: a
  client that dribbles its headers, or connects and says nothing, is cut);
* **idle time**: uvicorn's keep-alive timeout (``idle_timeout_s``) closes idle connections.
"""

from __future__ import annotations

import asyncio
from typing import Optional

from planner.daemon.auth import Limits

_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\nretry-after: 1\r\n"
         b"content-length: %d\r\n\r\n%s")
_BUSY_BODY = (b'{"error": "too many connections", "problems": [{"field": "", "message": "the daemon serves at most its '
              b'--max-connections connections at once", "fix": "retry later, or reuse one keep-alive connection"}]}')


def protocol_class(limits: Limits) -> type:
    """uvicorn's HTTP protocol (httptools when installed, else h11) with the limits above."""
    Base: type
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
        Base = HttpToolsProtocol
    except ImportError:  # pragma: no cover - httptools is optional
        from uvicorn.protocols.http.h11_impl import H11Protocol
        Base = H11Protocol

    class Limited(Base):  # type: ignore[misc, valid-type]
        _rlp_timer: Optional[asyncio.TimerHandle] = None

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            if len(self.connections) > limits.max_connections:
                transport.write(_BUSY % (len(_BUSY_BODY), _BUSY_BODY))
                transport.close()
                return
            self._rlp_arm()

        def _rlp_arm(self) -> None:
            if self._rlp_timer is not None:
                self._rlp_timer.cancel()
            self._rlp_timer = self.loop.call_later(limits.header_timeout_s, self._rlp_check)

        def _rlp_check(self) -> None:
            self._rlp_timer = None
            if self.transport.is_closing():
                return
            c = self.cycle
            # no request since the timer was armed (none yet, or the last one answered), or one whose body has not all arrived
            if c is None or c.response_complete or getattr(c, "more_body", False):
                self.transport.close()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._rlp_arm()

        def connection_lost(self, exc) -> None:
            if self._rlp_timer is not None:
                self._rlp_timer.cancel()
                self._rlp_timer = None
            super().connection_lost(exc)

    return Limited
