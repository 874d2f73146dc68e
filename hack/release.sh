#!/usr/bin/env bash
# Renders the clusterctl release assets into out/ (or $OUT_DIR):
#   out/infrastructure-components.yaml  CRDs + RBAC + Namespace + Deployment + admission policies
#   out/metadata.yaml                   release series -> CAPI contract (v1beta2)
#   out/cluster-template.yaml           `clusterctl generate cluster` default flavour
#   out/cluster-template-<flavor>.yaml  the other flavours (`--flavor <flavor>`), from templates/
#   out/clusterclass-<class>.yaml       ClusterClasses the flavours refer to (clusterctl adds them)
#
#   BANLIEUE_IMAGE=registry.example/banlieue:v0.1.0 hack/release.sh
#
# With REPO_DIR set (make clusterctl-repo), the same files go to a clusterctl local repository,
# <REPO_DIR>/infrastructure-banlieue/<tag>/, and <REPO_DIR>/clusterctl.yaml is the clusterctl
# configuration that names it (`clusterctl ... --config <REPO_DIR>/clusterctl.yaml`); OUT_DIR is
# then ignored. The version is the image's tag.
#
# The image is written in its canonical form (docker.io/library/banlieue:v0.1.0 for
# banlieue:v0.1.0, the same image for docker and containerd): clusterctl refuses any other
# ("couldn't parse image name: repository name must be canonical").
#
# The components keep clusterctl variables (`${NAME:=default}`, substituted by clusterctl init):
#   BANLIEUE_LOG_LEVEL                  --log-level of the manager (default info)
#   BANLIEUE_MAX_CONCURRENT_RECONCILES  workers per controller (default 32)
set -euo pipefail
cd "$(dirname "$0")/.."

image=${BANLIEUE_IMAGE:-banlieue:v0.1.0}
out=${OUT_DIR:-out}
repo=${REPO_DIR:-}
command -v kubectl >/dev/null || { echo "release: kubectl is required (it has kustomize built in)" >&2; exit 1; }

tag=${image##*:}
if [[ $tag == "$image" || $tag == */* ]]; then
  echo "release: BANLIEUE_IMAGE must be NAME:TAG (got $image)" >&2
  exit 2
fi
# Docker's reference normalisation: a first path component with a dot, a colon or "localhost" is
# a registry; otherwise the registry is docker.io, and a one-component name is under library/.
first=${image%%/*}
if [[ $image != */* ]]; then
  image=docker.io/library/$image
elif [[ $first != *.* && $first != *:* && $first != localhost ]]; then
  image=docker.io/$image
fi
if [[ -n $repo ]]; then
  mkdir -p "$repo"
  repo=$(realpath "$repo")
  out=$repo/infrastructure-banlieue/$tag
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
        value: --max-concurrent-reconciles=\${BANLIEUE_MAX_CONCURRENT_RECONCILES:=32}
YAML
mkdir -p "$out"
kubectl kustomize "$overlay" >"$out/infrastructure-components.yaml"
cp metadata.yaml "$out/metadata.yaml"
templates=()
shopt -s nullglob
for t in templates/cluster-template*.yaml templates/clusterclass-*.yaml; do
  cp "$t" "$out/"
  templates+=("${t#templates/}")
done
echo "release: wrote infrastructure-components.yaml, metadata.yaml, ${templates[*]} to $out (image $image)"
if [[ -n $repo ]]; then
  # CLUSTERCTL_DISABLE_VERSIONCHECK: clusterctl otherwise asks GitHub for a newer release on
  # every command; with it, generate/describe dial nothing but the management cluster.
  cat >"$repo/clusterctl.yaml" <<YAML
# clusterctl configuration of the local repository $repo (hack/release.sh)
providers:
  - name: banlieue
    type: InfrastructureProvider
    url: file://$out/infrastructure-components.yaml
CLUSTERCTL_DISABLE_VERSIONCHECK: "true"
YAML
  echo "release: clusterctl configuration $repo/clusterctl.yaml (clusterctl ... --config $repo/clusterctl.yaml)"
fi
