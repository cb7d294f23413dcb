"""deploy/gameday-cronjob.yaml's Pod passes Pod Security "restricted", checked rule by rule.

No admission controller runs here, so :func:`restricted_violations` implements the Pod Security
Standards' "restricted" profile (https://kubernetes.io/docs/concepts/security/pod-security-standards/,
which includes every "baseline" control) over the official client's models of the Pod template:

baseline: no host namespaces, privileged containers, hostPath volumes or hostPorts; capabilities
added only from the default set; no Unconfined AppArmor or seccomp profile; SELinux only with a
container type and no user or role; the Default /proc mount; only the safe sysctls; no Windows
HostProcess containers.
restricted: volumes only of the core types (configMap, csi, downwardAPI, emptyDir, ephemeral,
persistentVolumeClaim, projected, secret); ``allowPrivilegeEscalation: false``; ``runAsNonRoot:
true``; ``runAsUser`` never 0; seccomp RuntimeDefault or Localhost; capabilities dropping ALL and
adding nothing but NET_BIND_SERVICE. Pod-level settings count for every container that does not
set its own, init containers included.

The negative tests break one rule each and expect the checker to say which, so a checker that
passes everything would fail them.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import V1CronJob, V1PodSecurityContext, V1PodSpec, V1SecurityContext, V1Volume

from tests.fakes.k8s_models import as_model, manifest_documents

ROOT = Path(__file__).resolve().parents[3]
MANIFEST = ROOT / "deploy" / "gameday-cronjob.yaml"
DOCKERFILE = ROOT / "deploy" / "Dockerfile"

RESTRICTED_VOLUME_TYPES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)
BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
RESTRICTED_ADDED_CAPABILITIES = frozenset({"NET_BIND_SERVICE"})
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)
SELINUX_TYPES = frozenset({"container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
ALLOWED_SECCOMP = frozenset({"RuntimeDefault", "Localhost"})


def _volume_type(volume: V1Volume) -> str:
    """The JSON name of the one source a volume sets (``emptyDir``, ``hostPath``, ...)."""
    sources = [
        V1Volume.attribute_map[name]
        for name in V1Volume.model_fields
        if name != "name" and getattr(volume, name) is not None
    ]
    return sources[0] if sources else "none"


def _containers(spec: V1PodSpec) -> Iterator[tuple[str, Any]]:
    for field_name, containers in (
        ("initContainers", spec.init_containers),
        ("containers", spec.containers),
        ("ephemeralContainers", spec.ephemeral_containers),
    ):
        for i, container in enumerate(containers or []):
            yield f"spec.{field_name}[{i}]({container.name})", container


def _pod_level_violations(spec: V1PodSpec, pod: V1PodSecurityContext) -> Iterator[str]:
    for name, value in (
        ("hostNetwork", spec.host_network),
        ("hostPID", spec.host_pid),
        ("hostIPC", spec.host_ipc),
    ):
        if value:
            yield f"spec.{name}: must be false (host namespaces)"
    for i, volume in enumerate(spec.volumes or []):
        kind = _volume_type(volume)
        if kind not in RESTRICTED_VOLUME_TYPES:
            yield f"spec.volumes[{i}]({volume.name}).{kind}: volume type not allowed"
    if pod.run_as_non_root is False:
        yield "spec.securityContext.runAsNonRoot: must be true"
    if pod.run_as_user == 0:
        yield "spec.securityContext.runAsUser: must not be 0"
    if pod.seccomp_profile is not None and pod.seccomp_profile.type not in ALLOWED_SECCOMP:
        yield f"spec.securityContext.seccompProfile.type: must be RuntimeDefault or Localhost, is {pod.seccomp_profile.type}"
    if pod.app_armor_profile is not None and pod.app_armor_profile.type == "Unconfined":
        yield "spec.securityContext.appArmorProfile.type: must not be Unconfined"
    yield from _selinux_violations("spec.securityContext", pod.se_linux_options)
    for sysctl in pod.sysctls or []:
        if sysctl.name not in SAFE_SYSCTLS:
            yield f"spec.securityContext.sysctls: {sysctl.name} is not a safe sysctl"
    if pod.windows_options is not None and pod.windows_options.host_process:
        yield "spec.securityContext.windowsOptions.hostProcess: must be false"


def _selinux_violations(where: str, options: Any) -> Iterator[str]:
    if options is None:
        return
    if options.type and options.type not in SELINUX_TYPES:
        yield f"{where}.seLinuxOptions.type: {options.type} is not a container type"
    if options.user or options.role:
        yield f"{where}.seLinuxOptions: must not set user or role"


def _container_violations(where: str, container: Any, pod: V1PodSecurityContext) -> Iterator[str]:
    sc = container.security_context or V1SecurityContext()
    at = f"{where}.securityContext"
    if sc.privileged:
        yield f"{at}.privileged: must be false"
    if sc.allow_privilege_escalation is not False:
        yield f"{at}.allowPrivilegeEscalation: must be false, is {sc.allow_privilege_escalation}"
    # Pod-level values hold for a container that does not set its own.
    non_root = sc.run_as_non_root if sc.run_as_non_root is not None else pod.run_as_non_root
    if non_root is not True:
        yield f"{at}.runAsNonRoot: must be true (here or at the Pod), is {non_root}"
    if sc.run_as_user == 0:
        yield f"{at}.runAsUser: must not be 0"
    seccomp = sc.seccomp_profile or pod.seccomp_profile
    if seccomp is None or seccomp.type not in ALLOWED_SECCOMP:
        yield f"{at}.seccompProfile.type: must be RuntimeDefault or Localhost (here or at the Pod), is {seccomp and seccomp.type}"
    capabilities = sc.capabilities
    if "ALL" not in ((capabilities and capabilities.drop) or []):
        yield f"{at}.capabilities.drop: must include ALL"
    for added in (capabilities and capabilities.add) or []:
        if added not in RESTRICTED_ADDED_CAPABILITIES:
            baseline = "" if added in BASELINE_CAPABILITIES else ", nor in the baseline set"
            yield f"{at}.capabilities.add: {added} is not NET_BIND_SERVICE{baseline}"
    if sc.app_armor_profile is not None and sc.app_armor_profile.type == "Unconfined":
        yield f"{at}.appArmorProfile.type: must not be Unconfined"
    yield from _selinux_violations(at, sc.se_linux_options)
    if sc.proc_mount not in (None, "Default"):
        yield f"{at}.procMount: must be Default"
    if sc.windows_options is not None and sc.windows_options.host_process:
        yield f"{at}.windowsOptions.hostProcess: must be false"
    for port in container.ports or []:
        if port.host_port:
            yield f"{where}.ports: hostPort {port.host_port} not allowed"


def restricted_violations(spec: V1PodSpec, annotations: dict[str, str] | None = None) -> list[str]:
    """Every way ``spec`` breaks Pod Security "restricted"; empty when it passes."""
    pod = spec.security_context or V1PodSecurityContext()
    problems = list(_pod_level_violations(spec, pod))
    for where, container in _containers(spec):
        problems += _container_violations(where, container, pod)
    for key, value in (annotations or {}).items():
        if key.startswith("container.apparmor.security.beta.kubernetes.io/") and value == "unconfined":
            problems.append(f"metadata.annotations[{key}]: must not be unconfined")
    return problems


def cronjob(change: Callable[[dict[str, Any]], None] | None = None) -> V1CronJob:
    """The manifest's CronJob as the client's model, after ``change`` to its Pod spec."""
    doc = copy.deepcopy(next(d for d in manifest_documents(MANIFEST) if d["kind"] == "CronJob"))
    if change is not None:
        change(doc["spec"]["jobTemplate"]["spec"]["template"]["spec"])
    model = as_model(doc)
    assert isinstance(model, V1CronJob)
    return model


def pod_template(job: V1CronJob) -> tuple[V1PodSpec, dict[str, str]]:
    template = job.spec.job_template.spec.template
    return template.spec, (template.metadata.annotations if template.metadata else None) or {}


def test_the_gameday_pod_passes_pod_security_restricted() -> None:
    spec, annotations = pod_template(cronjob())
    assert [c.name for c in spec.init_containers] == ["cleanup"]  # init containers are checked too
    assert restricted_violations(spec, annotations) == []


def _init(spec: dict[str, Any]) -> dict[str, Any]:
    return spec["initContainers"][0]


def _main(spec: dict[str, Any]) -> dict[str, Any]:
    return spec["containers"][0]


BREAKS = {
    "allowPrivilegeEscalation missing": (
        lambda s: _init(s)["securityContext"].pop("allowPrivilegeEscalation"),
        "spec.initContainers[0](cleanup).securityContext.allowPrivilegeEscalation: must be false, is None",
    ),
    "privilege escalation allowed": (
        lambda s: _main(s)["securityContext"].update(allowPrivilegeEscalation=True),
        "spec.containers[0](gameday).securityContext.allowPrivilegeEscalation: must be false, is True",
    ),
    "runAsNonRoot only at no level": (
        lambda s: s["securityContext"].pop("runAsNonRoot"),
        "spec.initContainers[0](cleanup).securityContext.runAsNonRoot: must be true (here or at the Pod), is None",
    ),
    "a container opting out of runAsNonRoot": (
        lambda s: _main(s)["securityContext"].update(runAsNonRoot=False),
        "spec.containers[0](gameday).securityContext.runAsNonRoot: must be true (here or at the Pod), is False",
    ),
    "root user in a container": (
        lambda s: _main(s)["securityContext"].update(runAsUser=0),
        "spec.containers[0](gameday).securityContext.runAsUser: must not be 0",
    ),
    "root user for the Pod": (
        lambda s: s["securityContext"].update(runAsUser=0),
        "spec.securityContext.runAsUser: must not be 0",
    ),
    "no seccomp profile": (
        lambda s: s["securityContext"].pop("seccompProfile"),
        "spec.containers[0](gameday).securityContext.seccompProfile.type: must be RuntimeDefault or Localhost (here or at the Pod), is None",
    ),
    "an Unconfined container": (
        lambda s: _init(s)["securityContext"].update(seccompProfile={"type": "Unconfined"}),
        "spec.initContainers[0](cleanup).securityContext.seccompProfile.type: must be RuntimeDefault or Localhost (here or at the Pod), is Unconfined",
    ),
    "capabilities kept": (
        lambda s: _main(s)["securityContext"].pop("capabilities"),
        "spec.containers[0](gameday).securityContext.capabilities.drop: must include ALL",
    ),
    "a capability added": (
        lambda s: _main(s)["securityContext"]["capabilities"].update(add=["SYS_ADMIN"]),
        "spec.containers[0](gameday).securityContext.capabilities.add: SYS_ADMIN is not NET_BIND_SERVICE, nor in the baseline set",
    ),
    "privileged": (
        lambda s: _main(s)["securityContext"].update(privileged=True),
        "spec.containers[0](gameday).securityContext.privileged: must be false",
    ),
    "a hostPath volume": (
        lambda s: s["volumes"].append({"name": "host", "hostPath": {"path": "/var/run"}}),
        "spec.volumes[5](host).hostPath: volume type not allowed",
    ),
    "an nfs volume": (
        lambda s: s["volumes"].append({"name": "share", "nfs": {"server": "nfs", "path": "/"}}),
        "spec.volumes[5](share).nfs: volume type not allowed",
    ),
    "the host network": (
        lambda s: s.update(hostNetwork=True),
        "spec.hostNetwork: must be false (host namespaces)",
    ),
    "the host PIDs": (lambda s: s.update(hostPID=True), "spec.hostPID: must be false (host namespaces)"),
    "a host port": (
        lambda s: _main(s).update(ports=[{"containerPort": 8080, "hostPort": 8080}]),
        "spec.containers[0](gameday).ports: hostPort 8080 not allowed",
    ),
    "an unsafe sysctl": (
        lambda s: s["securityContext"].update(sysctls=[{"name": "kernel.msgmax", "value": "1"}]),
        "spec.securityContext.sysctls: kernel.msgmax is not a safe sysctl",
    ),
    "an unmasked /proc": (
        lambda s: _init(s)["securityContext"].update(procMount="Unmasked"),
        "spec.initContainers[0](cleanup).securityContext.procMount: must be Default",
    ),
}


@pytest.mark.parametrize("name", list(BREAKS))
def test_the_checker_refuses_a_pod_that_breaks_a_rule(name: str) -> None:
    change, violation = BREAKS[name]
    spec, annotations = pod_template(cronjob(change))
    assert violation in restricted_violations(spec, annotations)


def test_what_the_pod_writes_is_on_a_volume_and_the_rest_is_read_only() -> None:
    spec, _ = pod_template(cronjob())
    volumes = {v.name: v for v in spec.volumes}
    home = re.search(r"^ENV HOME=(\S+)$", DOCKERFILE.read_text(), re.MULTILINE)
    assert home, "deploy/Dockerfile sets no HOME"
    for _, container in _containers(spec):
        assert container.security_context.read_only_root_filesystem is True
        mounts = {m.mount_path: volumes[m.name] for m in container.volume_mounts}
        for scratch in ("/tmp", home.group(1)):
            assert mounts[scratch].empty_dir is not None, f"{container.name}: {scratch} is on no emptyDir"
        ledger = next(e.value for e in container.env if e.name == "INFERCHAOS_HOME")
        assert ledger.startswith("/reports/") and mounts["/reports"].persistent_volume_claim is not None


def test_the_pod_runs_as_the_images_user_from_the_images_build() -> None:
    spec, _ = pod_template(cronjob())
    dockerfile = DOCKERFILE.read_text()
    user = re.search(r"^USER (\d+):(\d+)$", dockerfile, re.MULTILINE)
    assert user, "deploy/Dockerfile's USER must be numeric (uid:gid): runAsNonRoot is checked against it"
    pod = spec.security_context
    assert (pod.run_as_user, pod.run_as_group) == (int(user.group(1)), int(user.group(2)))
    built = re.search(r"docker build -f deploy/Dockerfile -t (\S+) \.", dockerfile)
    assert built and {c.image for _, c in _containers(spec)} == {built.group(1)}


def _container_level_only(spec: dict[str, Any]) -> None:
    """Move runAsNonRoot and seccomp from the Pod onto every container; add what restricted allows."""
    pod = spec["securityContext"]
    non_root, seccomp = pod.pop("runAsNonRoot"), pod.pop("seccompProfile")
    for container in (_init(spec), _main(spec)):
        container["securityContext"].update(runAsNonRoot=non_root, seccompProfile=seccomp)
    _main(spec)["securityContext"]["capabilities"]["add"] = ["NET_BIND_SERVICE"]
    _init(spec)["securityContext"]["seccompProfile"] = {
        "type": "Localhost",
        "localhostProfile": "inferchaos.json",
    }
    spec["volumes"].append(
        {
            "name": "scratch",
            "ephemeral": {
                "volumeClaimTemplate": {
                    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
                }
            },
        }
    )


def test_the_checker_passes_what_restricted_allows() -> None:
    spec, annotations = pod_template(cronjob(_container_level_only))
    assert restricted_violations(spec, annotations) == []
