"""The activator: in the request path of a LlamaService only while it has no ready replica (scaled to zero,
or waking). It holds requests, reports the demand on the LlamaService, and forwards each held request to
the first ready vLLM pod, streaming untouched. Stateless: any replica can take any request."""
