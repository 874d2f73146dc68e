#!/usr/bin/env bash
# Fails when generated files (CRDs, RBAC, admission policies, API reference) differ from a fresh generation.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
.venv/bin/banlieue crdgen --out "$tmp/crd" --rbac-out "$tmp/rbac" --admission-out "$tmp/admission" \
  --namespaced-rbac-out "$tmp/namespaced/rbac"
.venv/bin/banlieue crddoc --out "$tmp/api-reference.md"
status=0
for d in crd rbac admission namespaced/rbac; do
  if ! diff -ru "config/$d" "$tmp/$d"; then
    echo "config/$d is stale: run 'make generate' and commit the result" >&2
    status=1
  fi
done
if ! diff -u docs/api-reference.md "$tmp/api-reference.md"; then
  echo "docs/api-reference.md is stale: run 'make generate' and commit the result" >&2
  status=1
fi
exit $status
