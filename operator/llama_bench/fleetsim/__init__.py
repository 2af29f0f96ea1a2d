"""The fleet simulator: simulated vLLM replicas behind the pods kwok pretends to run.

It closes the autoscaling loop in the local cluster without GPUs: one `sim.replica` engine per Ready
pod of a LlamaService, stepped in real time, an offered load routed least-loaded across them, and each
pod's metrics served with vLLM's names for the real Prometheus to scrape. Not pure (an HTTP server,
the Kubernetes API), hence outside `sim`:

- `load`: what is offered to a LlamaService (Poisson at a rate, or a trace replayed);
- `engine`: the real-time discrete-event core, time passed in (unit-testable);
- `exposition`: a pod's metrics in the Prometheus text format, as vLLM exports them;
- `kube`: the pods and LlamaServices, read from the API server (read-only);
- `server`: the HTTP endpoints, the threads, SIGTERM; `client`: its control endpoints, from Python;
- `drive`: replaying a trace through a running simulator while printing the replicas following it;
- `commands`: the `fleet-sim` and `fleet-drive` subcommands.
"""
