"""Data-file workloads: ShareGPT JSON, Spec-Bench and SPEED-Bench JSONL, BurstGPT CSV and JSONL prompts.

Each reader checks the file as it goes and names the line or field at fault;
the builders pick a seeded sample of entries (cycled when the file is short)
and cap prompts at the workload's ``input_len``.  Nothing is downloaded.
"""

from __future__ import annotations

import csv
import json
import os
from dataclasses import replace
from typing import Any, Callable, Iterator

from .synthetic import Tok, random_prompt, rng_for
from .workloads import (
    DEFAULT_FILE_OUTPUT_LEN,
    TEXT_FILE_BUILDER,
    Prompt,
    Workload,
    WorkloadError,
    data_path_env_var,
    register_builder,
    conversation_prompt,
)


def _error(w: Workload, where: str, problem: str) -> WorkloadError:
    return WorkloadError(f"workload {w.name!r}: {w.path}, {where}: {problem}")


def _type_problem(key: str, value: Any, expected: str) -> str:
    return f"field {key!r} must be {expected}, got {type(value).__name__} {value!r:.40}"


def _open(w: Workload):
    path = os.path.expanduser(w.path)  # type: ignore[arg-type]
    if not os.path.isfile(path):
        raise WorkloadError(
            f"workload {w.name!r}: data file not found: {w.path} "
            f"(give another with path=... or {data_path_env_var(w.name)})"
        )
    return open(path, encoding="utf-8-sig", newline="")


def _jsonl_lines(w: Workload) -> Iterator[tuple[str, dict]]:
    with _open(w) as fh:
        for line_no, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise _error(w, f"line {line_no}", f"invalid JSON ({e.msg})") from None
            if not isinstance(obj, dict):
                raise _error(w, f"line {line_no}", f"expected a JSON object, got {type(obj).__name__}")
            yield f"line {line_no}", obj


def _category(w: Workload, where: str, obj: dict) -> str | None:
    value = obj.get(w.category_field)
    if value is not None and (not isinstance(value, str) or not value):
        raise _error(w, where, _type_problem(w.category_field, value, "a non-empty string (the prompt's category)"))
    return value


def _entries_jsonl(w: Workload) -> list[tuple[str, int, str | None]]:
    out = []
    for where, obj in _jsonl_lines(w):
        if "prompt" not in obj:
            raise _error(w, where, "field 'prompt' is missing")
        prompt, out_len = obj["prompt"], obj.get("output_tokens")
        if not isinstance(prompt, str) or not prompt:
            raise _error(w, where, _type_problem("prompt", prompt, "a non-empty string"))
        if out_len is not None and (isinstance(out_len, bool) or not isinstance(out_len, int) or out_len < 1):
            raise _error(w, where, _type_problem("output_tokens", out_len, "an integer >= 1"))
        out.append((prompt, out_len or w.output_len or DEFAULT_FILE_OUTPUT_LEN, _category(w, where, obj)))
    return out


def _entries_spec_bench(w: Workload) -> list[tuple[Any, int, str | None]]:
    """(first turn, or the first `w.turns` turns of a conversation, max_tokens, category) per line."""
    out = []
    for where, obj in _jsonl_lines(w):
        if "turns" not in obj:
            raise _error(w, where, "field 'turns' is missing")
        turns = obj["turns"]
        if not isinstance(turns, list) or not turns or not isinstance(turns[0], str) or not turns[0]:
            raise _error(w, where, _type_problem("turns", turns, "a non-empty list of strings"))
        for i, turn in enumerate(turns):
            if not isinstance(turn, str) or not turn:
                raise _error(w, where, _type_problem(f"turns[{i}]", turn, "a non-empty string"))
        output = w.output_len or DEFAULT_FILE_OUTPUT_LEN
        category = _category(w, where, obj)
        if w.turns == 1:
            out.append((turns[0], output, category))
        elif len(turns) >= w.turns:  # a conversation: shorter ones are not used
            out.append(([(turn, output) for turn in turns[: w.turns]], output, category))
    return out


# SPEED-Bench (NVIDIA, `nvidia/SPEED-Bench`): one JSON object a line, `question_id`, `category` (a semantic domain
# in the qualitative split, an entropy tier in the throughput splits) and `messages` (OpenAI-style role/content).
# Its public files carry this text instead of prompts whose licences keep them from being redistributed; the
# dataset's own preparation tool rebuilds them from their sources.
SPEED_BENCH_PLACEHOLDER = "FULL BENCHMARK DATA SHOULD BE FETCHED FROM THE SOURCE USING SPECDEC_BENCH"
SPEED_BENCH_REBUILD = (
    "the public SPEED-Bench files hold placeholder prompts: rebuild the full ones from their sources with the "
    "dataset's own preparation tool (specdec_bench, as the dataset card describes), then give that file as path="
)


def _speed_bench_rows(w: Workload) -> Iterator[tuple[str, dict]]:
    """(where, row) per row of a SPEED-Bench file: JSONL, or the dataset's parquet where pyarrow is installed."""
    if not str(w.path).endswith(".parquet"):
        yield from _jsonl_lines(w)
        return
    try:
        import pyarrow.parquet as parquet
    except ImportError:
        raise WorkloadError(
            f"workload {w.name!r}: {w.path}: reading parquet needs pyarrow (pip install pyarrow), or give the "
            "split as JSONL (one row a line, as the dataset's preparation tool writes it)"
        ) from None
    if not os.path.isfile(os.path.expanduser(str(w.path))):
        _open(w)  # raises, naming the file and the ways to give another
    for index, row in enumerate(parquet.read_table(os.path.expanduser(str(w.path))).to_pylist()):
        yield f"row {index}", row


def _entries_speed_bench(w: Workload) -> list[tuple[Any, int, str]]:
    """(the system prompt and first user turn, or the first `w.turns` user turns, max_tokens, category) per row."""
    out = []
    output = w.output_len or DEFAULT_FILE_OUTPUT_LEN
    for where, obj in _speed_bench_rows(w):
        for key in ("question_id", "category", "messages"):
            if key not in obj:
                raise _error(
                    w, where, f"field {key!r} is missing (a SPEED-Bench row has question_id, category, messages)"
                )
        question, category, messages = obj["question_id"], obj["category"], obj["messages"]
        if not isinstance(category, str) or not category:
            raise _error(w, where, _type_problem("category", category, "a non-empty string"))
        if not isinstance(messages, list) or not messages:
            raise _error(w, where, _type_problem("messages", messages, "a non-empty list of role/content objects"))
        system, users = [], []
        for i, message in enumerate(messages):
            if not isinstance(message, dict):
                raise _error(w, where, f"messages[{i}] must be an object with role and content")
            role, content = message.get("role"), message.get("content")
            if not isinstance(role, str) or not isinstance(content, str) or not content.strip():
                raise _error(w, where, f"messages[{i}] needs a role and a non-empty content, got {message!r:.80}")
            if content.strip() == SPEED_BENCH_PLACEHOLDER:
                raise _error(w, f"{where} (question_id {question!r}, category {category!r})", SPEED_BENCH_REBUILD)
            if role == "system":
                system.append(content)
            elif role == "user":
                users.append(content)
        if not users:
            raise _error(w, where, "messages has no user turn")
        if w.categories and category not in w.categories:
            continue
        # The system prompt leads the first turn: a completions prompt has no roles, and a chat one is the user's.
        first = "\n\n".join([*system, users[0]])
        if w.turns == 1:
            out.append((first, output, category))
        elif len(users) >= w.turns:  # a conversation: rows with fewer user turns are not used
            out.append(([(turn, output) for turn in [first, *users[1 : w.turns]]], output, category))
    return out


_HUMAN, _ASSISTANT = {"human", "user"}, {"gpt", "assistant", "chatgpt", "bard"}


def _entries_sharegpt(w: Workload) -> list[tuple[Any, Any, None]]:
    """(prompt, reply, None) per conversation, or ([(turn, reply), ...], None, None) with `w.turns` > 1;
    replies are tokenized only for the selected entries."""
    with _open(w) as fh:
        try:
            data = json.load(fh)
        except json.JSONDecodeError as e:
            raise _error(w, f"line {e.lineno}", f"invalid JSON ({e.msg})") from None
    if not isinstance(data, list):
        raise _error(w, "top level", f"expected a JSON list of conversations, got {type(data).__name__}")
    out = []
    for i, entry in enumerate(data):
        if not isinstance(entry, dict):
            raise _error(w, f"at [{i}]", f"expected an object, got {type(entry).__name__}")
        if "conversations" not in entry:
            raise _error(w, f"at [{i}]", "field 'conversations' is missing")
        turns = entry["conversations"]
        if not isinstance(turns, list):
            raise _error(w, f"at [{i}]", _type_problem("conversations", turns, "a list"))
        for j, turn in enumerate(turns):
            where = f"at [{i}].conversations[{j}]"
            if not isinstance(turn, dict):
                raise _error(w, where, f"expected an object, got {type(turn).__name__}")
            for key in ("from", "value"):
                if key not in turn:
                    raise _error(w, where, f"field {key!r} is missing")
                if not isinstance(turn[key], str):
                    raise _error(w, where, _type_problem(key, turn[key], "a string"))
        # Usable: human turns that an assistant reply follows (the first alone, or the first `w.turns`).
        pairs = [
            (turns[j]["value"], turns[j + 1]["value"])
            for j in range(len(turns) - 1)
            if turns[j]["from"] in _HUMAN and turns[j + 1]["from"] in _ASSISTANT and turns[j]["value"]
        ]
        h = next((j for j, t in enumerate(turns) if t["from"] in _HUMAN), len(turns))
        if w.turns == 1 and h + 1 < len(turns) and turns[h + 1]["from"] in _ASSISTANT and turns[h]["value"]:
            out.append((turns[h]["value"], turns[h + 1]["value"], None))
        elif w.turns > 1 and len(pairs) >= w.turns:
            out.append((pairs[: w.turns], None, None))
    return out


def _token_count(raw: str | None) -> int | None:
    try:
        value = float((raw or "").strip())
    except ValueError:
        return None
    return int(value) if value.is_integer() and value >= 1 else None


def _entries_burstgpt(w: Workload) -> list[tuple[int, int]]:
    columns = ("Request tokens", "Response tokens")
    rows = []
    with _open(w) as fh:
        reader = csv.DictReader(fh)
        try:
            header = reader.fieldnames or []
            for col in columns:
                if col not in header:
                    raise _error(w, "line 1", f"CSV header has no column {col!r} (columns: {', '.join(header)})")
            for row in reader:
                counts = [_token_count(row.get(col)) for col in columns]
                for col, value in zip(columns, counts):
                    if value is None:
                        raise _error(
                            w,
                            f"line {reader.line_num}",
                            f"column {col!r} must be a whole token count >= 1, got {row.get(col)!r}",
                        )
                rows.append((counts[0], counts[1]))
        except csv.Error as e:
            raise _error(w, f"line {reader.line_num}", f"malformed CSV ({e})") from None
    return rows


def _pick(w: Workload, n_entries: int, n: int, base: list[int]) -> list[int]:
    """Indices of the entries to use: a seeded sample, cycled when the file is short."""
    if n_entries == 0:
        raise WorkloadError(f"workload {w.name!r}: {w.path}: no usable entries")
    order = rng_for(base, 0).permutation(n_entries)
    return [int(order[i % n_entries]) for i in range(n)]


def _cap(tok: Tok, text: str, cap: int | None) -> tuple[str, int]:
    """Truncate text to at most `cap` prompt tokens (the input_len override)."""
    length = tok.count(text)
    while cap is not None and length > cap and text:
        ids = tok.encode(text)
        text = tok.decode(ids[: max(0, len(ids) - (length - cap))])
        length = tok.count(text)
    return text, length


def _reply_len(w: Workload, tok: Tok, output: Any) -> int:
    """A request's max_tokens: for a sharegpt reply the override or the reply's length, else the entry's own."""
    if isinstance(output, str):
        return w.output_len or max(1, len(tok.encode(output)))
    return output


def build_text_file(w: Workload, tok: Tok, n: int, base: list[int]) -> list[Prompt]:
    entries = _ENTRY_READERS[w.kind](w)
    if w.categories and w.kind != "speed_bench":  # the other readers keep every entry's category
        entries = [entry for entry in entries if entry[2] in w.categories]
    if not entries and w.categories:
        found = sorted({entry[2] for entry in _ENTRY_READERS[w.kind](replace(w, categories=())) if entry[2]})
        raise WorkloadError(
            f"workload {w.name!r}: {w.path}: no entry of categories {', '.join(w.categories)}"
            + (f" (turns={w.turns})" if w.turns > 1 else "")
            + f"; the file's categories: {', '.join(found) or 'none'}"
        )
    if not entries and w.turns > 1:
        raise WorkloadError(f"workload {w.name!r}: {w.path}: no conversation with {w.turns} user turns or more")
    out = []
    for index in _pick(w, len(entries), n, base):
        text, output, category = entries[index]
        if isinstance(text, list):  # a conversation: the first turn is this prompt, the rest follow it
            turns = [(_cap(tok, turn, w.input_len)[0], _reply_len(w, tok, reply)) for turn, reply in text]
            first = conversation_prompt("", turns[0][0])
            out.append(Prompt(first, tok.count(first), turns[0][1], category, turns=tuple(turns[1:])))
            continue
        text, length = _cap(tok, text, w.input_len)
        out.append(Prompt(text, length, _reply_len(w, tok, output), category))
    return out


def build_burstgpt(w: Workload, tok: Tok, n: int, base: list[int]) -> list[Prompt]:
    rows = _entries_burstgpt(w)
    out = []
    for i, index in enumerate(_pick(w, len(rows), n, base)):
        request, response = rows[index]
        length = min(request, w.input_len or request)
        text = random_prompt(tok, rng_for(base, 1, i), length, f"workload {w.name!r}: {w.path}")
        out.append(Prompt(text, length, w.output_len or response))
    return out


_ENTRY_READERS: dict[str, Callable[[Workload], list]] = {  # each entry: (text or turns, output, category)
    "sharegpt": _entries_sharegpt,
    "spec_bench": _entries_spec_bench,
    "speed_bench": _entries_speed_bench,
    "jsonl": _entries_jsonl,
}


register_builder((TEXT_FILE_BUILDER,), build_text_file, Tok)
register_builder(("burstgpt",), build_burstgpt, Tok)
