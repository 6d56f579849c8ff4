#!/usr/bin/env bash
# Type-check the gateway Worker template: `npm ci` (offline-tolerant) then `tsc --noEmit`.
# Exits non-zero on install failure or type errors. node_modules is git-ignored; this script
# works from a clean clone (it needs npm and, unless the npm cache is warm, the registry).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here/gateway"

export WRANGLER_SEND_METRICS=false
npm ci --prefer-offline --no-audit --no-fund --loglevel=error
npx --no-install tsc --noEmit -p .
echo "gateway template: type check passed"
