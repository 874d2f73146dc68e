#!/usr/bin/env bash
# Renders the clusterctl release assets into out/ (or $OUT_DIR):
#   out/infrastructure-components.yaml  CRDs + RBAC + Namespace + Deployment + admission policies
#   out/metadata.yaml                   release series -> CAPI contract (v1beta2)
#   out/cluster-template.yaml           `clusterctl generate cluster` default flavour
#
#   BANLIEUE_IMAGE=registry.example/banlieue:v0.1.0 hack/release.sh
#
# The components keep clusterctl variables (`${NAME:=default}`, substituted by clusterctl init):
#   BANLIEUE_LOG_LEVEL                  --log-level of the manager (default info)
#   BANLIEUE_MAX_CONCURRENT_RECONCILES  workers per controller (default 10)
set -euo pipefail
cd "$(dirname "$0")/.."

image=${BANLIEUE_IMAGE:-banlieue:v0.1.0}
out=${OUT_DIR:-out}
command -v kubectl >/dev/null || { echo "release: kubectl is required (it has kustomize built in)" >&2; exit 1; }

tag=${image##*:}
if [[ $tag == "$image" || $tag == */* ]]; then
  echo "release: BANLIEUE_IMAGE must be NAME:TAG (got $image)" >&2
  exit 2
fi

# A throw-away overlay on config/default: the image, and the manager flags as clusterctl variables.
overlay=$(mktemp -d)
trap 'rm -rf "$overlay"' EXIT
cat >"$overlay/kustomization.yaml" <<YAML
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - $(realpath --relative-to="$overlay" config/default)
images:
  - name: banlieue
    newName: ${image%:*}
    newTag: "$tag"
patches:
  - target:
      kind: Deployment
      name: banlieue-manager
    patch: |-
      - op: add
        path: /spec/template/spec/containers/0/args/-
        value: --log-level=\${BANLIEUE_LOG_LEVEL:=info}
      - op: add
        path: /spec/template/spec/containers/0/args/-
        value: --max-concurrent-reconciles=\${BANLIEUE_MAX_CONCURRENT_RECONCILES:=10}
YAML
mkdir -p "$out"
kubectl kustomize "$overlay" >"$out/infrastructure-components.yaml"
cp metadata.yaml "$out/metadata.yaml"
cp templates/cluster-template.yaml "$out/cluster-template.yaml"
echo "release: wrote infrastructure-components.yaml, metadata.yaml, cluster-template.yaml to $out (image $image)"
