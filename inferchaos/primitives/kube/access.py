"""Asking the API server what this identity may do: one SelfSubjectAccessReview per access.

A SelfSubjectAccessReview (authorization.k8s.io/v1) asks the authorizer chain about the
credentials of the request itself, as ``kubectl auth can-i`` does: no RBAC object has to be
readable, and every authenticated identity may create one.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from inferchaos.primitives.kube.api import api_errors

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class KubeAccess:
    """One verb on one resource, where: a namespace, or ``""`` for cluster-wide.

    ``group`` is the API group (``""`` for the core group), ``subresource`` e.g. ``eviction``,
    ``name`` narrows to one object (a Secret the config names).
    """

    verb: str
    resource: str
    group: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""

    def describe(self) -> str:
        """``create pods/eviction in inferchaos``, ``list rayclusters.ray.io in inference``, ``patch nodes (cluster-wide)``."""
        what = self.resource if not self.group else f"{self.resource}.{self.group}"
        if self.subresource:
            what += f"/{self.subresource}"
        if self.name:
            what += f" {self.name}"
        return f"{self.verb} {what} {f'in {self.namespace}' if self.namespace else '(cluster-wide)'}"


@dataclass(frozen=True)
class AccessReview:
    """The authorizer's answer about one access."""

    access: KubeAccess
    allowed: bool
    # Why, when the authorizer says (RBAC names the binding that allows; a denial has no reason).
    reason: str = ""


def review_access(api_client: ApiClient, access: KubeAccess) -> AccessReview:
    """Whether the client's identity may perform ``access``; K8sError when the API cannot be asked."""
    from kubernetes.client import (
        AuthorizationV1Api,
        V1ResourceAttributes,
        V1SelfSubjectAccessReview,
        V1SelfSubjectAccessReviewSpec,
    )

    attributes = V1ResourceAttributes(
        verb=access.verb,
        resource=access.resource,
        group=access.group or None,
        subresource=access.subresource or None,
        namespace=access.namespace or None,
        name=access.name or None,
    )
    body = V1SelfSubjectAccessReview(
        api_version="authorization.k8s.io/v1",
        kind="SelfSubjectAccessReview",
        spec=V1SelfSubjectAccessReviewSpec(resource_attributes=attributes),
    )
    with api_errors(f"ask whether this identity may {access.describe()}"):
        answer = AuthorizationV1Api(api_client).create_self_subject_access_review(body)
    status = answer.status
    allowed = bool(status and status.allowed)
    reason = (status.reason or status.evaluation_error or "") if status else ""
    logger.debug("%s: %s %s", access.describe(), "allowed" if allowed else "denied", reason)
    return AccessReview(access, allowed, reason)
