"""The sandbox domain of the local backend: the `/workspace` tree with its sync and its
host mirror, workspace paths, env-var rules and the clock (no UI, no SQLite, no HTTP)."""
