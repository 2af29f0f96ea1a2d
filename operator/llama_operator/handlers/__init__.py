"""kopf handlers: a few lines each, gluing the pure core to the API. Importing registers them."""

from llama_operator.handlers import indexes, llamaservice, owned, startup

__all__ = ["indexes", "llamaservice", "owned", "startup"]
