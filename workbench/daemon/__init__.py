"""The local daemon: one process per data dir owns the store and every live engine
session; the TUI, the CLI, `watch`, the pytest plugin and the Python API are its clients
(`workbench.backends.daemon`), and `serve` is a TCP front of it."""
