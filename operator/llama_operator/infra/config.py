"""Load the operator's Settings from a YAML file and LLAMA_OPERATOR_* environment variables."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from llama_operator.api.settings import Settings

ENV_PREFIX = "LLAMA_OPERATOR_"
CONFIG_FILE_ENV = "LLAMA_OPERATOR_CONFIG"


class ConfigError(ValueError):
    pass


def _env_overrides(env: Mapping[str, str]) -> dict[str, Any]:
    fields = Settings.model_fields
    out: dict[str, Any] = {}
    for key, raw in env.items():
        if not key.startswith(ENV_PREFIX) or key == CONFIG_FILE_ENV:
            continue
        name = key.removeprefix(ENV_PREFIX).lower()
        if name not in fields:
            continue
        # Maps and numbers come as JSON; plain strings as they are.
        try:
            out[name] = json.loads(raw)
        except json.JSONDecodeError:
            out[name] = raw
    return out


def _read_config_file(path: str) -> dict[str, Any]:
    try:
        loaded = yaml.safe_load(Path(path).read_text()) or {}
    except OSError as err:
        raise ConfigError(f"{path}: cannot read the operator's configuration ({err.strerror})") from None
    except yaml.YAMLError as err:
        where = getattr(err, "problem_mark", None)
        at = f" at line {where.line + 1}" if where is not None else ""
        raise ConfigError(f"{path}: not YAML{at}: {getattr(err, 'problem', None) or err}") from None
    if not isinstance(loaded, dict):
        raise ConfigError(f"{path}: expected a mapping of settings")
    return {str(k).replace("-", "_"): v for k, v in loaded.items()}


def _validated(data: dict[str, Any], path: str | None) -> Settings:
    try:
        return Settings.model_validate(data)
    except ValidationError as err:
        where = f" ({path})" if path else ""
        raise ConfigError(f"invalid operator configuration{where}: {describe_errors(err)}") from None


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    env = os.environ if env is None else env
    data: dict[str, Any] = {}
    path = env.get(CONFIG_FILE_ENV)
    if path:
        data.update(_read_config_file(path))
    data.update(_env_overrides(env))
    return _validated(data, path)


# The key of the operator's configuration in the chart's values (Settings has no setting of that name).
CHART_CONFIG_KEY = "config"


def load_settings_file(path: str, overrides: Mapping[str, Any] | None = None) -> Settings:
    """The operator's configuration from one file, for offline previews (`plan`/`render --config`): the
    file the chart mounts (its ConfigMap's config.yaml), or a chart values file, whose `config:` it is.
    No LLAMA_OPERATOR_* variable is read: the preview is of the file. `overrides` (settings by their
    Python names) win over it."""
    data = _read_config_file(path)
    section = data.get(CHART_CONFIG_KEY)
    if isinstance(section, dict):
        data = {str(k).replace("-", "_"): v for k, v in section.items()}
    elif CHART_CONFIG_KEY in data:
        data = {}  # a values file that leaves config empty: the operator's defaults
    for name in overrides or {}:  # the file may spell an overridden setting either way
        field = Settings.model_fields[name]
        data.pop(name, None)
        data.pop(field.alias or name, None)
    return _validated({**data, **(overrides or {})}, path)


def describe_errors(err: ValidationError) -> str:
    """pydantic's errors as one line, `field: message; ...`, by the field's name as configured (camelCase),
    without pydantic's input dumps and documentation links: what a pod's last log line can show whole."""
    parts = []
    for e in err.errors(include_url=False, include_context=False, include_input=False):
        where = ".".join(_configured_name(str(p)) for p in e["loc"]) or "configuration"
        message = str(e["msg"]).removeprefix("Value error, ")
        parts.append(f"{where}: {message}")
    return "; ".join(parts).replace("\n", " ")


def _configured_name(part: str) -> str:
    field = Settings.model_fields.get(part)
    return (field.alias or part) if field is not None else part
