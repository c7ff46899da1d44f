"""JSON Schemas of the files the plugin stores: baselines and reports.

One loader for both, cached, reading the schema files shipped next to this
module (package data).
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

BASELINE = "baseline.schema.json"
REPORT = "report.schema.json"


@functools.lru_cache(maxsize=None)
def load_schema(name: str) -> dict[str, Any]:
    """The parsed schema `name` (``BASELINE`` or ``REPORT``)."""
    return json.loads(resources.files(__package__).joinpath(name).read_text(encoding="utf-8"))


@functools.lru_cache(maxsize=None)
def validator(name: str):
    """A Draft 2020-12 validator for schema `name` (jsonschema is imported on first use)."""
    from jsonschema import Draft202012Validator

    return Draft202012Validator(load_schema(name))


def errors(name: str, document: Any) -> list:
    """Validation errors of `document` against schema `name`, in field order."""
    return sorted(validator(name).iter_errors(document), key=lambda e: [str(p) for p in e.absolute_path])
