"""`python -m workbench.daemon --data-dir DIR`: the daemon, as clients start it (detached,
its output in its log)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

from workbench.backends.daemon.client import FATAL, OWNED_ELSEWHERE
from workbench.backends.owner import StoreOwnedError
from workbench.daemon.server import (
    LOG,
    Daemon,
    idle_seconds_from_env,
    open_log,
)
from workbench.paths import DATABASE_NAME, private_data_dir
from workbench.store import open_failure


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workbench.daemon")
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--client-pid", type=int, default=None, help="the client starting it")
    args = parser.parse_args(argv)
    data_dir = private_data_dir(args.data_dir)
    open_log(data_dir)
    LOG.info("starting (pid %d)", os.getpid())
    try:
        daemon = Daemon(data_dir, idle_seconds=idle_seconds_from_env(), started_by=args.client_pid)
        asyncio.run(daemon.run())
    except StoreOwnedError as error:
        LOG.info("not starting: %s", error)
        return OWNED_ELSEWHERE
    except Exception as error:
        LOG.exception("the daemon failed")
        message = open_failure(error, data_dir / DATABASE_NAME)
        LOG.error("%s%s", FATAL, message or f"{type(error).__name__}: {error}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
