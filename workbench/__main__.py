"""The `sandbox-workbench` command and `python -m workbench`: the CLI."""

import sys


def run() -> None:
    """The CLI; a Ctrl+C while it is still importing ends it as one anywhere else does
    (exit 130, no traceback; a command's own modules: `LazyGroup.get_command`)."""
    try:
        from workbench.cli.main import main
    except KeyboardInterrupt:
        sys.exit(130)
    main()


if __name__ == "__main__":
    run()
