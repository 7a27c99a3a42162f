#!/usr/bin/env bash
# Debian's Chromium for the audit page's browser test (tests/service/api/native/test_audit_page.py), driven by
# Playwright through its executable path: no browser download; and a CJK font, so that the screenshot
# the test keeps shows the Chinese queries as text. Does nothing when both are installed.
set -euo pipefail
packages="chromium fonts-wqy-zenhei"
if command -v chromium >/dev/null 2>&1 && dpkg -s fonts-wqy-zenhei >/dev/null 2>&1; then
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
# shellcheck disable=SC2086
$sudo apt-get install -y -q $packages >/dev/null || { $sudo apt-get update -q && $sudo apt-get install -y -q $packages >/dev/null; }
chromium --version
