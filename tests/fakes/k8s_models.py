"""Manifests as the official ``kubernetes`` client's models, the types the code reads objects as.

``ApiClient.deserialize`` builds a model from a manifest as it does from an API answer, and
drops what the model has no field for; :func:`as_manifest` turns the model back, so a manifest
that survives the round trip has no field the client cannot see.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from kubernetes.client import ApiClient


def manifest_documents(path: Path) -> list[dict[str, Any]]:
    """Every non-empty document of a multi-document YAML manifest."""
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def model_name(doc: dict[str, Any]) -> str:
    """The client's model for ``doc``: ``batch/v1`` ``CronJob`` is ``V1CronJob``."""
    version = str(doc["apiVersion"]).rsplit("/", 1)[-1]
    return f"{version.capitalize()}{doc['kind']}"


def as_model(doc: dict[str, Any]) -> Any:
    """``doc`` deserialized into its model (V1CronJob, V1Role, ...)."""
    return ApiClient().deserialize(json.dumps(doc), model_name(doc), "application/json")


def as_manifest(model: Any) -> Any:
    """A model as the JSON the client would send."""
    return ApiClient().sanitize_for_serialization(model)
