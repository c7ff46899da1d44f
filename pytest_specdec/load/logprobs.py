"""Per-position logprobs of a streamed chunk, as the completion and the chat routes each shape them."""

from __future__ import annotations

from typing import Any


def position_logprobs(logprobs: dict[str, Any]) -> list[dict[str, float]]:
    """One {token: logprob} per output position of a chunk's ``logprobs``, in either route's shape.

    A completion's are ``top_logprobs`` (a dict per position, the sampled
    token among them); a chat completion's are ``content`` (an entry per
    position: its ``token`` and ``logprob``, and its ``top_logprobs`` as a
    list of ``{token, logprob, bytes}``), read into the completion's shape
    with the sampled token added as a completion has it.
    """
    if "content" not in logprobs:
        return [t or {} for t in logprobs.get("top_logprobs") or []]
    positions = []
    for entry in logprobs.get("content") or []:
        tops = {top["token"]: top["logprob"] for top in entry.get("top_logprobs") or []}
        if "token" in entry and "logprob" in entry:
            tops.setdefault(entry["token"], entry["logprob"])
        positions.append(tops)
    return positions
