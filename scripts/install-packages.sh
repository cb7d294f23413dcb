#!/usr/bin/env bash
# The distribution packages the default suite and the tests need, from one place: `make
# gameday`, `make test` and .ci/run all run this. As root with apt-get, it installs what is
# missing; otherwise it says in one line what it could not set up and what will skip.
# Sourced, it leaves NOT_INSTALLED (the packages still missing) for its caller.
NOT_INSTALLED=()
# install_missing COMMAND PACKAGE WHAT-SKIPS: the distribution's PACKAGE where COMMAND is missing.
install_missing() {
  if ! command -v "$1" >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    if [ -z "${APT_UPDATED:-}" ]; then
      timeout 600 apt-get update -qq || true
      APT_UPDATED=1
    fi
    if ! DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq "$2" >/dev/null; then
      echo "$2 could not be installed"
    fi
  fi
  if ! command -v "$1" >/dev/null 2>&1; then
    echo "$2 is not installed (apt-get install $2, as root): $3 will skip"
    NOT_INSTALLED+=("$2")
  fi
}
# The report test renders a page in headless Chromium.
install_missing chromium chromium "the report rendering test"
# The GCS fault-tolerance tests (ray.kill_gcs, the ha suite) run Ray's GCS on a real Redis.
install_missing redis-server redis-server "the GCS fault-tolerance scenario and tests"
# The --pushgateway tests push a run's metrics to a real Pushgateway they start on a free
# loopback port (never the package's own service).
install_missing prometheus-pushgateway prometheus-pushgateway "the real Pushgateway tests"
# --prometheus, the alerting rules' promtool checks and the Prometheus backend's tests.
install_missing prometheus prometheus "--prometheus and the alerting-rule tests"
# The network scenarios cut and slow links between real namespaces: nftables, iproute2, and
# util-linux's nsenter (usually there already).
install_missing nft nftables "the network scenarios"
install_missing ip iproute2 "the network scenarios"
install_missing nsenter util-linux "the network scenarios"
# Degraded links queue the worker's packets to a delayer through iptables' NFQUEUE target.
install_missing iptables-legacy iptables "the slow-link scenario"
# The kube-access tests make the fake API server's certificate with the openssl command.
install_missing openssl openssl "the kube-access tests"
