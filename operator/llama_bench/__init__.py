"""llama-bench: the operator's benchmark and simulation tooling, apart from the runtime.

- `sim`: the discrete-event vLLM fleet simulator, trace replay, the family, the frontier, scale to zero;
- `fleetsim`: simulated vLLM replicas behind the pods kwok pretends to run (the local cluster's GPUs);
- `baselines`: the autoscalers platform teams use today (HPA, KEDA, KPA, static), re-implemented;
- `measure`: profiling a running vLLM and replaying traces against it;
- `data/traces`: the bundled request traces;
- `cli`: the `llama-bench` command.

It imports the runtime (`llama_operator`: the catalog, the policy, the API); the runtime never imports
it (an import-linter contract), so the operator image and `pip install llama-operator` leave it out.
"""
