#!/usr/bin/env bash
# banlieue end to end on a real cluster: kind + CAPI core (clusterctl) + banlieue, against a real
# vCenter. The same demo `make dev` runs on the API-server double and vcsim.
#
#   VSPHERE_SERVER=vc.example.com VSPHERE_USERNAME=user VSPHERE_PASSWORD=secret hack/e2e-kind.sh
#
# Needs docker, kind, kubectl and clusterctl, and internet access for kind's node image, CAPI's
# release assets and cert-manager. Optional environment:
#   VSPHERE_CA_FILE   PEM CA bundle of vCenter's certificate (else VSPHERE_INSECURE=true is needed)
#   VSPHERE_INSECURE  true: skip TLS verification (labs only)
#   SAMPLES           directory applied with `kubectl apply -f` (default config/samples); the
#                     datastores, port groups and the VM template it names must exist in vCenter
#   WITH_CAPI         1: also build the CAPI cluster in config/samples/capi
#   CLUSTER_NAME      kind cluster name (default banlieue-e2e)
#   KEEP_CLUSTER      1: keep the kind cluster and the VMs at the end
#   TIMEOUT           how long to wait for each Ready step (default 20m)
set -euo pipefail
cd "$(dirname "$0")/.."

: "${VSPHERE_SERVER:?set VSPHERE_SERVER to the vCenter host name}"
: "${VSPHERE_USERNAME:?set VSPHERE_USERNAME}"
: "${VSPHERE_PASSWORD:?set VSPHERE_PASSWORD}"
cluster=${CLUSTER_NAME:-banlieue-e2e}
samples=${SAMPLES:-config/samples}
timeout=${TIMEOUT:-20m}
image=banlieue:e2e
insecure=${VSPHERE_INSECURE:-false}
if [[ -z ${VSPHERE_CA_FILE:-} && $insecure != true ]]; then
  echo "e2e-kind: set VSPHERE_CA_FILE (vCenter's CA, PEM) or VSPHERE_INSECURE=true" >&2
  exit 2
fi
for tool in docker kind kubectl clusterctl; do
  command -v "$tool" >/dev/null || { echo "e2e-kind: $tool not found in PATH" >&2; exit 1; }
done

work=$(mktemp -d)
export KUBECONFIG=$work/kubeconfig # never touch the caller's kubeconfig

step() { printf '\n== %s\n' "$*"; }

cleanup() {
  if [[ ${KEEP_CLUSTER:-0} == 1 ]]; then
    echo "e2e-kind: kept; kind get kubeconfig --name $cluster > kubeconfig"
  else
    step "cleanup: delete the VMs in vCenter first, then the kind cluster"
    kubectl delete clusters.cluster.x-k8s.io --all -A --wait --timeout=10m >/dev/null 2>&1 || true
    kubectl delete virtualmachines.banlieue.io --all -A --wait --timeout=10m || true
    kind delete cluster --name "$cluster" || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

step "kind cluster $cluster"
if kind get clusters | grep -qx "$cluster"; then
  kind get kubeconfig --name "$cluster" >"$KUBECONFIG"
else
  kind create cluster --name "$cluster" --kubeconfig "$KUBECONFIG" --wait 120s
fi

step "image $image"
docker build -t "$image" .
kind load docker-image "$image" --name "$cluster"

step "clusterctl init: CAPI core + kubeadm + banlieue from a local provider repository"
# The local repository and its clusterctl.yaml (the image written as docker.io/library/banlieue:e2e,
# the canonical name clusterctl requires and kind loaded it under).
BANLIEUE_IMAGE=$image REPO_DIR=$work/repo hack/release.sh
cp "$work/repo/clusterctl.yaml" "$work/clusterctl.yaml"
clusterctl init --config "$work/clusterctl.yaml" --infrastructure banlieue --wait-providers

step "samples from $samples, pointed at $VSPHERE_SERVER"
kubectl apply -f "$samples"
if [[ -n ${VSPHERE_CA_FILE:-} ]]; then
  ca_source='"configMapRef": {"name": "vcenter-ca", "key": "ca.crt"}'
fi
# Credentials go through files (mode 600 in $work), never through the process list.
umask 077
printf '%s' "$VSPHERE_USERNAME" >"$work/username"
printf '%s' "$VSPHERE_PASSWORD" >"$work/password"
kubectl get providers.banlieue.io -A \
  -o jsonpath='{range .items[*]}{.metadata.namespace} {.metadata.name} {.spec.connection.credentialsRef.name}{"\n"}{end}' |
  while read -r namespace name secret; do
    kubectl -n "$namespace" create secret generic "$secret" --dry-run=client -o yaml \
      --from-file=username="$work/username" --from-file=password="$work/password" | kubectl apply -f -
    if [[ -n ${ca_source:-} ]]; then
      kubectl -n "$namespace" create configmap vcenter-ca --from-file=ca.crt="$VSPHERE_CA_FILE" \
        --dry-run=client -o yaml | kubectl apply -f -
      connection="{\"endpoint\": \"https://$VSPHERE_SERVER/sdk\", \"insecureSkipTLSVerify\": false, \"caBundle\": {$ca_source}}"
    else
      connection="{\"endpoint\": \"https://$VSPHERE_SERVER/sdk\", \"insecureSkipTLSVerify\": $insecure}"
    fi
    kubectl -n "$namespace" patch providers.banlieue.io "$name" --type=merge \
      -p "{\"spec\": {\"connection\": $connection}}"
  done

step "wait for Providers, then VirtualMachines, to be Ready"
kubectl wait --for=condition=Ready providers.banlieue.io --all -A --timeout="$timeout"
kubectl wait --for=condition=Ready virtualmachines.banlieue.io --all -A --timeout="$timeout"
kubectl get virtualmachines.banlieue.io -A -o wide

if [[ ${WITH_CAPI:-0} == 1 ]]; then
  step "CAPI cluster from config/samples/capi"
  kubectl apply -f config/samples/capi/
  kubectl wait --for=condition=Ready vsphereclusters.infrastructure.banlieue.io --all -A --timeout="$timeout"
  kubectl wait --for=condition=Ready vspheremachines.infrastructure.banlieue.io --all -A --timeout="$timeout"
  clusterctl describe cluster demo
fi
step "e2e-kind: OK"
