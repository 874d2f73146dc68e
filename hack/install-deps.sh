#!/usr/bin/env bash
# Installs the system packages banlieue's tests and demo need, on Debian 12 or 13.
# Idempotent: does nothing when everything is present.
set -euo pipefail
need=()
# Go: the machines ship a current one (/usr/local/go). The wrappers under hack/ are Go modules
# whose dependencies come from the module proxy; hack/vcsim/go.mod says which Go they need.
# Debian's golang-go only where no go exists, and only if it is new enough (Debian 12's 1.19 is not).
go_need=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$(dirname "$0")/vcsim/go.mod")
go_ok() {  # $1: a "go version" line; true when its version >= go_need
  local have=${1#go version go}; have=${have%% *}
  [ "$(printf '%s\n%s\n' "$go_need" "$have" | sort -V | head -n1)" = "$go_need" ]
}
if ! command -v go >/dev/null 2>&1; then
  candidate=$(apt-cache policy golang-go 2>/dev/null | sed -n 's/^ *Candidate: \(.*\)$/\1/p')
  # Debian versions look like 2:1.19~1: the Go release between the epoch and the "~".
  candidate_go=${candidate#*:}; candidate_go=${candidate_go%%~*}
  if [ -z "$candidate" ] || ! go_ok "go version go$candidate_go linux"; then
    echo "install-deps: no go on PATH and Debian's golang-go (${candidate:-none}) is older than go $go_need (hack/vcsim/go.mod): install Go >= $go_need (https://go.dev/dl/) and rerun" >&2
    exit 1
  fi
  need+=(golang-go)
elif ! go_ok "$(go version)"; then
  echo "install-deps: $(go version) is older than go $go_need, which hack/vcsim/go.mod needs: install Go >= $go_need (https://go.dev/dl/) and rerun" >&2
  exit 1
fi
# kubectl: the machine image ships one; Debian's kubernetes-client only as the fallback.
command -v kubectl >/dev/null 2>&1 || need+=(kubernetes-client)
command -v python3 >/dev/null 2>&1 || need+=(python3 python3-venv)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need+=(python3-venv)
command -v make >/dev/null 2>&1 || need+=(make)
# Lint helpers the tests use: shellcheck for hack/*.sh, promtool (Debian ships it in prometheus)
# to unit-test the alert rules.
command -v shellcheck >/dev/null 2>&1 || need+=(shellcheck)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
# strace: tests/capi/test_clusterctl.py checks that clusterctl opens no network connection.
command -v strace >/dev/null 2>&1 || need+=(strace)
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
