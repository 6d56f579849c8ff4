"""The gateway protocol's vocabulary, the bottom layer every other room may import.

`errors` (codes, `SandboxError` and its classes), `types` (the wire shapes) with their one
`codec`, `http` (requests, responses, body caps), `routing` (the route table mechanism),
`ids` (sandbox id rules) and `timestamps` (the JavaScript ISO format). Nothing here imports
another `workbench` package.
"""
