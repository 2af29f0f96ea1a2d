"""Generate the LlamaService CustomResourceDefinition from the pydantic models.

pydantic emits JSON Schema; Kubernetes wants a *structural* OpenAPI v3 schema. The rewrite below
inlines `$ref`s, turns `anyOf [T, null]` into `nullable`, numeric exclusive bounds into the boolean
form, `const` into a one-item enum, drops titles and `null` defaults, and marks int-or-string and
free-form fields so the API server neither rejects nor prunes them.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from llama_operator.api.secrets import CREDENTIAL_IN_ARGS_MESSAGE, SECRET_VALUE_PATTERN, URL_USERINFO_PATTERN
from llama_operator.api.spec import (
    ACTIVE_PARAMETERS_MESSAGE,
    EXPERTS_MESSAGE,
    EXPERTS_PER_TOKEN_MESSAGE,
    GROUP,
    KIND,
    MAX_NAME_LENGTH,
    MAX_TPOT_SECONDS,
    MAX_TTFT_SECONDS,
    MIG_PROFILES_BY_TYPE,
    NAME_PATTERN,
    NAME_RULE_MESSAGE,
    PLURAL,
    SHORT_NAMES,
    SINGULAR,
    TPOT_UNIT_MESSAGE,
    TTFT_UNIT_MESSAGE,
    VERSION,
    AcceleratorType,
    LlamaServiceSpec,
)
from llama_operator.api.status import LlamaServiceStatus

Schema = dict[str, Any]

CRD_NAME = f"{PLURAL}.{GROUP}"
CRD_FILE = f"crds/{CRD_NAME}.yaml"
CHART_CRD_FILE = "charts/llama-operator/templates/crd.yaml"


def _mig_rule() -> dict[str, str]:
    allowed = " || ".join(
        f"(self.type == '{t.value}' && self.mig in [{', '.join(repr(p) for p in ps)}])"
        for t, ps in MIG_PROFILES_BY_TYPE.items()
    )
    builtin = ", ".join(repr(t.value) for t in AcceleratorType)
    listed = "; ".join(f"{t.value}: {', '.join(ps)}" for t, ps in MIG_PROFILES_BY_TYPE.items())
    return {
        # A platform-defined type (config.accelerators) has the operator's catalog's profiles: the planner
        # checks those.
        "rule": f"!has(self.mig) || !(self.type in [{builtin}]) || {allowed}",
        "message": f"mig must be a MIG profile of the chosen type ({listed}); other built-in types have no MIG",
        "fieldPath": ".mig",
        "reason": "FieldValueInvalid",
    }


# A flag whose name ends in a word that says it carries a secret (--hf-token, --api-key, --x.secret=...);
# --long-prefill-token-threshold says "token" but carries none.
# Refused at admission so that the value is never stored (kopf's annotations copy the spec).
SECRET_FLAG_CEL = r"^--?([A-Za-z0-9]+[-_.])*(?i:token|key|secret|password|apikey|passwd)(=.*)?$"

ROOT_RULES: list[dict[str, str]] = [
    {
        "rule": f"self.metadata.name.matches('{NAME_PATTERN}') && size(self.metadata.name) <= {MAX_NAME_LENGTH}",
        "message": NAME_RULE_MESSAGE,
        "reason": "FieldValueInvalid",
    },
    {
        # The served name is model.servedName, else metadata.name: only the root sees both.
        "rule": "!has(self.spec.adapters) || self.spec.adapters.all(a, a.name != "
        "(has(self.spec.model.servedName) ? self.spec.model.servedName : self.metadata.name))",
        "message": "an adapter's name must differ from the base model's served name (model.servedName, else "
        "metadata.name): clients choose the adapter or the base model by that name",
        "reason": "FieldValueInvalid",
    },
]

# CEL rules, by the JSON path of the object they guard. The same rules hold in pydantic validators, so
# `plan -f` and the API server reject the same manifests.
CEL_RULES: dict[str, list[dict[str, str]]] = {
    "spec.accelerator": [
        _mig_rule(),
        {
            "rule": "!has(self.mig) || !has(self.count) || self.count == 1",
            "message": "count must be 1 with a MIG slice: a process sees one MIG device, so no tensor parallelism",
            "fieldPath": ".count",
            "reason": "FieldValueInvalid",
        },
        {
            "rule": "!has(self.migStrategy) || has(self.mig)",
            "message": "migStrategy applies to a MIG slice: set mig too, or remove it",
            "fieldPath": ".migStrategy",
            "reason": "FieldValueInvalid",
        },
        {
            "rule": "self.type != 'cpu' || !has(self.count) || self.count == 1",
            "message": "count must be 1 on cpu",
            "fieldPath": ".count",
            "reason": "FieldValueInvalid",
        },
        {
            "rule": "!has(self.nodes) || self.nodes == 1 || (!has(self.mig) && self.type != 'cpu')",
            "message": "nodes > 1 spreads a replica over whole GPUs of several nodes: remove mig, or use a GPU "
            "type (not cpu), or set nodes to 1",
            "fieldPath": ".nodes",
            "reason": "FieldValueInvalid",
        },
    ],
    "spec.autoscaling": [
        {
            "rule": "!has(self.minReplicas) || !has(self.maxReplicas) || self.minReplicas <= self.maxReplicas",
            "message": "minReplicas must be less than or equal to maxReplicas",
            "fieldPath": ".minReplicas",
            "reason": "FieldValueInvalid",
        }
    ],
    "spec.autoscaling.slo": [
        {
            "rule": f"!has(self.ttftSeconds) || self.ttftSeconds <= {MAX_TTFT_SECONDS}.0",
            "message": TTFT_UNIT_MESSAGE,
            "fieldPath": ".ttftSeconds",
            "reason": "FieldValueInvalid",
        },
        {
            "rule": f"!has(self.tpotSeconds) || self.tpotSeconds <= {MAX_TPOT_SECONDS}.0",
            "message": TPOT_UNIT_MESSAGE,
            "fieldPath": ".tpotSeconds",
            "reason": "FieldValueInvalid",
        },
    ],
    "spec.model.architecture": [
        {
            "rule": "has(self.experts) == has(self.expertsPerToken)",
            "message": EXPERTS_MESSAGE,
            "fieldPath": ".experts",
            "reason": "FieldValueInvalid",
        },
        {
            "rule": "!has(self.experts) || !has(self.expertsPerToken) || self.expertsPerToken <= self.experts",
            "message": EXPERTS_PER_TOKEN_MESSAGE,
            "fieldPath": ".expertsPerToken",
            "reason": "FieldValueInvalid",
        },
        {
            "rule": "!has(self.activeParameters) || self.activeParameters <= self.parameters",
            "message": ACTIVE_PARAMETERS_MESSAGE,
            "fieldPath": ".activeParameters",
            "reason": "FieldValueInvalid",
        },
    ],
    "spec.model.cache": [
        {
            "rule": "!has(self.nodeLocal) || !self.nodeLocal || !has(self.persistentVolumeClaim)",
            "message": "nodeLocal and persistentVolumeClaim exclude each other: a node-local cache or a claim",
            "fieldPath": ".nodeLocal",
            "reason": "FieldValueInvalid",
        }
    ],
    "spec.engine.kvOffload.cpuBytes": [
        {
            "rule": "isQuantity(self) && quantity(self).isGreaterThan(quantity('0'))",
            "message": "cpuBytes must be a positive Kubernetes quantity such as 40Gi",
        }
    ],
    "spec.model.cache.sizeLimit": [
        {
            "rule": "isQuantity(self) && quantity(self).isGreaterThan(quantity('0'))",
            "message": "sizeLimit must be a positive Kubernetes quantity such as 20Gi",
        }
    ],
    "spec.engine.extraArgs": [
        {
            "rule": "size(self) == 0 || self[0].startsWith('-')",
            "message": "extraArgs must start with a vLLM flag such as --enforce-eager (one flag or value per item)",
        },
        {
            "rule": f"self.all(a, !a.matches('{SECRET_FLAG_CEL}'))",
            "message": "extraArgs must not carry secrets (a flag whose name ends in token, key, secret or password): "
            "use spec.model.tokenSecretRef for the Hugging Face token and spec.engine.apiKeySecretRef for the "
            "API key; they reach vLLM from a Secret",
        },
        {
            # A raw CEL string: the patterns' backslashes (\b, \.) reach RE2 as written.
            "rule": f"self.all(a, !a.matches(r'{SECRET_VALUE_PATTERN}') && !a.matches(r'{URL_USERINFO_PATTERN}'))",
            "message": CREDENTIAL_IN_ARGS_MESSAGE,
        },
    ],
    "spec.engine.maxNumSeqs": [
        {
            "rule": "type(self) == string ? self == 'auto' : (int(self) >= 1 && int(self) <= 4096)",
            "message": "maxNumSeqs must be 'auto' or an integer between 1 and 4096",
        }
    ],
}

PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Accelerator", "type": "string", "jsonPath": ".status.accelerator"},
    {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas"},
    {"name": "Desired", "type": "integer", "jsonPath": ".status.replicas"},
    # Strings with their units, written by the autoscaler next to the numbers it keeps (a number column
    # would show 0.4404761904761905 and a bare 1).
    {
        "name": "TTFT",
        "type": "string",
        "jsonPath": ".status.autoscaling.ttft",
        "description": "Observed time to first token at the SLO percentile (e.g. 440ms)",
    },
    {
        "name": "TPOT",
        "type": "string",
        "jsonPath": ".status.autoscaling.tpot",
        "description": "Observed time per output token (inter-token latency) at the SLO percentile (e.g. 61ms)",
    },
    {
        "name": "SLO",
        "type": "string",
        "jsonPath": ".status.autoscaling.slo",
        "description": "The objective from spec.autoscaling.slo (e.g. p95 TTFT <= 1s, TPOT <= 50ms)",
    },
    {
        "name": "Phase",
        "type": "string",
        "jsonPath": ".status.phase",
        "description": "Pending, Progressing, Ready, ScaledToZero (idle, no pod: the activator holds "
        "the next request), Degraded or Failed",
    },
    {
        "name": "Wake",
        "type": "string",
        "jsonPath": ".status.autoscaling.lastActivation",
        "description": "The last wake from zero: first held request to its first token (e.g. 48.2s)",
        "priority": 1,
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def _resolve(node: Any, defs: dict[str, Schema]) -> Any:
    """Inline every `$ref`, recursively, merging sibling keywords (description, default) over the target."""
    if isinstance(node, list):
        return [_resolve(n, defs) for n in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = copy.deepcopy(defs[node["$ref"].rsplit("/", 1)[-1]])
        siblings = {k: v for k, v in node.items() if k != "$ref"}
        target.update(siblings)
        return _resolve(target, defs)
    if "allOf" in node and len(node["allOf"]) == 1:
        merged = {k: v for k, v in node.items() if k != "allOf"}
        inner = _resolve(node["allOf"][0], defs)
        return _resolve({**inner, **merged}, defs)
    return {k: _resolve(v, defs) for k, v in node.items()}


def _structural(node: Any, *, keep_defaults: bool) -> Any:
    if isinstance(node, list):
        return [_structural(n, keep_defaults=keep_defaults) for n in node]
    if not isinstance(node, dict):
        return node
    out: Schema = {}
    any_of = node.get("anyOf")
    if any_of is not None:
        non_null = [s for s in any_of if s.get("type") != "null"]
        nullable = len(non_null) != len(any_of)
        types = sorted({s.get("type", "") for s in non_null})
        if len(non_null) == 1:
            out.update(_structural(non_null[0], keep_defaults=keep_defaults))
        elif node.get("x-kubernetes-int-or-string") or types == ["integer", "string"]:
            out["x-kubernetes-int-or-string"] = True
        else:
            # Mixed types (a number or the word 'auto'): the API server cannot type it, and CEL cannot compile
            # on an untyped field, so the operator validates it and reports a bad value as Degraded.
            out["x-kubernetes-preserve-unknown-fields"] = True
        if nullable:
            out["nullable"] = True
    for key, value in node.items():
        if key in {"anyOf", "title", "$defs", "x-kubernetes-int-or-string"}:
            continue
        if key == "default":
            if value is None or not keep_defaults:
                continue
            out["default"] = value
        elif key == "const":
            out["enum"] = [value]
        elif key == "exclusiveMinimum" and not isinstance(value, bool):
            out["minimum"] = value
            out["exclusiveMinimum"] = True
        elif key == "exclusiveMaximum" and not isinstance(value, bool):
            out["maximum"] = value
            out["exclusiveMaximum"] = True
        elif key == "properties":
            required = set(node.get("required", []))
            out["properties"] = {}
            for name, prop in value.items():
                sub = _structural(prop, keep_defaults=keep_defaults)
                # An optional, non-nullable object defaults to {} so the server fills in its own defaults.
                if (
                    keep_defaults
                    and name not in required
                    and sub.get("type") == "object"
                    and not sub.get("nullable")
                ):
                    sub.setdefault("default", {})
                out["properties"][name] = sub
        elif key in {"items", "additionalProperties"} and isinstance(value, dict):
            out[key] = _structural(value, keep_defaults=keep_defaults)
        elif key == "additionalProperties" and value is False:
            continue  # Kubernetes rejects unknown fields by pruning or strict field validation already
        else:
            out[key] = value
    if out.get("type") == "object" and "properties" not in out and "additionalProperties" not in out:
        out["x-kubernetes-preserve-unknown-fields"] = True
    return out


def _attach_cel(schema: Schema, path: str, rules: list[dict[str, str]]) -> None:
    node = schema
    for part in path.split("."):
        node = node["properties"][part]
    node["x-kubernetes-validations"] = rules


def _model_schema(model: type[LlamaServiceSpec] | type[LlamaServiceStatus], *, keep_defaults: bool) -> Schema:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})
    resolved = _resolve(raw, defs)
    result: Schema = _structural(resolved, keep_defaults=keep_defaults)
    return result


def _list_maps(status: Schema) -> None:
    conditions = status["properties"]["conditions"]
    conditions["x-kubernetes-list-type"] = "map"
    conditions["x-kubernetes-list-map-keys"] = ["type"]
    conditions["items"]["required"] = ["type", "status"]


def openapi_schema() -> Schema:
    spec = _model_schema(LlamaServiceSpec, keep_defaults=True)
    for path, rules in CEL_RULES.items():
        _attach_cel({"properties": {"spec": spec}}, path, rules)
    status = _model_schema(LlamaServiceStatus, keep_defaults=False)
    _list_maps(status)
    return {
        "type": "object",
        "description": "A Llama model served by vLLM on the accelerator that fits it, scaled to a latency SLO.",
        "x-kubernetes-validations": ROOT_RULES,
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
    }


def build_crd() -> Schema:
    """The CustomResourceDefinition object."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": CRD_NAME,
            "labels": {"app.kubernetes.io/part-of": "llama-operator"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": list(SHORT_NAMES),
                "categories": ["all", "llama"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": openapi_schema()},
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.replicas",
                            "statusReplicasPath": ".status.replicas",
                            "labelSelectorPath": ".status.selector",
                        },
                    },
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                }
            ],
        },
    }


HEADER = "# GENERATED by `llama-operator crd` from operator/llama_operator/api. Do not edit by hand.\n"


def render_crd_yaml() -> str:
    return HEADER + yaml.safe_dump(build_crd(), sort_keys=False, width=100)


def render_chart_crd_template() -> str:
    """The chart's copy: a template (Helm never upgrades files in crds/), kept on uninstall."""
    crd = build_crd()
    crd["metadata"]["annotations"] = {"helm.sh/resource-policy": "keep"}
    body = yaml.safe_dump(crd, sort_keys=False, width=100)
    return HEADER + "{{- if .Values.crds.install }}\n" + body + "{{- end }}\n"
