#!/usr/bin/env bash
# The action's run step (action.yml), read from INFERCHAOS_* variables so that it can be run,
# and tested, outside GitHub Actions. It writes `exit-code=N` to $GITHUB_OUTPUT and exits 0:
# the action's last step fails the job by that code, after the run folders are uploaded.
set -uo pipefail

bin=${INFERCHAOS_BIN:-inferchaos}
out=${INFERCHAOS_OUT:-runs}
common=(--env "${INFERCHAOS_ENV:-local}" --out "$out")
[ -n "${INFERCHAOS_CONFIG:-}" ] && common+=(--config "$INFERCHAOS_CONFIG")
# shellcheck disable=SC2206  # extra arguments are split on spaces, as a caller writes them
extra=(${INFERCHAOS_ARGS:-})

rc=0
worst() { [ "$1" -gt "$rc" ] && rc=$1; return 0; }

if [ -n "${INFERCHAOS_EXPERIMENTS:-}" ]; then
  mapfile -t experiments < <(printf '%s\n' "$INFERCHAOS_EXPERIMENTS" | sed '/^[[:space:]]*$/d')
  # Every experiment is validated and planned before the first one injects anything.
  if [ "${INFERCHAOS_DRY_RUN_FIRST:-true}" = true ]; then
    for experiment in "${experiments[@]}"; do
      "$bin" run "$(printf '%s' "$experiment" | xargs)" "${common[@]}" --dry-run "${extra[@]}"
      worst $?
    done
  fi
  if [ "$rc" -eq 0 ]; then
    for experiment in "${experiments[@]}"; do
      "$bin" run "$(printf '%s' "$experiment" | xargs)" "${common[@]}" "${extra[@]}"
      worst $?
    done
  fi
else
  game=(gameday "${common[@]}")
  [ -n "${INFERCHAOS_SUITE:-}" ] && game+=(--suite "$INFERCHAOS_SUITE")
  [ "${INFERCHAOS_CONTROLS:-false}" = true ] && game+=(--controls)
  if [ "${INFERCHAOS_DRY_RUN_FIRST:-true}" = true ]; then
    "$bin" "${game[@]}" --dry-run "${extra[@]}"
    worst $?
  fi
  # A dry run that refused (bad input, a plan outside the allow-list) injects nothing further.
  if [ "$rc" -eq 0 ]; then
    "$bin" "${game[@]}" "${extra[@]}"
    worst $?
  fi
fi

echo "inferchaos exit code: $rc"
if [ -n "${GITHUB_OUTPUT:-}" ]; then
  echo "exit-code=$rc" >> "$GITHUB_OUTPUT"
fi
exit 0
