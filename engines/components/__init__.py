"""Components run as their core modules with our own WASI 0.2 host, so that their live
state can be snapshotted (`engine.SnapshotComponentEngine`; see `plan`, `guest` and `wasi`).

Nothing is imported here: `engines.language` needs `plan` while `engine` needs
`engines.language`.
"""
