"""Built-in Kubernetes objects checked as the cluster would check them.

1. The JSON schemas of kubernetes-validate, strict (unknown fields refused), at the Kubernetes version of the dev
   cluster's node image (kind v0.32.0 and v0.33.0 default to kindest/node v1.36.x:
   kubernetes-sigs/kind pkg/apis/config/defaults/image.go). Every error is reported, not only the first.
2. What those schemas cannot say and the API server or the kubelet checks on the fields the program fills
   (k8s.io/apimachinery v0.36.3 pkg/api/validation/objectmeta.go and generic.go, kubernetes
   pkg/apis/core/validation/validation.go): object names by kind, namespaces, label keys and values, annotation
   keys and their total size, ConfigMap and Secret keys and size, quantities, container names, image references as
   the kubelet parses them (core.image_reference), and a volume claim's storage, which must be positive.

The name grammars and the image grammar are the program's own (core.names, core.image_reference), which its
validation uses and tests/test_kubernetes_names.py pins to upstream's cases; what this module adds is where each
applies.
"""

from __future__ import annotations

import base64
import functools
import re
from collections.abc import Iterator, Mapping
from typing import Any

import jsonschema
import kubernetes_validate
from kubernetes_validate.utils import schema_contents
from referencing import Registry, Resource

from core.image_reference import image_reference_problem
from core.names import (
    is_config_map_key,
    is_dns1035_label,
    is_dns_label,
    is_dns_subdomain,
    is_label_value,
    label_key_problem,
)

KUBERNETES_VERSION = "1.36.0"
_SCHEMA_DIR = f"kubernetes-json-schema/v{KUBERNETES_VERSION}-local-strict"
TOTAL_ANNOTATION_SIZE = 256 * (1 << 10)
"""objectmeta.go `TotalAnnotationSizeLimitB`."""
MAX_DATA_SIZE = 1 << 20
"""pkg/apis/core/types.go `MaxSecretSize`: the most a Secret's or a ConfigMap's data may hold."""
# quantity.go's grammar: <signedNumber><suffix>, the suffix binary SI, decimal SI or an integer exponent.
_NUMBER = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
_QUANTITY = re.compile(rf"^[+-]?{_NUMBER}(?:Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?\Z")


def validate(document: dict[str, Any]) -> None:
    """Strict schema validation of one object; raises with the first problem (kubernetes-validate's own call)."""
    kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)


@functools.cache
def _definitions() -> Resource:
    return Resource.from_contents(schema_contents(f"{_SCHEMA_DIR}/_definitions.json", KUBERNETES_VERSION))


@functools.cache
def _validator(api_version: str, kind: str) -> jsonschema.Validator | None:
    """The strict schema of a kind, as kubernetes_validate.validate finds it (group without its domain)."""
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    try:
        schema = schema_contents(f"{_SCHEMA_DIR}/{kind.lower()}-{group_version}.json", KUBERNETES_VERSION)
    except FileNotFoundError:
        return None
    registry = Resource.from_contents(schema) @ (_definitions() @ Registry())
    return jsonschema.Draft202012Validator(schema, registry=registry)


def has_schema(document: Mapping[str, Any]) -> bool:
    """Whether the object is of a built-in kind this Kubernetes version knows."""
    return _validator(str(document.get("apiVersion")), str(document.get("kind"))) is not None


def schema_errors(document: Mapping[str, Any]) -> list[str]:
    """Every strict-schema error of the object, each with its path."""
    validator = _validator(str(document.get("apiVersion")), str(document.get("kind")))
    if validator is None:
        return [f"no Kubernetes {KUBERNETES_VERSION} schema for {document.get('apiVersion')} {document.get('kind')}"]
    return [
        f"{'.'.join(str(part) for part in error.absolute_path) or '(root)'}: {error.message[:300]}"
        for error in validator.iter_errors(dict(document))
    ]


# --- what the API server and the kubelet check beyond the schema ------------------------------------------------

# How each kind's name is checked (pkg/apis/*/validation: ValidateNamespaceName and ValidateServiceName are the
# label rules, RBAC names are path segments, every other kind the program creates a DNS subdomain).
_NAME_RULES = {
    "Namespace": ("a DNS label", is_dns_label),
    "Service": ("a DNS-1035 label (starting with a letter)", is_dns1035_label),
    "Role": ("a path segment", lambda name: name not in {".", ".."} and not re.search("[/%]", name)),
    "ClusterRole": ("a path segment", lambda name: name not in {".", ".."} and not re.search("[/%]", name)),
    "RoleBinding": ("a path segment", lambda name: name not in {".", ".."} and not re.search("[/%]", name)),
    "ClusterRoleBinding": ("a path segment", lambda name: name not in {".", ".."} and not re.search("[/%]", name)),
}


def _metadata_errors(metadata: Any, where: str, kind: str | None) -> Iterator[str]:
    if not isinstance(metadata, Mapping):
        return
    name = metadata.get("name")
    if kind is not None:
        rule, check = _NAME_RULES.get(kind, ("a DNS subdomain", is_dns_subdomain))
        if not isinstance(name, str) or not name:
            yield f"{where}.name: required"
        elif not check(name):
            yield f"{where}.name: {name[:100]!r} is not {rule}"
    namespace = metadata.get("namespace")
    if isinstance(namespace, str) and not is_dns_label(namespace):
        yield f"{where}.namespace: {namespace[:100]!r} is not a DNS label"
    yield from _label_errors(metadata.get("labels"), f"{where}.labels")
    annotations = metadata.get("annotations") or {}
    for key in annotations:
        problem = label_key_problem(str(key).lower())
        if problem:
            yield f"{where}.annotations: {problem}"
    size = sum(len(str(key).encode()) + len(str(value).encode()) for key, value in annotations.items())
    if size > TOTAL_ANNOTATION_SIZE:
        yield f"{where}.annotations: {size} bytes, more than {TOTAL_ANNOTATION_SIZE}"


def _label_errors(labels: Any, where: str) -> Iterator[str]:
    for key, value in (labels or {}).items():
        problem = label_key_problem(str(key))
        if problem:
            yield f"{where}: {problem}"
        if not isinstance(value, str) or not is_label_value(value):
            yield f"{where}.{key}: {str(value)[:100]!r} is not a label value"


def _quantity_errors(value: Any, where: str, positive: bool = False) -> Iterator[str]:
    text = str(value)
    if not isinstance(value, int | float | str) or not _QUANTITY.match(text):
        yield f"{where}: {text[:100]!r} is not a quantity"
    elif positive and not re.search("[1-9]", re.split("[eE]", text.rstrip("KiMGTPEkm"))[0]):
        yield f"{where}: {text!r} must be greater than zero"


def _data_errors(document: Mapping[str, Any]) -> Iterator[str]:
    size = 0
    for field in ("data", "stringData", "binaryData"):
        for key, value in (document.get(field) or {}).items():
            if not is_config_map_key(str(key)):
                yield f"{field}: key {str(key)[:100]!r} is not a ConfigMap or Secret key"
            text = str(value)
            if field == "stringData" or (field == "data" and document.get("kind") == "ConfigMap"):
                size += len(text.encode())
            else:
                size += len(base64.b64decode(text, validate=False))
    if size > MAX_DATA_SIZE:
        yield f"data: {size} bytes, more than {MAX_DATA_SIZE}"


def _pod_errors(template: Any, where: str) -> Iterator[str]:
    if not isinstance(template, Mapping):
        return
    yield from _metadata_errors(template.get("metadata"), f"{where}.metadata", None)
    spec = template.get("spec") or {}
    for field in ("initContainers", "containers"):
        for index, container in enumerate(spec.get(field) or []):
            at = f"{where}.spec.{field}[{index}]"
            if not is_dns_label(str(container.get("name"))):
                yield f"{at}.name: {container.get('name')!r} is not a DNS label"
            problem = image_reference_problem(str(container.get("image") or ""))
            if problem:
                yield f"{at}.image: {str(container.get('image'))[:100]!r} {problem} (the kubelet: InvalidImageName)"
            for bound in ("requests", "limits"):
                for resource, quantity in ((container.get("resources") or {}).get(bound) or {}).items():
                    yield from _quantity_errors(quantity, f"{at}.resources.{bound}.{resource}")


def api_server_errors(document: Mapping[str, Any]) -> list[str]:
    """What the API server or the kubelet would refuse in the object beyond its schema."""
    kind = str(document.get("kind"))
    errors = list(_metadata_errors(document.get("metadata"), "metadata", kind))
    if kind in {"ConfigMap", "Secret"}:
        errors.extend(_data_errors(document))
    spec = document.get("spec") or {}
    if isinstance(spec, Mapping):
        selector = spec.get("selector")
        if isinstance(selector, Mapping):
            errors.extend(_label_errors(selector.get("matchLabels"), "spec.selector.matchLabels"))
        elif kind == "Service":
            errors.extend(_label_errors(selector, "spec.selector"))
        errors.extend(_pod_errors(spec.get("template"), "spec.template"))
        for index, claim in enumerate(spec.get("volumeClaimTemplates") or []):
            at = f"spec.volumeClaimTemplates[{index}]"
            errors.extend(_metadata_errors(claim.get("metadata"), f"{at}.metadata", "PersistentVolumeClaim"))
            claim_spec = claim.get("spec") or {}
            storage = ((claim_spec.get("resources") or {}).get("requests") or {}).get("storage")
            errors.extend(_quantity_errors(storage, f"{at}.spec.resources.requests.storage", positive=True))
            storage_class = claim_spec.get("storageClassName")
            if storage_class and not is_dns_subdomain(str(storage_class)):
                errors.append(f"{at}.spec.storageClassName: {str(storage_class)[:100]!r} is not a DNS subdomain")
    return errors


def problems(document: Mapping[str, Any]) -> list[str]:
    """Everything the cluster would refuse in one built-in object: its schema, then the API server's checks."""
    return schema_errors(document) + api_server_errors(document)
