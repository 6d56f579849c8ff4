"""Run the gateway Worker template in a real Workers runtime (workerd) for tests.

`wrangler dev` (the version the template's lockfile pins, run on Node from PATH) serves
the gateway's own `src/index.ts` and `src/registry.ts`, unmodified, from a scratch copy of
`worker_templates/gateway/`, in local mode on a loopback port. Only what cannot run on
this machine is replaced, by test-only stand-ins (`tests/workerd/standins/`):

- `@sandbox-workers/core` is aliased (in the generated `wrangler.test.jsonc`) to a module
  whose `Sandbox` Durable Object forwards each request to a `sandbox-workbench serve`
  process on loopback (`/v1/sandboxes/<x-sandbox-id><path>`);
- the runtime Service Bindings (JAVASCRIPT, PYTHON, PERL, RUBY) are bound to stand-in
  Workers, run in the same `wrangler dev` session (one `-c` config each), that answer
  `GET /interpreter` and `POST /execute` from serve's `/v1/runtimes` routes.

The template's npm dependencies are installed with `npm ci` from its committed lockfile
once, into `<cache dir>/workerd-gateway/<lockfile hash>/`, and reused by later runs.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from engines.locations import cache_root
from tests.serve_process import ServeProcess, serve_process

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "worker_templates" / "gateway"
STANDINS = Path(__file__).resolve().parent / "standins"
GATEWAY_TOKEN = "workerd-gateway-token-0123456789abcdef"
"""The gateway Worker's own bearer token (WORKBENCH_TOKEN); serve has another."""
TTL_MS = 86_400_000
RUNTIME_SERVICES = {
    "JAVASCRIPT": "sandbox-javascript",
    "PYTHON": "sandbox-python",
    "PERL": "sandbox-perl",
    "RUBY": "sandbox-ruby",
}
STANDIN_COMPATIBILITY_DATE = "2025-09-24"
"""The newest date wrangler 4.40's workerd supports (the stand-ins are ours to date)."""
NPM_CI_TIMEOUT = 600.0
START_TIMEOUT = 120.0
# What the template copy needs besides node_modules (never .wrangler, dist, node_modules).
TEMPLATE_FILES = ("src", "types", "tsconfig.json", "package.json", "package-lock.json")


MIN_NODE_MAJOR = 20
"""wrangler 4.40 (the template's pin) runs on Node.js >= 20 (template package.json)."""


@functools.cache
def missing_node_tools() -> str | None:
    """Why the workerd suite cannot run here (node/npm missing or too old), or None."""
    for program in ("node", "npm"):
        if shutil.which(program) is None:
            return f"the workerd gateway tests need {program} (Node.js >= 20 with npm) on PATH"
    version = subprocess.run(
        ["node", "--version"], capture_output=True, text=True, timeout=30
    ).stdout.strip()
    match = re.match(r"v(\d+)\.", version)
    if match is None or int(match.group(1)) < MIN_NODE_MAJOR:
        return f"the workerd gateway tests need Node.js >= {MIN_NODE_MAJOR}, found {version!r}"
    return None


def _jsonc(text: str) -> dict[str, object]:
    """The template's JSONC: whole-line `//` comments only, no trailing commas."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("//")]
    data = json.loads("\n".join(lines))
    assert isinstance(data, dict)
    return data


def lockfile_key() -> str:
    digest = hashlib.sha256((TEMPLATE / "package-lock.json").read_bytes())
    digest.update((TEMPLATE / "package.json").read_bytes())
    return digest.hexdigest()[:16]


def installed_dependencies() -> Path:
    """`npm ci` of the template's lockfile, once per lockfile: the cached install's root
    (it holds `node_modules/`). Concurrent test runs wait for one another."""
    base = cache_root() / "workerd-gateway"
    base.mkdir(parents=True, exist_ok=True)
    target = base / lockfile_key()
    marker = target / ".npm-ci-complete"
    if marker.is_file():
        return target
    with (base / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.is_file():
            return target
        staging = base / f"staging-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        shutil.rmtree(target, ignore_errors=True)
        staging.mkdir()
        for name in ("package.json", "package-lock.json"):
            shutil.copy2(TEMPLATE / name, staging / name)
        result = subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=staging,
            capture_output=True,
            text=True,
            timeout=NPM_CI_TIMEOUT,
            env={**os.environ, "npm_config_update_notifier": "false"},
        )
        if result.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            raise RuntimeError(
                f"npm ci of the gateway template failed ({result.returncode}):\n"
                f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
            )
        (staging / ".npm-ci-complete").write_text("ok\n")
        staging.rename(target)
    return target


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def write_scratch(scratch: Path, installed: Path, serve: ServeProcess, token: str) -> list[Path]:
    """A scratch copy of the template plus the test-only configs; the configs, gateway
    first (its name is the one `wrangler dev` serves)."""
    for name in TEMPLATE_FILES:
        source = TEMPLATE / name
        if source.is_dir():
            shutil.copytree(source, scratch / name)
        else:
            shutil.copy2(source, scratch / name)
    (scratch / "node_modules").symlink_to(installed / "node_modules", target_is_directory=True)
    shutil.copytree(STANDINS, scratch / "standins")

    serve_vars = {"SERVE_URL": serve.url.rstrip("/"), "SERVE_TOKEN": serve.token}
    config = _jsonc((TEMPLATE / "wrangler.jsonc").read_text())
    config.pop("$schema", None)
    template_vars = config.get("vars", {})
    assert isinstance(template_vars, dict)
    config["vars"] = {
        **template_vars,
        "SANDBOX_IDLE_TTL_MS": str(TTL_MS),
        # A secret in production; a var is enough for a local test session.
        "WORKBENCH_TOKEN": token,
        **serve_vars,
    }
    config["alias"] = {"@sandbox-workers/core": "./standins/sandbox-core.js"}
    gateway = scratch / "wrangler.test.jsonc"
    configs = [gateway]
    gateway.write_text(
        "// Generated for the workerd tests: the template's wrangler.jsonc plus test vars\n"
        "// and the @sandbox-workers/core stand-in.\n" + json.dumps(config, indent=2) + "\n"
    )
    services = config.get("services", [])
    assert isinstance(services, list)
    for service in services:
        assert isinstance(service, dict)
        runtime_config = {
            "name": service["service"],
            "main": "standins/runtime.js",
            "compatibility_date": STANDIN_COMPATIBILITY_DATE,
            "vars": {"BINDING": service["binding"], **serve_vars},
        }
        path = scratch / f"wrangler.{service['service']}.test.jsonc"
        path.write_text(json.dumps(runtime_config, indent=2) + "\n")
        configs.append(path)
    return configs


@dataclass(frozen=True)
class WorkerdGateway:
    url: str
    token: str
    serve: ServeProcess
    scratch: Path
    log: Path
    process: subprocess.Popen[bytes]

    def log_tail(self, size: int = 6000) -> str:
        return self.log.read_text(errors="replace")[-size:]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/v1/health", timeout=5) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM it when the test process dies, so a killed
    pytest run does not leave `wrangler dev` (and its workerd) behind (Linux only)."""
    with contextlib.suppress(Exception):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Stop wrangler and the workerd it spawned: the process group it leads (started
    with start_new_session, so the group is exactly that session)."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@contextlib.contextmanager
def workerd_gateway(scratch: Path, serve: ServeProcess) -> Iterator[WorkerdGateway]:
    """`wrangler dev` of the template (with the stand-ins) on a loopback port."""
    installed = installed_dependencies()
    configs = write_scratch(scratch, installed, serve, GATEWAY_TOKEN)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    command = ["node", str(installed / "node_modules" / "wrangler" / "bin" / "wrangler.js")]
    command += ["dev"]
    for config in configs:
        command += ["-c", str(config)]
    command += [
        "--local",
        "--ip",
        "127.0.0.1",
        "--port",
        str(port),
        "--inspector-port",
        str(_free_port()),
        "--persist-to",
        str(scratch / ".wrangler" / "state"),
        "--show-interactive-dev-session=false",
        "--log-level",
        "warn",
    ]
    env = {
        **os.environ,
        "WRANGLER_SEND_METRICS": "false",
        "WRANGLER_LOG_PATH": str(scratch / "wrangler-logs"),
        "XDG_CONFIG_HOME": str(scratch / "xdg-config"),
        "NO_UPDATE_NOTIFIER": "1",
        "CI": "1",
        "FORCE_COLOR": "0",
    }
    log = scratch / "wrangler-dev.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            command,
            cwd=scratch,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
    gateway = WorkerdGateway(url, GATEWAY_TOKEN, serve, scratch, log, process)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while not _healthy(url):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"wrangler dev did not start (exit {process.poll()}):\n{gateway.log_tail()}"
                )
            time.sleep(0.25)
        yield gateway
    finally:
        _stop(process)


_STASH_KEY = pytest.StashKey[WorkerdGateway | BaseException]()


def session_gateway(request: pytest.FixtureRequest) -> WorkerdGateway:
    """The test session's one workerd gateway (and the serve process behind it), started
    on first use by whichever fixture asks, stopped when the session ends. Skips when
    node/npm are missing; fails (every time asked) when it cannot start."""
    reason = missing_node_tools()
    if reason is not None:
        pytest.skip(reason)
    config = request.config
    existing = config.stash.get(_STASH_KEY, None)
    if isinstance(existing, BaseException):
        pytest.fail(f"the workerd gateway could not start: {existing}")
    if existing is not None:
        return existing
    factory: pytest.TempPathFactory = request.getfixturevalue("tmp_path_factory")
    stack = contextlib.ExitStack()
    try:
        serve = stack.enter_context(
            serve_process(
                factory.mktemp("workerd-served"),
                env={"SANDBOX_WORKBENCH_IDLE_TTL_MS": str(TTL_MS)},
            )
        )
        gateway = stack.enter_context(workerd_gateway(factory.mktemp("workerd-gateway"), serve))
    except Exception as error:
        stack.close()
        config.stash[_STASH_KEY] = error
        pytest.fail(f"the workerd gateway could not start: {error}")
    config.add_cleanup(stack.close)
    config.stash[_STASH_KEY] = gateway
    return gateway
