"""deploy/gameday-cronjob.yaml: valid Kubernetes, and a command line the real CLI accepts.

No cluster runs here; these checks catch a manifest that drifted from the CLI (a flag renamed,
a path outside its volume) before a scheduled game day fails at 06:00 on a Monday.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import kubernetes_validate
import pytest
import yaml

from inferchaos.cli.main import cli
from inferchaos.environments.k8s_config import load_k8s_env_config
from inferchaos.faults.registry import fault_names
from inferchaos.primitives.kube.access import KubeAccess
from inferchaos.run.kube_access import needed_access
from tests.fakes.k8s_models import as_manifest, as_model, manifest_documents, model_name

ROOT = Path(__file__).resolve().parents[3]
MANIFEST = ROOT / "deploy" / "gameday-cronjob.yaml"
EXAMPLE_CONFIG = ROOT / "environments" / "cluster.example.yaml"


def documents() -> list[dict[str, Any]]:
    return manifest_documents(MANIFEST)


def find(kind: str) -> dict[str, Any]:
    return next(d for d in documents() if d["kind"] == kind)


def pod_spec() -> dict[str, Any]:
    return find("CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"]


def container(name: str) -> dict[str, Any]:
    spec = pod_spec()
    return next(c for c in [*spec.get("initContainers", []), *spec["containers"]] if c["name"] == name)


def parsed(name: str) -> click.Context:
    """The container's command line, parsed by the real `inferchaos` command group."""
    entry = container(name)
    assert entry["command"] == ["inferchaos"]
    args = entry["args"]
    # Under the group's own context, as `inferchaos` runs it: a command parsed without it caches
    # click's default help option (no -h) for every later --help in this process.
    root = click.Context(cli, info_name="inferchaos", **cli.context_settings)
    command = cli.get_command(root, args[0])
    assert command is not None, f"inferchaos has no command {args[0]!r}"
    return command.make_context(args[0], list(args[1:]), parent=root)


def volume_of(path: str, name: str) -> dict[str, Any]:
    """The volume that ``path`` lies on in container ``name`` (the deepest mount above it)."""
    mounts = [
        m
        for m in container(name)["volumeMounts"]
        if path == m["mountPath"] or path.startswith(m["mountPath"] + "/")
    ]
    assert mounts, f"{path} is on no volume of container {name}"
    mount = max(mounts, key=lambda m: len(m["mountPath"]))
    return next(v for v in pod_spec()["volumes"] if v["name"] == mount["name"])


@pytest.mark.parametrize("doc", documents(), ids=lambda d: f"{d['kind']}-{d['metadata']['name']}")
def test_manifest_is_schema_valid(doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, "1.31", strict=True)


@pytest.mark.parametrize("doc", documents(), ids=lambda d: f"{d['kind']}-{d['metadata']['name']}")
def test_every_document_is_an_official_client_model(doc: dict[str, Any]) -> None:
    model = as_model(doc)
    assert type(model).__name__ == model_name(doc)
    # Nothing dropped on the way in: every field of the manifest is one the client's model has.
    assert as_manifest(model) == doc


def test_gameday_command_matches_the_cli() -> None:
    params = parsed("gameday").params
    assert params["env_name"] == "cluster" and not params["dry_run"]
    assert (
        volume_of(str(params["config_file"]), "gameday")["configMap"]["name"] == "inferchaos-cluster-config"
    )
    # The built-in k8s suite names kind; a cluster runs its own copies, mounted as a folder.
    assert volume_of(params["suite"], "gameday")["configMap"]["name"] == "inferchaos-experiments"
    assert "persistentVolumeClaim" in volume_of(str(params["out_dir"]), "gameday")


def test_cleanup_runs_first_on_the_same_config_and_ledger() -> None:
    cleanup, gameday = parsed("cleanup").params, parsed("gameday").params
    assert cleanup["config_file"] == gameday["config_file"]
    homes = {
        c: next(e["value"] for e in container(c)["env"] if e["name"] == "INFERCHAOS_HOME")
        for c in ("cleanup", "gameday")
    }
    assert homes["cleanup"] == homes["gameday"]
    # The ledger must outlive a killed Pod, so that the next game day's cleanup can revert what it left.
    assert "persistentVolumeClaim" in volume_of(homes["gameday"], "gameday")


def test_rbac_covers_the_example_config() -> None:
    config = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    role = find("Role")
    assert role["metadata"]["namespace"] == config["kube"]["namespace"]
    secrets = next(r for r in role["rules"] if "secrets" in r["resources"])
    assert secrets["resourceNames"] == [config["ray"]["auth_token_secret"]] and secrets["verbs"] == ["get"]
    account = find("ServiceAccount")["metadata"]
    assert pod_spec()["serviceAccountName"] == account["name"]
    for binding in (find("RoleBinding"), find("ClusterRoleBinding")):
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": account["name"], "namespace": account["namespace"]}
        ]


def _grants(rules: list[dict[str, Any]], access: KubeAccess) -> bool:
    resource = f"{access.resource}/{access.subresource}" if access.subresource else access.resource
    return any(
        access.group in rule["apiGroups"]
        and resource in rule["resources"]
        and access.verb in rule["verbs"]
        and (not rule.get("resourceNames") or access.name in rule["resourceNames"])
        for rule in rules
    )


def test_rbac_grants_every_access_of_the_k8s_faults_but_delete_nodes() -> None:
    """What the game day's preflight asks for (inferchaos/run/kube_access.py), granted by the manifest."""
    config = load_k8s_env_config(EXAMPLE_CONFIG, "cluster")
    role = find("Role")
    faults = [n for n in fault_names() if n.startswith("k8s.") and n != "k8s.delete_node"]
    for needed in needed_access(config, faults):
        access = needed.access
        # A ClusterRole's rules hold in every namespace; the Role's only in its own.
        rules = find("ClusterRole")["rules"] + (
            role["rules"] if access.namespace == role["metadata"]["namespace"] else []
        )
        assert _grants(rules, access), f"deploy/gameday-cronjob.yaml does not grant {access.describe()}"
    deleting = KubeAccess("delete", "nodes")
    assert not _grants(find("ClusterRole")["rules"], deleting)  # left out on purpose, as the manifest says
