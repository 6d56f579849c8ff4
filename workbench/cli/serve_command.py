"""`sandbox-workbench serve`: serve the gateway protocol from the local backend."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import secrets
from pathlib import Path

import click

TOKEN_ENV = "SANDBOX_WORKBENCH_TOKEN"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@click.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8787, show_default=True, type=int, help="Port (0: any free).")
@click.option("--token", help=f"Bearer token (default: ${TOKEN_ENV}, else generated).")
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Use this local store instead of the default.",
)
@click.option(
    "--allow-non-loopback",
    is_flag=True,
    help="Allow binding an address other than loopback (anyone who can reach it and has "
    "the token can run code).",
)
def serve_command(
    host: str, port: int, token: str | None, data_dir: Path | None, allow_non_loopback: bool
) -> None:
    """Serve the gateway protocol (docs/gateway-protocol.md) from the local backend.

    Point a remote profile at it to share live contexts between the TUI, `run` and
    `watch` in different terminals.
    """
    if not is_loopback(host) and not allow_non_loopback:
        raise click.UsageError(
            f"refusing to bind {host}: not a loopback address (pass --allow-non-loopback)"
        )
    token = token or os.environ.get(TOKEN_ENV)
    generated = token is None
    if token is None:
        token = secrets.token_urlsafe(32)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(host, port, token, generated, data_dir))


async def _serve(host: str, port: int, token: str, generated: bool, data_dir: Path | None) -> None:
    import uvicorn

    from workbench.backends.local import open_local_gateway
    from workbench.server.app import GatewayApp

    gateway = open_local_gateway(data_dir)
    config = uvicorn.Config(
        GatewayApp(gateway, token),
        host=host,
        port=port,
        lifespan="on",
        log_level="warning",
        access_log=False,
        server_header=False,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            await task
            raise click.ClickException(f"could not start the server on {host}:{port}")
        await asyncio.sleep(0.01)
    bound = server.servers[0].sockets[0].getsockname()
    shown_host = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
    token_note = f" (token: {token})" if generated else f" (token from --token or ${TOKEN_ENV})"
    print(
        f"sandbox-workbench serve: listening on http://{shown_host}:{bound[1]}{token_note}",
        flush=True,
    )
    await task
