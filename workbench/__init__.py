"""sandbox-workbench: a terminal workbench for sandbox-workers."""

__version__ = "0.1.0"
