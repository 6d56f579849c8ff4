"""Wasm interpreter engines (JavaScript, Python, Perl, Ruby) under wasmtime.

No sandbox, UI or storage concepts live here; `workbench` builds on this package and
this package never imports `workbench`.
"""
