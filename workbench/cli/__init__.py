"""The `sandbox-workbench` command line: thin commands over the headless API."""
