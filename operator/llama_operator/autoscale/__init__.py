"""Autoscaling core, pure: `signals` (what is observed), `queueing` (M/M/c estimates), `policy`
(`decide()`), `baselines` (HPA, KEDA, KPA, static re-implemented for comparison)."""
