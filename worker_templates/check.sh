#!/usr/bin/env bash
# Type-check the gateway Worker template: `npm ci` (offline-tolerant) then `tsc --noEmit`.
# Exits non-zero on install failure or type errors. node_modules is git-ignored; this script
# works from a clean clone (it needs npm and, unless the npm cache is warm, the registry).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here/gateway"

export WRANGLER_SEND_METRICS=false
npm ci --prefer-offline --no-audit --no-fund --loglevel=error
# The installed core's own types when it is there (a change in its API fails the check);
# the stand-in declaration (types/) only when it is not.
if [ -d node_modules/@sandbox-workers/core ]; then
    npx --no-install tsc --noEmit -p tsconfig.json
    echo "gateway template: type check passed (the installed @sandbox-workers/core)"
else
    npx --no-install tsc --noEmit -p tsconfig.standin.json
    echo "gateway template: type check passed (the stand-in types: @sandbox-workers/core is not installed)"
fi
