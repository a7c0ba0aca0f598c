#!/usr/bin/env bash
# Installs Debian's chromium for the console's browser tests
# (console/browser_test.go reads IDEM_TEST_CHROMIUM). Idempotent: does
# nothing when /usr/bin/chromium is already there.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
	exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y chromium
test -x /usr/bin/chromium
