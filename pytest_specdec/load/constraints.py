"""Constrained traffic: what each request's output must be (a JSON schema, a regex, a choice, a tool call).

A `Constraint` is a cheap, frozen, hashable description, validated at collection; each engine sends it in its
own words (`engines.constraint_words`, through `Engine.constrain`), and `measure.validity` checks every output
against it.  Kinds and how a test declares them (a workload override, or the bundled ``structured`` and
``tool_calls`` workloads, whose prompts carry their own, `load.structured`):

- ``{"json_schema": {...}}``: the output is one JSON document valid against the schema (``jsonschema``);
- ``{"regex": "..."}``: the whole output matches the regex (``re.fullmatch``);
- ``{"choice": ["a", "b"]}``: the output is exactly one of the strings;
- ``{"tool": {"name", "description", "parameters"}}``: a chat request offering that one function with
  ``tool_choice`` naming it, so the reply is a call whose arguments are JSON valid against ``parameters``.

Pure logic: nothing here imports an engine or touches the network.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Mapping

KINDS = ("json_schema", "regex", "choice", "tool_call")
# How a test writes each kind: the mapping's one key (a tool call's is "tool", its `tool_choice` implied).
_DECLARED = {"json_schema": "json_schema", "regex": "regex", "choice": "choice", "tool": "tool_call"}


class ConstraintError(ValueError):
    """A constraint that cannot be sent or checked; the message says which field and why."""


@dataclass(frozen=True)
class Constraint:
    """One output constraint: its kind and its value, kept as canonical JSON so the workload stays hashable."""

    kind: str
    spec: str  # the value as canonical JSON (a schema, a regex string, a list of strings, a function)

    @property
    def value(self) -> Any:
        return json.loads(self.spec)

    @property
    def schema(self) -> dict | None:
        """The JSON schema the output is checked against (a tool call's is its function's parameters)."""
        if self.kind == "json_schema":
            return self.value
        if self.kind == "tool_call":
            return self.value.get("parameters") or {"type": "object"}
        return None

    def label(self) -> str:
        """A short name for rows and messages: the kind and what names it (a schema's keys, a tool's name)."""
        value = self.value
        if self.kind == "json_schema":
            keys = sorted((value.get("properties") or {})) if isinstance(value, dict) else []
            return f"json_schema({', '.join(keys)})" if keys else "json_schema"
        if self.kind == "tool_call":
            return f"tool_call({value['name']})"
        if self.kind == "choice":
            return f"choice({len(value)})"
        return f"regex({value})"

    def describe(self) -> dict:
        return {"kind": self.kind, "value": self.value}


def parse_constraint(value: Any, where: str = "constraint") -> Constraint:
    """A test's constraint (a `Constraint`, or a mapping with one of ``json_schema``, ``regex``, ``choice``,
    ``tool``) checked strictly: a schema that is not a schema, a regex that does not compile, an empty choice
    fails here, at collection, not as an HTTP 400 in the middle of a run."""
    if isinstance(value, Constraint):
        return value
    if not isinstance(value, Mapping) or len(value) != 1:
        raise ConstraintError(
            f"{where} must be a mapping with one key of {', '.join(_DECLARED)} (e.g. {{'regex': '[0-9]+'}}), "
            f"got {value!r}"
        )
    ((declared, inner),) = value.items()
    kind = _DECLARED.get(declared)
    if kind is None:
        raise ConstraintError(f"{where}: unknown constraint {declared!r}; constraints: {', '.join(_DECLARED)}")
    check = {"json_schema": _check_schema, "regex": _check_regex, "choice": _check_choice, "tool_call": _check_tool}
    check[kind](inner, f"{where}.{declared}")
    try:
        spec = json.dumps(inner, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise ConstraintError(f"{where}.{declared} must be JSON-serialisable: {exc}") from None
    return Constraint(kind, spec)


def _check_schema(schema: Any, where: str) -> None:
    from jsonschema import Draft202012Validator, SchemaError

    if not isinstance(schema, Mapping):
        raise ConstraintError(f"{where} must be a JSON schema (a mapping), got {schema!r}")
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise ConstraintError(f"{where} is not a valid JSON schema: {exc.message}") from None


def _check_regex(pattern: Any, where: str) -> None:
    if not isinstance(pattern, str) or not pattern:
        raise ConstraintError(f"{where} must be a non-empty regex string, got {pattern!r}")
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ConstraintError(f"{where} does not compile: {exc}") from None


def _check_choice(choices: Any, where: str) -> None:
    if (
        isinstance(choices, (str, bytes))
        or not isinstance(choices, (list, tuple))
        or not choices
        or not all(isinstance(c, str) and c for c in choices)
    ):
        raise ConstraintError(f"{where} must be a non-empty list of non-empty strings, got {choices!r}")


def _check_tool(tool: Any, where: str) -> None:
    if not isinstance(tool, Mapping) or not isinstance(tool.get("name"), str) or not tool.get("name"):
        raise ConstraintError(f"{where} must be a function with a 'name' (and 'parameters', a JSON schema)")
    unknown = sorted(set(tool) - {"name", "description", "parameters"})
    if unknown:
        raise ConstraintError(f"{where}: unknown function field {unknown[0]!r} (name, description, parameters)")
    if "parameters" in tool:
        _check_schema(tool["parameters"], f"{where}.parameters")


def streamed_text(choice: Mapping[str, Any]) -> str:
    """The output text one streamed choice carries: a completion's ``text``, a chat delta's ``content``, or the
    arguments of the tool call a chat delta streams (a forced tool call's reply has no content)."""
    if text := choice.get("text"):
        return text
    delta = choice.get("delta") or {}
    if content := delta.get("content"):
        return content
    return "".join((call.get("function") or {}).get("arguments") or "" for call in delta.get("tool_calls") or [])
