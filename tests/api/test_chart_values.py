"""The chart's values.schema.json is generated from the ChartValues model, and values.yaml obeys it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from llama_operator.api.chart_values import VALUES_SCHEMA_FILE, ChartValues, render_values_schema
from llama_operator.api.settings import Settings

REPO = Path(__file__).resolve().parents[2]


def test_the_committed_schema_is_the_generated_one() -> None:
    assert (REPO / VALUES_SCHEMA_FILE).read_text() == render_values_schema(), (
        f"{VALUES_SCHEMA_FILE} is stale: run `make crd`"
    )


def test_values_yaml_is_valid_and_its_config_is_the_operators_settings() -> None:
    values = ChartValues.model_validate(
        yaml.safe_load((REPO / "charts/llama-operator/values.yaml").read_text())
    )
    assert values.config == Settings.model_validate(
        yaml.safe_load((REPO / "charts/llama-operator/values.yaml").read_text())["config"]
    )


def test_every_setting_can_be_given_in_config() -> None:
    schema_config = ChartValues.model_json_schema(by_alias=True)["$defs"]["Settings"]["properties"]
    assert set(schema_config) == {field.alias or name for name, field in Settings.model_fields.items()}


@pytest.mark.parametrize(
    ("values", "where"),
    [
        ({"config": {"migStratgy": "mixed"}}, "migStratgy"),
        ({"config": {"migStrategy": "bogus"}}, "migStrategy"),
        ({"replicaCount": "two"}, "replicaCount"),
        ({"imagePullSecret": [{"name": "regcred"}]}, "imagePullSecret"),
        ({"imagePullSecrets": ["regcred"]}, "imagePullSecrets"),
        ({"watchNamespaces": "Team_A"}, "watchNamespaces"),
        ({"config": {"podLabels": {"llama-operator.dev/llamaservice": "x"}}}, "podLabels"),
    ],
)
def test_bad_values_name_the_field(values: dict[str, object], where: str) -> None:
    with pytest.raises(ValidationError) as err:
        ChartValues.model_validate(values)
    assert where in str(err.value)


def test_watch_namespaces_as_a_list_or_a_string() -> None:
    assert ChartValues.model_validate({"watchNamespaces": ["a", "b"]}).watch_namespaces == ["a", "b"]
    assert ChartValues.model_validate({"watchNamespaces": "a,b"}).watch_namespaces == "a,b"
