"""A toy engine, from this one file: what adding an engine to pytest-specdec takes.

It speaks the fault server's ``--dialect toy`` (tests/support/fault_server.py): an
OpenAI-style stream whose chunks name token ids ``ids``, a request field of its
own (``toy_drafts``) without which the server refuses the request, no metrics
page, and each request's SD figures on its last event under ``toy_sd``.  A
conftest registers it with one call::

    register_engine("toy", "toy_engine")
"""

from __future__ import annotations

from typing import Any, Mapping

from pytest_specdec.engines.base import Engine
from pytest_specdec.engines.per_request import ACCEPTED, DRAFTED, STEPS


class Toy(Engine):
    name = "toy"
    title = "Toy"
    devices = ("cpu", "gpu")
    methods = frozenset({"ngram"})
    counts_per_request = True  # no metrics page: the run's counters are its responses' figures

    def completion_payload(self, openai: dict[str, Any]) -> dict[str, Any]:
        return {**openai, "toy_drafts": True}

    def stream_event(self, data: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
        for choice in data.get("choices") or []:
            if "ids" in choice:
                choice["token_ids"] = choice.pop("ids")
        return data

    def request_sd(self, payload: Mapping[str, Any]) -> dict | None:
        figures = payload.get("toy_sd")
        if not isinstance(figures, Mapping):
            return None
        return {STEPS: figures["steps"], DRAFTED: figures["proposed"], ACCEPTED: figures["accepted"]}


ENGINE = Toy()
