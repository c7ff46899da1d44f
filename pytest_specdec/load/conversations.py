"""Conversations sent turn after turn, each turn carrying the conversation so far.

A conversation arrives at its offset of the access pattern (one user, one
arrival); its first turn is its prompt, and every later turn is sent
``think_time_s`` after the reply before it came back, with that real reply
in its prompt (`traffic.conversation_prompt`), as GuideLLM's and AIPerf's
multi-turn sessions do.  A turn holds a concurrency slot only while it is
in flight (a user reading a reply does not occupy the server).  A failed
turn ends its conversation: the turns after it could not be written, and
are recorded as failed, never left out.

Records come back conversation by conversation, turn by turn, with
``turn`` set, so the reference and SD runs of one test pair up request for
request.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from .streaming import (
    LoadRun,
    RequestOptions,
    RequestRecord,
    _completions_url,
    dispatched,
    request_path,
    request_slots,
    send_request,
)
from .patterns import AccessPattern
from .workloads import conversation_prompt
from .transport import Transport


async def run_conversations(
    base_url: str,
    model: str,
    prompts: Sequence[Any],
    schedule: Sequence[tuple[int, float]],
    pattern: AccessPattern,
    start: float,
    options: RequestOptions,
    on_progress: Callable[[int, int], None] | None = None,
) -> LoadRun:
    from ..engines import engine_named

    engine = engine_named(options.engine)
    slots = request_slots(pattern.max_concurrency)
    transport = Transport(_completions_url(base_url, request_path(engine, options.endpoint)))
    total = sum(1 + len(getattr(prompts[i % len(prompts)], "turns", ())) for i, _ in schedule)
    done = 0

    def progressed() -> None:
        nonlocal done
        done += 1
        if on_progress is not None:
            on_progress(done, total)

    async def conversation(index: int, due: float) -> list[RequestRecord]:
        prompt = prompts[index % len(prompts)]
        records: list[RequestRecord] = []
        chat = options.endpoint == "chat"
        # The conversation so far: one text (completions), or the messages with their roles (chat).
        text: Any = [{"role": "user", "content": prompt.text}] if chat else prompt.text
        for turn in range(1 + len(prompt.turns)):
            this = prompt if turn == 0 else replace(prompt, output_len=prompt.turns[turn - 1][1])
            if records and not records[-1].success:
                records.append(_not_sent(index, turn, this, records[-1]))
                progressed()
                continue
            record = await send_request(transport, engine, model, index, this, options, slots, due, text=text)
            record.turn = turn
            records.append(record)
            progressed()
            if turn < len(prompt.turns):
                user = prompt.turns[turn][0]
                if chat:
                    text = [*text, {"role": "assistant", "content": record.text}, {"role": "user", "content": user}]
                else:
                    text = conversation_prompt(text, user, reply=record.text)
                await asyncio.sleep(pattern.think_time_s)
                due = time.perf_counter()  # the next turn is due now: its lag counts from here
        return records

    return await dispatched(transport, schedule, start, conversation)


def _not_sent(index: int, turn: int, prompt: Any, failed: RequestRecord) -> RequestRecord:
    why = f"not sent: turn {failed.turn} of this conversation failed ({failed.error})"
    return RequestRecord.not_sent(
        index, 0, failed.start_time, why, category=getattr(prompt, "category", None), turn=turn
    )
