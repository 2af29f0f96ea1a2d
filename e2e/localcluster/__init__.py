"""Local test cluster for llama-operator: a real control plane, kwok nodes and Prometheus.

Stdlib only, so `e2e/cluster.sh` runs with the system python3 before any venv exists.
Tests import `localcluster.info` to read `.cluster/cluster.json`.
"""
