"""The bundled constrained workloads: ``structured`` (extraction under a JSON schema, a regex, a choice) and
``tool_calls`` (one function forced on the chat route), from ``structured.json`` beside this module.

The file is the project's own (no downloads): every prompt carries the constraint its answer must meet, and
names the fields it wants, as production extraction prompts do (which is also where an n-gram drafter finds
its drafts).  ``num_prompts`` beyond the file's count cycle through it again.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from .constraints import parse_constraint
from .workloads import Prompt, Workload, register_builder

DATA_FILE = Path(__file__).with_name("structured.json")
SECTIONS = {"structured": "prompts", "tool_calls": "tool_calls"}  # workload kind -> the file's list


@functools.lru_cache(maxsize=None)
def bundled_entries(kind: str) -> tuple[tuple[str, str, Any], ...]:
    """(prompt, category, Constraint) of each entry for a workload kind, constraints checked as a test's are."""
    data = json.loads(DATA_FILE.read_text(encoding="utf-8"))
    return tuple(
        (entry["prompt"], entry["category"], parse_constraint(entry["constraint"], f"{DATA_FILE.name}[{i}]"))
        for i, entry in enumerate(data[SECTIONS[kind]])
    )


def constraint_kinds(workload: Workload) -> set[str]:
    """The constraint kinds a workload's requests carry (read at collection, before any prompt is built)."""
    if workload.unconstrained:
        return set()
    if workload.constraint is not None:
        return {workload.constraint.kind}
    if workload.kind in SECTIONS:
        return {constraint.kind for _, _, constraint in bundled_entries(workload.kind)}
    return set()


def build_structured(workload: Workload, tokenizer: Any, num_prompts: int, base: list[int]) -> list[Prompt]:
    entries = bundled_entries(workload.kind)
    output_len = workload.output_len or 64
    prompts = []
    for i in range(num_prompts):
        text, category, constraint = entries[i % len(entries)]
        # The file's own prompts, whole: an input_len override does not apply (their text is the task).
        prompts.append(
            Prompt(text, len(tokenizer(text).input_ids), output_len, category=category, constraint=constraint)
        )
    return prompts


register_builder(tuple(SECTIONS), build_structured, lambda tokenizer: tokenizer)
