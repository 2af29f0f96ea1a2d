"""The Grafana dashboard and the Prometheus alert rules, generated from one list of metric names.

Pure: builds dicts and text. `make monitoring` writes them into the chart; tests fail when the committed
files drift, when a name is neither the operator's (infra/metrics.py) nor one the pinned vLLM exports,
and when the rules misbehave under `promtool test rules`."""
