"""The operator's process: kopf's watches and indexes (`indexes`), startup and configuration (`startup`),
the level-triggered controller with its work queue and reconcile workers (`controller`, `reconciler`), the
one autoscaler loop (`autoscaler`) and the router's demand Leases (`demand`). They glue the pure core
(planning, desired, reconcile, autoscale) to the API; importing the package registers the handlers."""

from llama_operator.handlers import autoscaler, controller, demand, indexes, startup

__all__ = ["autoscaler", "controller", "demand", "indexes", "startup"]
