#!/usr/bin/env bash
# Debian's chromium and chromedriver for the web console's browser tests
# (tests/daemon/test_web_console.py, which selenium from the test extra drives; the tests
# skip, saying why, where these are missing). No browser is downloaded by a test tool:
# the machine's own packages are the browser CI and a laptop test with.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_apt.sh"
# fonts-liberation is only recommended by chromium: without a font the screenshots show no text.
apt_ensure ci-setup-browser chromium chromium-driver fonts-liberation
