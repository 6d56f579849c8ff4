"""`wasi:sockets`: denied exactly as wasmtime's WASI context without network access
denies it. Creating a socket fails with `access-denied` (Python: PermissionError) and
name lookup with `permanent-resolver-failure` (Python: `gaierror`, "Non-recoverable
error"). No socket can exist, so the imports that act on one are never reachable: any
call to them traps (see `DENIED_INTERFACES`)."""

from __future__ import annotations

from engines.components.wasi.abi import Call, implements

ACCESS_DENIED = 1
PERMANENT_RESOLVER_FAILURE = 20
DENIED_INTERFACES = ("wasi:sockets/",)
"""Imports under these interfaces that are not implemented below trap when called."""


@implements("wasi:sockets/instance-network#instance-network", params="", results="i")
def instance_network(call: Call) -> int:
    return call.host.add({"type": "network"})


@implements(
    "wasi:sockets/tcp-create-socket#create-tcp-socket",
    "wasi:sockets/udp-create-socket#create-udp-socket",
    params="ii",
)
def create_socket(call: Call, address_family: int, ret: int) -> None:
    call.memory.pack("B3xB", ret, 1, ACCESS_DENIED)


@implements("wasi:sockets/ip-name-lookup#resolve-addresses", params="iiii")
def resolve_addresses(call: Call, network: int, ptr: int, length: int, ret: int) -> None:
    call.host.table.get(network, "network")
    call.memory.string(ptr, length)
    call.memory.pack("B3xB", ret, 1, PERMANENT_RESOLVER_FAILURE)
