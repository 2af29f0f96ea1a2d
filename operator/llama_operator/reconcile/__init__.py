"""Pure reconciliation: what should exist and what status to report, from what was observed."""
