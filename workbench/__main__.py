"""`python -m workbench` runs the CLI."""

from workbench.cli.main import main

main()
