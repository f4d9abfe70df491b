#!/bin/sh
# Installs the browser tests' JavaScript (playwright-core, which drives Debian's chromium: no browser
# is downloaded) from the committed lock file with `npm ci`, only when the lock file changed since the
# last install. Run by scripts/bootstrap and by the ctest fixture e2e.npm_ci.
set -eu
cd "$(dirname "$0")"
command -v npm >/dev/null || { echo "npm-ci.sh: npm is missing: run scripts/bootstrap" >&2; exit 1; }
if cmp -s package-lock.json node_modules/.sluice-lock.json; then
  exit 0
fi
echo "npm ci in tests/e2e"
npm ci --no-audit --no-fund --loglevel=error
cp package-lock.json node_modules/.sluice-lock.json
