#!/usr/bin/env bash
# Remove the kind environment that up.sh created.
set -euo pipefail
CLUSTER=${CLUSTER:-inferchaos}
kind delete cluster --name "$CLUSTER"
rm -rf /tmp/inferchaos-models
