"""The router: one OpenAI-compatible endpoint for every LlamaService of the caller's namespace, in the path
of all traffic. It routes each request by `model` (or Host, or X-LlamaService) to the pod the picker
chooses (prefix affinity blended with load), holds requests of a service with no ready pod while the
operator wakes one, and keeps tenants apart by the caller's pod address. Stateless: any replica takes any
request.

Modules, from the process down (the import-linter layers in pyproject.toml): commands (the CLI), server
(the HTTP app, one request's path), intake | hold | upstream (reading a request, holding it, forwarding it),
load | metrics | cluster (what the picker weighs, the router's metrics, the view of the cluster), watches |
budget (list+watch, the shared budgets), routing | picker (pure: which service, which pod)."""
