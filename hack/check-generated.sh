#!/usr/bin/env bash
# Fails when generated files (CRDs) differ from a fresh generation.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
.venv/bin/banlieue crdgen --out "$tmp/crd"
if ! diff -ru config/crd "$tmp/crd"; then
  echo "config/crd is stale: run 'make crds' and commit the result" >&2
  exit 1
fi
