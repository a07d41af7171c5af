"""Validate Kubernetes manifests against the vendored KubeRay CRD schemas, as the API server would.

The CRDs' ``openAPIV3Schema`` (``deploy/kuberay/crds/``, KubeRay v1.7.0) is plain JSON Schema plus
Kubernetes extensions; this module makes it behave like the API server with
``kubectl apply --validate=strict`` (kubectl's default):

- an object that lists ``properties`` and is not ``x-kubernetes-preserve-unknown-fields`` gets
  ``additionalProperties: false``, so a misspelled or removed field is an error, not pruned;
- ``x-kubernetes-int-or-string`` accepts an integer or a string; ``nullable`` accepts null;
- ``x-kubernetes-list-type: set`` / ``map`` (with ``x-kubernetes-list-map-keys``) refuse
  duplicate items / duplicate keys (two containers with one name, say).

CEL rules (``x-kubernetes-validations``) are not evaluated (see the crds README).
"""

from __future__ import annotations

import copy
import json
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator

import jsonschema

CRDS = Path(__file__).resolve().parent.parent / "deploy" / "kuberay" / "crds"
SCHEMAS = {"RayCluster": "raycluster.v1.schema.json", "RayService": "rayservice.v1.schema.json"}
DEPRECATED = {
    ("RayService", "spec.serviceUnhealthySecondThreshold"): "not used anymore (KubeRay issue 1685)",
    ("RayService", "spec.deploymentUnhealthySecondThreshold"): "not used anymore (KubeRay issue 1685)",
}
"""Fields the CRDs still accept but KubeRay v1.7.0 ignores: its Go types
(``ray-operator/apis/ray/v1/rayservice_types.go``) mark them ``// Deprecated: This field is not
used anymore``, which controller-gen does not carry into the schema, so :func:`errors` cannot
see them; :func:`deprecated` lists them from this table."""


def strict(schema: Any) -> Any:
    """A copy of a CRD schema with the API server's strictness spelled out in JSON Schema."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict(v) if k not in ("properties", "default", "enum") else v for k, v in schema.items()}
    if "properties" in schema:
        out["properties"] = {k: strict(v) for k, v in schema["properties"].items()}
        if not schema.get("x-kubernetes-preserve-unknown-fields") and "additionalProperties" not in schema:
            out["additionalProperties"] = False
    if schema.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    if schema.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


def _list_type(validator: Any, kind: str, instance: Any, schema: dict[str, Any]) -> Iterator[jsonschema.ValidationError]:
    if not isinstance(instance, list):
        return
    if kind == "set":
        seen = [json.dumps(i, sort_keys=True) for i in instance]
        if len(seen) != len(set(seen)):
            yield jsonschema.ValidationError("duplicate items in a list of type set")
    elif kind == "map":
        keys = schema.get("x-kubernetes-list-map-keys", [])
        seen = [tuple(json.dumps(i.get(k)) for k in keys) for i in instance if isinstance(i, dict)]
        if len(seen) != len(set(seen)):
            yield jsonschema.ValidationError(f"duplicate entries with the same {', '.join(keys)} in a list of type map")


Validator = jsonschema.validators.extend(jsonschema.Draft7Validator, {"x-kubernetes-list-type": _list_type})


@lru_cache(maxsize=None)
def validator(kind: str) -> Any:
    """The strict validator for one CRD kind (``RayCluster`` or ``RayService``)."""
    schema = json.loads((CRDS / SCHEMAS[kind]).read_text())
    return Validator(strict(copy.deepcopy(schema)))


def errors(manifest: dict[str, Any]) -> list[str]:
    """Every schema error of one manifest, as ``path: message`` lines (empty: valid)."""
    kind = manifest.get("kind")
    if kind not in SCHEMAS:
        return [f"kind: expected one of {sorted(SCHEMAS)}, got {kind!r}"]
    if manifest.get("apiVersion") != "ray.io/v1":
        return [f"apiVersion: expected ray.io/v1, got {manifest.get('apiVersion')!r}"]
    found = validator(kind).iter_errors(manifest)
    return sorted(f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in found)


def deprecated(manifest: dict[str, Any]) -> list[str]:
    """The fields of :data:`DEPRECATED` that ``manifest`` sets, each with why it should not."""
    found = []
    for (kind, dotted), why in DEPRECATED.items():
        node: Any = manifest if manifest.get("kind") == kind else None
        for key in dotted.split("."):
            node = node.get(key) if isinstance(node, dict) else None
        if node is not None:
            found.append(f"{dotted}: {why}")
    return found
