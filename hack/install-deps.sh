#!/usr/bin/env bash
# Installs the system packages banlieue's tests and demo need, on Debian 12 or 13.
# Idempotent: does nothing when everything is present.
set -euo pipefail
need=()
command -v go >/dev/null 2>&1 || need+=(golang-go)
[ -d /usr/share/gocode/src/github.com/vmware/govmomi/simulator ] || need+=(golang-github-vmware-govmomi-dev)
# kubectl: the machine image ships one; Debian's kubernetes-client only as the fallback.
command -v kubectl >/dev/null 2>&1 || need+=(kubernetes-client)
command -v python3 >/dev/null 2>&1 || need+=(python3 python3-venv)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need+=(python3-venv)
command -v make >/dev/null 2>&1 || need+=(make)
# Lint helpers the tests use: shellcheck for hack/*.sh, promtool (Debian ships it in prometheus)
# to unit-test the alert rules.
command -v shellcheck >/dev/null 2>&1 || need+=(shellcheck)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
if [ ${#need[@]} -gt 0 ]; then
  echo "install-deps: installing ${need[*]}" >&2
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  # policy-rc.d exit 101: never start the prometheus daemon a package install would enable.
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | $sudo tee /usr/sbin/policy-rc.d >/dev/null; $sudo chmod +x /usr/sbin/policy-rc.d
    trap '$sudo rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
