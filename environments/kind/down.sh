#!/usr/bin/env bash
# Remove the kind environment that up.sh created, with the routes it added to the Pod networks.
set -euo pipefail
CLUSTER=${CLUSTER:-inferchaos}
if command -v kubectl >/dev/null 2>&1; then
  while read -r cidr; do
    [[ -n "$cidr" ]] || continue
    if [[ $(id -u) -eq 0 ]]; then ip route del "$cidr" 2>/dev/null || true
    elif sudo -n true 2>/dev/null; then sudo ip route del "$cidr" 2>/dev/null || true; fi
  done < <(kubectl --context "kind-$CLUSTER" get nodes -o jsonpath='{range .items[*]}{.spec.podCIDR}{"\n"}{end}' 2>/dev/null || true)
fi
kind delete cluster --name "$CLUSTER"
rm -rf /tmp/inferchaos-models
