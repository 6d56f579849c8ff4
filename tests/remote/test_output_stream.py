"""The streamed `/execute` answer on the wire (`serve`), and a client that reads a hostile
one: whatever a server sends, the client gets a clean error or the answer, never a hang
or a traceback."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from tests.conftest import require_engine
from tests.serve_process import ServeProcess, serve_process
from workbench.protocol.http import MAX_EVENT_BYTES, NDJSON, read_event_stream


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    with serve_process(tmp_path_factory.mktemp("serve")) as process:
        yield process


def execute(server: ServeProcess, code: str, *, stream: bool) -> httpx.Response:
    headers = {"authorization": f"Bearer {server.token}"}
    if stream:
        headers["accept"] = NDJSON
    body = {"code": code, "binding": "PYTHON"}
    with httpx.Client(base_url=server.url, timeout=60) as client:
        return client.post("/v1/sandboxes/stream-wire/execute", json=body, headers=headers)


def test_a_client_that_asks_gets_lines_then_the_plain_answer(server: ServeProcess) -> None:
    require_engine("python")
    code = "print('one')\nprint('two')\n6 * 7"
    plain = execute(server, code, stream=False)
    assert plain.headers["content-type"].startswith("application/json")
    streamed = execute(server, code, stream=True)
    assert streamed.headers["content-type"] == NDJSON
    events = [json.loads(line) for line in streamed.text.splitlines()]
    assert events[:2] == [
        {"type": "output", "stream": "stdout", "line": "one"},
        {"type": "output", "stream": "stdout", "line": "two"},
    ]
    answer = events[-1]
    assert len(events) == 3 and answer["type"] == "answer" and answer["status"] == 200
    assert (
        answer["body"]["logs"] == plain.json()["logs"] == {"stdout": ["one", "two"], "stderr": []}
    )
    assert answer["body"]["results"] == plain.json()["results"]


def test_an_execution_that_writes_nothing_is_answered_plainly(server: ServeProcess) -> None:
    require_engine("python")
    answer = execute(server, "1 +", stream=True)  # a syntax error: no line written
    assert answer.headers["content-type"].startswith("application/json")
    assert answer.status_code == 200 and answer.json()["error"]["name"] == "SyntaxError"


async def pieces(*chunks: bytes) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


@pytest.mark.parametrize(
    ("chunks", "error"),
    [
        ((b"not json\n",), ValueError),
        ((b"[1, 2]\n",), ValueError),
        ((b'{"type": "answer", "status": "200", "body": {}}\n',), ValueError),
        ((b'{"type": "output", "stream": "stdout", "line": "a"}\n',), EOFError),
        ((b"x" * (MAX_EVENT_BYTES + 1),), ValueError),
    ],
    ids=["not-json", "not-an-object", "status-not-a-number", "no-answer", "endless-line"],
)
async def test_a_hostile_stream_is_a_clean_error(
    chunks: tuple[bytes, ...], error: type[Exception]
) -> None:
    told: list[dict[str, object]] = []
    with pytest.raises(error):
        await read_event_stream(pieces(*chunks), told.append)


async def test_a_line_split_across_chunks_is_read_whole() -> None:
    told: list[dict[str, object]] = []
    answer = await read_event_stream(
        pieces(
            b'{"type": "output", "stream": "std',
            b'out", "line": "a"}\n{"type": "ans',
            b'wer", "status": 200, "body": {"ok": true}}\n',
        ),
        told.append,
    )
    assert told == [{"type": "output", "stream": "stdout", "line": "a"}]
    assert (answer.status, json.loads(answer.body)) == (200, {"ok": True})


async def test_a_long_line_sent_a_kib_at_a_time_is_read_in_linear_time() -> None:
    """Each chunk was joined to what was pending and the whole split again: a 4 MiB line
    in 1 KiB chunks took 7 s of CPU (a helper)."""
    line = json.dumps({"type": "output", "stream": "stdout", "line": "x" * ((4 << 20) - 100)})
    whole = (line + "\n" + '{"type": "answer", "status": 200, "body": {}}\n').encode()
    told: list[dict[str, object]] = []
    started = time.process_time()
    chunks = [whole[start : start + 1024] for start in range(0, len(whole), 1024)]
    answer = await read_event_stream(pieces(*chunks), told.append)
    assert time.process_time() - started < 1.5
    assert answer.status == 200 and told == [json.loads(line)]
