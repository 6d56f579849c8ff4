"""The gateway protocol (docs/gateway-protocol.md) answered in-process.

The local backend calls `Gateway.handle` directly; `sandbox-workbench serve` exposes the
same handler over HTTP. Route shapes, statuses and error bodies therefore cannot differ
between the embedded backend, `serve`, and the remote backend talking to `serve`.
"""
