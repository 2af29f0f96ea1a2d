"""The chart's values.schema.json is generated from the ChartValues model, and values.yaml obeys it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from llama_operator.api.chart_values import (
    VALUES_REFERENCE_DOC,
    VALUES_SCHEMA_FILE,
    ChartValues,
    render_values_schema,
    values_reference_rows,
    with_values_reference,
)
from llama_operator.api.settings import Settings

REPO = Path(__file__).resolve().parents[2]


def test_the_committed_schema_is_the_generated_one() -> None:
    assert (REPO / VALUES_SCHEMA_FILE).read_text() == render_values_schema(), (
        f"{VALUES_SCHEMA_FILE} is stale: run `make crd`"
    )


def chart_defaults() -> dict[str, object]:
    loaded: dict[str, object] = yaml.safe_load((REPO / "charts/llama-operator/values.yaml").read_text())
    return loaded


def test_the_install_docs_values_reference_is_the_generated_one() -> None:
    doc = (REPO / VALUES_REFERENCE_DOC).read_text()
    assert doc == with_values_reference(doc, chart_defaults()), (
        f"the values reference in {VALUES_REFERENCE_DOC} is stale: run `make crd`"
    )


def test_the_values_reference_has_a_described_row_for_every_setting() -> None:
    rows = {
        key: (kind, default, text) for key, kind, default, text in values_reference_rows(chart_defaults())
    }
    for name, field in Settings.model_fields.items():
        key = f"config.{field.alias or name}"
        assert key in rows, key
        assert rows[key][2], f"{key} has no description: add one in api/settings.py"
    assert rows["config.migStrategy"][:2] == ("`mixed` \\| `single`", '`"mixed"`')
    assert rows["imagePullSecrets"][1] == "`[]`"


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
