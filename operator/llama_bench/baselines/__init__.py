"""Re-implementations of the autoscalers platform teams use today, faithful to their documented
semantics, so the benchmark compares the SLO policy against them and not against strawmen."""
