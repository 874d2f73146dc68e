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
if [ ${#need[@]} -gt 0 ]; then
  echo "install-deps: installing ${need[*]}" >&2
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
