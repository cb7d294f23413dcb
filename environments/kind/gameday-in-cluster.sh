#!/usr/bin/env bash
# Run deploy/gameday-cronjob.yaml's game day inside the kind environment, as a real cluster runs it:
#   1. a namespace of its own, inferchaos-gameday, that enforces Pod Security "restricted";
#   2. ConfigMaps of the config (in-cluster.yaml) and of the k8s experiments a Pod can run, copied
#      with environment.name: cluster (k8s_node_loss stops a node's container: not from a Pod);
#   3. the manifest, its namespaces mapped onto kind's (the workloads run in inferchaos);
#   4. a Job from the CronJob (`kubectl create job --from=cronjob/...`), waited for; its logs printed.
# Needs: kubectl; the kind environment up (up.sh) and the image loaded into it:
#   docker build -f deploy/Dockerfile -t inferchaos:local . && kind load docker-image --name inferchaos inferchaos:local
# Exit status: 0 when the Job completed (the game day passed), 1 when it failed or did not finish.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# The folder that holds experiments/ beside environments/: a checkout's root, or the installed
# inferchaos package (its experiments are package data there).
pkg=$(cd "$here/../.." && pwd)

CLUSTER=${CLUSTER:-inferchaos}
CONTEXT="kind-$CLUSTER"
WORKLOADS=inferchaos                 # kube.namespace of in-cluster.yaml; deploy/ calls it inference
GAMEDAY=inferchaos-gameday           # the CronJob's namespace; deploy/ calls it inferchaos
IMAGE=${IMAGE:-inferchaos:local}
TIMEOUT_S=${TIMEOUT_S:-2400}
SUITE=(anti_affinity_pending gpu_ledger_squat)
# The CronJob ships in a checkout's deploy/, beside the Dockerfile that builds its image.
CRONJOB=${CRONJOB:-$pkg/deploy/gameday-cronjob.yaml}
[[ -f $CRONJOB ]] || { echo "gameday-in-cluster.sh: no CronJob manifest at $CRONJOB: set CRONJOB to deploy/gameday-cronjob.yaml of a checkout" >&2; exit 2; }

kc() { kubectl --context "$CONTEXT" "$@"; }

echo "== namespace $GAMEDAY (enforces Pod Security restricted)"
kc create namespace "$GAMEDAY" --dry-run=client -o yaml | kc apply -f -
kc label --overwrite namespace "$GAMEDAY" pod-security.kubernetes.io/enforce=restricted

echo "== config and experiments"
kc -n "$GAMEDAY" create configmap inferchaos-cluster-config --from-file=cluster.yaml="$here/in-cluster.yaml" \
  --dry-run=client -o yaml | kc apply -f -
suite=$(mktemp -d)
trap 'rm -rf "$suite"' EXIT
for name in "${SUITE[@]}"; do
  sed 's/^environment: {name: kind}$/environment: {name: cluster}/' "$pkg/experiments/$name.yaml" >"$suite/$name.yaml"
  grep -qx 'environment: {name: cluster}' "$suite/$name.yaml" ||
    { echo "gameday-in-cluster.sh: experiments/$name.yaml has no 'environment: {name: kind}' line" >&2; exit 2; }
done
kc -n "$GAMEDAY" create configmap inferchaos-experiments --from-file="$suite" --dry-run=client -o yaml | kc apply -f -

echo "== CronJob, ServiceAccount and RBAC"
sed -e "s/namespace: inferchaos\b/namespace: $GAMEDAY/g" -e "s/namespace: inference\b/namespace: $WORKLOADS/g" \
  -e "s#image: inferchaos:local#image: $IMAGE#" "$CRONJOB" | kc apply -f -

echo "== a Job from the CronJob"
job="gameday-$(date +%s)"
kc -n "$GAMEDAY" create job "$job" --from=cronjob/inferchaos-gameday
outcome=""
deadline=$((SECONDS + TIMEOUT_S))
while [[ -z $outcome && $SECONDS -lt $deadline ]]; do
  sleep 10
  conditions=$(kc -n "$GAMEDAY" get job "$job" \
    -o jsonpath='{range .status.conditions[?(@.status=="True")]}{.type}{" "}{end}' || true)
  case " $conditions " in
    *" Complete "*) outcome=Complete ;;
    *" Failed "*) outcome=Failed ;;
  esac
done
kc -n "$GAMEDAY" logs "job/$job" --all-containers --prefix || true
if [[ $outcome != Complete ]]; then
  # A Pod that admission refused (Pod Security) never starts: its reason is in the events.
  kc -n "$GAMEDAY" get events --sort-by=.lastTimestamp | tail -n 20 || true
  echo "game day Job $job: ${outcome:-not finished after ${TIMEOUT_S}s}" >&2
  exit 1
fi
echo "game day Job $job: Complete"
