"""A client of the fleet simulator's control endpoints (standard library only)."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from llama_bench.fleetsim.load import LoadSpec


class FleetClient:
    """The simulator's control endpoint."""

    def __init__(self, url: str, timeout: float = 5.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.url}{path}", data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=self.timeout) as response:
            return json.loads(response.read())

    def set_load(self, namespace: str, name: str, load: LoadSpec) -> dict[str, Any]:
        result: dict[str, Any] = self._call(
            "PUT", f"/load/{namespace}/{name}", load.model_dump(exclude_defaults=True)
        )
        return result

    def clear_load(self, namespace: str, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self._call("DELETE", f"/load/{namespace}/{name}")
        return result

    def state(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", "/state")
        return result

    def service(self, namespace: str, name: str) -> dict[str, Any]:
        for entry in self.state()["services"]:
            if entry["namespace"] == namespace and entry["name"] == name:
                return dict(entry)
        return {}
