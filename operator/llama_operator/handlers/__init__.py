"""kopf handlers: a few lines each, gluing the pure core to the API. Importing registers them."""

from llama_operator.handlers import autoscaler, controller, demand, indexes, startup

__all__ = ["autoscaler", "controller", "demand", "indexes", "startup"]
