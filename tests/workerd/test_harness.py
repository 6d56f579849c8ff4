"""The harness sends again only what `wrangler dev` dropped (its 503 "Your worker
restarted mid-request", cloudflare/workers-sdk#14641), and only when the body can be sent
again: every other answer reaches the test as it came."""

from __future__ import annotations

import http.server
from collections.abc import Iterator

import httpx
import pytest

from tests.loopback import loopback_server
from tests.workerd.harness import DEV_PROXY_DROPPED, AsyncDevProxyRetry, DevProxyRetry


class Flaky(http.server.BaseHTTPRequestHandler):
    """Answers POST /drop with the dev proxy's 503 every other time (the first too), POST /busy with
    another 503 always, and anything else with 200 and the body it got."""

    protocol_version = "HTTP/1.1"
    bodies: list[tuple[str, bytes]] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else self._chunked()
        self.bodies.append((self.path, body))
        drops = sum(1 for path, _ in self.bodies if path == "/drop")
        if self.path == "/drop" and drops % 2 == 1:
            self._answer(503, DEV_PROXY_DROPPED + b" Please try sending the request again.")
        elif self.path == "/busy":
            self._answer(503, b"busy")
        else:
            self._answer(200, body)

    def _chunked(self) -> bytes:
        body = b""
        while size := int(self.rfile.readline().strip(), 16):
            body += self.rfile.read(size)
            self.rfile.readline()
        self.rfile.readline()
        return body

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def flaky() -> Iterator[str]:
    Flaky.bodies = []
    with loopback_server(Flaky) as url:
        yield url


def test_a_dropped_request_is_sent_again(flaky: str) -> None:
    with httpx.Client(base_url=flaky, transport=DevProxyRetry()) as client:
        answer = client.post("/drop", json={"n": 1})
        assert (answer.status_code, answer.json()) == (200, {"n": 1})
        assert Flaky.bodies == [("/drop", b'{"n":1}')] * 2
        other = client.post("/busy", content=b"x")
        assert (other.status_code, other.text) == (503, "busy")
        assert len(Flaky.bodies) == 3
        streamed = client.post("/drop", content=iter([b"a", b"b"]))
        assert streamed.status_code == 503  # a streamed body cannot be sent again
        assert Flaky.bodies[3:] == [("/drop", b"ab")]


async def test_the_async_client_too(flaky: str) -> None:
    async with httpx.AsyncClient(base_url=flaky, transport=AsyncDevProxyRetry()) as client:
        answer = await client.post("/drop", json={"n": 2})
        assert (answer.status_code, answer.json()) == (200, {"n": 2})
        assert len(Flaky.bodies) == 2
