"""The environment config's allow-list refuses anything it does not name, before injection."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferchaos.errors import ConfigError
from inferchaos.run.env_config import AllowList, ensure_plan_is_allowed, load_env_config


def test_kind_and_cluster_have_no_default_allow_list(tmp_path: Path) -> None:
    config = tmp_path / "cluster.yaml"
    config.write_text("settings: {namespace: llm}\n")
    with pytest.raises(ConfigError, match="allow: required for the cluster environment"):
        load_env_config(config, "cluster")
    assert load_env_config(config, "local").allow == AllowList()


def test_unknown_allow_key_is_named(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("allow: {namespace: [llm]}\n")
    with pytest.raises(
        ConfigError,
        match=r"c\.yaml: unknown key\(s\) allow\.namespace; known: allow\.contexts, allow\.namespaces",
    ):
        load_env_config(config, "kind")


def test_the_local_allow_list_has_the_same_keys_as_the_kubernetes_one(tmp_path: Path) -> None:
    config = tmp_path / "local.yaml"
    config.write_text(
        "allow: {contexts: [kind-x], ray_addresses: ['127.0.0.1:6379'], devices: ['host:0'], max_targets: 2}\n"
    )
    allow = load_env_config(config, "local").allow
    assert allow == AllowList(
        contexts=("kind-x",), ray_addresses=("127.0.0.1:6379",), devices=("host:0",), max_targets=2
    )
    config.write_text("allow: {max_targets: 0}\n")
    with pytest.raises(ConfigError, match=r"local\.yaml: allow\.max_targets: must be at least 1, got 0"):
        load_env_config(config, "local")


def test_a_device_outside_the_list_is_refused() -> None:
    allow = AllowList(devices=("host:0",), max_targets=2)
    ensure_plan_is_allowed(["device:host:0", "process:squatter (new)"], allow)
    with pytest.raises(ConfigError, match="device host:1 is not allowed"):
        ensure_plan_is_allowed(["device:host:1", "replica:replica-1"], allow)


def test_more_targets_than_allowed_at_once_are_refused() -> None:
    with pytest.raises(ConfigError, match="max_targets"):
        ensure_plan_is_allowed(["vllm:replica-0", "vllm:replica-1"], AllowList(max_targets=1))
    # A node and the replica it hosts are one target, not two.
    ensure_plan_is_allowed(
        ["ray-node:worker-2:abc", "process-tree:12", "replica:replica-1"], AllowList(max_targets=1)
    )


def test_another_ray_cluster_is_refused() -> None:
    with pytest.raises(ConfigError, match="ray_addresses"):
        ensure_plan_is_allowed([], AllowList(ray_addresses=("127.0.0.2:61006",)), "10.0.0.5:6379")
