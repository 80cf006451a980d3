#!/bin/sh
# promtool's unit tests of the alert rules (alert_rules_test.yml); skips
# (77) without promtool (Debian package prometheus, tools/dev/install-deps).
command -v promtool >/dev/null 2>&1 || { echo "SKIP: promtool not found (Debian package prometheus)"; exit 77; }
cd "$(dirname "$0")" && exec promtool test rules alert_rules_test.yml
