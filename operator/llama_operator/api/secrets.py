"""Shapes of credentials that must never be stored in a LlamaService: refused at `kubectl apply` by the
CRD's CEL (written with these patterns) and by the API model, so `plan -f` and the API server agree, and
the planner's deeper checks use the same ones. Patterns are RE2- and Python-compatible."""

from __future__ import annotations

import re

# Values shaped like well-known credentials, wherever they appear: Hugging Face, OpenAI-style, GitHub,
# GitLab, Slack and AWS tokens, JWTs, PEM private keys.
SECRET_VALUE_PATTERN = (
    r"\bhf_[A-Za-z0-9]{20,}|\bsk-[A-Za-z0-9_-]{16,}|\bgh[pousr]_[A-Za-z0-9]{20,}|\bglpat-[A-Za-z0-9_-]{16,}|"
    r"\bxox[abpr]-[A-Za-z0-9-]{10,}|\b(AKIA|ASIA)[0-9A-Z]{16}\b|\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.|"
    r"-----BEGIN [A-Z ]*PRIVATE KEY"
)
# A URL with userinfo (scheme://user:password@host): the password would be in args and status.plan.
URL_USERINFO_PATTERN = r"[A-Za-z][A-Za-z0-9+.-]*://[^/?#\s]*@"

SECRET_VALUE = re.compile(SECRET_VALUE_PATTERN)
URL_USERINFO = re.compile(URL_USERINFO_PATTERN)

CREDENTIAL_IN_ARGS_MESSAGE = (
    "extraArgs must not carry credentials (a token-shaped value such as hf_..., or a URL with "
    "user:password@): keep them in a Secret (spec.model.tokenSecretRef, spec.engine.apiKeySecretRef)"
)


def carries_credential(value: str) -> bool:
    return SECRET_VALUE.search(value) is not None or URL_USERINFO.search(value) is not None
