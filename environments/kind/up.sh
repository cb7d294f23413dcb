#!/usr/bin/env bash
# Bring up the kind environment of inferchaos (idempotent; `down.sh` removes it):
#   1. generate the tiny model on the host and copy it where kind-config.yaml mounts it;
#   2. create the kind cluster (1 control plane + 3 workers) and wait for the nodes;
#   3. give each worker fake nvidia.com/gpu through the node status subresource;
#   4. build the vLLM CPU image unless it exists, and load it onto the workers;
#   5. install the KubeRay operator with helm;
#   6. deploy the RayCluster and the vLLM replicas (requests == limits, one per node, a Service);
#   7. publish the front door and the Ray head on the host, route the Pod networks (kind.yaml).
# Needs: kind, kubectl, helm, docker, envsubst, openssl, and the project venv (`make venv`).
set -euo pipefail

# Everything up.sh reads sits beside it (the installed package's data, or the checkout's files).
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)

CLUSTER=${CLUSTER:-inferchaos}           # kind-config.yaml names the cluster; keep them equal
CONTEXT="kind-$CLUSTER"
NAMESPACE=inferchaos
VENV=${VENV:-$root/.venv}                # a checkout's venv; `inferchaos env up` passes its own
MODELS_HOST_DIR=/tmp/inferchaos-models   # the hostPath of kind-config.yaml's extraMounts
FAKE_GPUS_PER_NODE=${FAKE_GPUS_PER_NODE:-2}
VLLM_IMAGE=${VLLM_IMAGE:-inferchaos/vllm-cpu:0.32.0}
RAY_IMAGE=${RAY_IMAGE:-rayproject/ray:2.60.0-py311-cpu}
KUBERAY_VERSION=${KUBERAY_VERSION:-1.4.2}
TORCH_INDEX=${TORCH_INDEX:-https://download.pytorch.org/whl/cpu}

need() { command -v "$1" >/dev/null 2>&1 || { echo "up.sh: $1 is required but not on PATH" >&2; exit 2; }; }
for tool in kind kubectl helm docker envsubst openssl; do need "$tool"; done
[[ -x "$VENV/bin/inferchaos" ]] || { echo "up.sh: no venv at $VENV: run \`make venv\` first" >&2; exit 2; }
kc() { kubectl --context "$CONTEXT" "$@"; }

echo "== model"
model_dir=$("$VENV/bin/inferchaos" model)
MODEL_NAME=$(basename "$model_dir")
mkdir -p "$MODELS_HOST_DIR"
rm -rf "${MODELS_HOST_DIR:?}/$MODEL_NAME"
cp -r "$model_dir" "$MODELS_HOST_DIR/$MODEL_NAME"
chmod -R a+rX "$MODELS_HOST_DIR"

echo "== cluster $CLUSTER"
if ! kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  kind create cluster --name "$CLUSTER" --config "$here/kind-config.yaml" ${KIND_NODE_IMAGE:+--image "$KIND_NODE_IMAGE"} --wait 180s
fi
kc wait --for=condition=Ready nodes --all --timeout=180s

echo "== fake GPUs"
# By its installed name, so that it runs from any directory (not only a checkout's root).
"$VENV/bin/python" -m inferchaos.environments.kind.fake_gpus --context "$CONTEXT" \
  --selector inferchaos.io/pool=gpu --count "$FAKE_GPUS_PER_NODE"

echo "== images"
if ! docker image inspect "$VLLM_IMAGE" >/dev/null 2>&1; then
  docker build -t "$VLLM_IMAGE" --build-arg TORCH_INDEX="$TORCH_INDEX" -f "$here/vllm-cpu.Dockerfile" "$here"
fi
workers=$(kind get nodes --name "$CLUSTER" | grep -v control-plane | paste -sd, -)
kind load docker-image --name "$CLUSTER" --nodes "$workers" "$VLLM_IMAGE"

echo "== KubeRay operator $KUBERAY_VERSION"
helm repo add kuberay https://ray-project.github.io/kuberay-helm/ --force-update >/dev/null
helm upgrade --install kuberay-operator kuberay/kuberay-operator --version "$KUBERAY_VERSION" \
  --namespace kuberay-system --create-namespace --kube-context "$CONTEXT" --wait --timeout 5m

echo "== workloads"
kc apply -f "$here/manifests/namespace.yaml"
# Create the Ray token once: a new one on a re-run would lock the running Ray processes out.
# Its key is auth_token, as KubeRay and Ray's docs have it (kind.yaml's ray.auth_token_key).
if ! kc -n "$NAMESPACE" get secret ray-auth-token >/dev/null 2>&1; then
  kc -n "$NAMESPACE" create secret generic ray-auth-token --from-literal=auth_token="$(openssl rand -hex 32)"
elif [[ -z $(kc -n "$NAMESPACE" get secret ray-auth-token -o jsonpath='{.data.auth_token}') ]]; then
  # An older up.sh wrote the key "token": copy the same token under auth_token, so Ray keeps it.
  old_token=$(kc -n "$NAMESPACE" get secret ray-auth-token -o jsonpath='{.data.token}')
  kc -n "$NAMESPACE" patch secret ray-auth-token --type merge -p "{\"data\":{\"auth_token\":\"$old_token\"}}"
fi
export VLLM_IMAGE RAY_IMAGE MODEL_NAME
for manifest in raycluster.yaml ray-nodeports.yaml vllm.yaml; do
  envsubst '${VLLM_IMAGE} ${RAY_IMAGE} ${MODEL_NAME}' <"$here/manifests/$manifest" | kc apply -f -
done

echo "== waiting for the replicas"
kc -n "$NAMESPACE" rollout status deployment/vllm --timeout=15m
kc -n "$NAMESPACE" wait raycluster/raycluster-inferchaos --for=condition=RayClusterProvisioned --timeout=10m
echo "== routes to the Pod networks (each replica's own URL from the host)"
# kind's node containers sit on a docker bridge the host can reach; their Pod CIDRs cannot be,
# until each gets a route via its node. Without root the per-replica probes cannot connect.
while read -r cidr ip; do
  if [[ $(id -u) -eq 0 ]]; then ip route replace "$cidr" via "$ip"
  elif sudo -n true 2>/dev/null; then sudo ip route replace "$cidr" via "$ip"
  else echo "up.sh: no root: cannot route $cidr via $ip; per-replica probes will not connect" >&2; fi
done < <(kc get nodes -o jsonpath='{range .items[*]}{.spec.podCIDR} {.status.addresses[?(@.type=="InternalIP")].address}{"\n"}{end}')
kc get nodes -o custom-columns='NODE:.metadata.name,GPUS:.status.allocatable.nvidia\.com/gpu'
kc -n "$NAMESPACE" get pods -o wide
echo "kind environment up: context $CONTEXT, namespace $NAMESPACE, model $MODEL_NAME"
