"""Workloads: which prompts are sent, and how many tokens each asks for.

A `Workload` is a cheap, frozen description (validated at collection, no
tokenizer, no file access); `Workload.build()` turns it into `Prompt`s with
exact token counts for one tokenizer.  Same (workload, tokenizer,
num_prompts, seed) -> same prompts.

Kinds: ``random`` (random token ids), ``code_edit`` (generated Python plus
an edit instruction whose answer mostly repeats the prompt: where n-gram and
suffix speculation win), ``sharegpt`` (JSON conversations: first human turn,
output = length of the reply), ``spec_bench`` (JSONL ``turns[0]``),
``burstgpt`` (CSV token counts -> random prompts of those lengths), ``jsonl``
(``"prompt"`` + optional ``"output_tokens"``, the format of `vllm bench serve`'s
custom dataset: custom, swe_bench, mlperf) and
``custom_builder`` (a user function ``(tokenizer, num_prompts, seed)``).

Overrides scale a workload down.  For data files ``input_len`` caps prompt
length (longer prompts are truncated), and ``output_len`` replaces the
per-prompt length of sharegpt and burstgpt; for jsonl it is only the default
for lines without ``"output_tokens"`` (a file that names its lengths means them).
"""

from __future__ import annotations

import csv
import functools
import json
import os
import re
import zlib
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator, Mapping

import numpy as np

SYNTHETIC_KINDS = ("random", "code_edit")
FILE_KINDS = ("sharegpt", "spec_bench", "burstgpt", "jsonl")
KINDS = SYNTHETIC_KINDS + FILE_KINDS + ("custom_builder",)
OVERRIDE_KEYS = ("input_len", "output_len", "path", "ignore_eos")
DEFAULT_FILE_OUTPUT_LEN = 256
# Several rounds are normally enough; the cap only turns a pathological
# tokenizer into an error instead of a hang.
_MAX_FIT_ROUNDS = 200


class MissingDataPath(Exception):
    """A data-file workload whose file nobody named: an environment gap, not a marker mistake."""


class WorkloadError(ValueError):
    """A workload that cannot be resolved or built; the message says where and why."""


@dataclass(frozen=True)
class Prompt:
    text: str
    prompt_len: int  # len(tokenizer(text).input_ids)
    output_len: int  # max_tokens for this request


def _check_len(workload: str, key: str, value: Any, what: str = "field") -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise WorkloadError(f"workload {workload!r}: {what} {key!r} must be an integer >= 1, got {value!r}")


@dataclass(frozen=True)
class Workload:
    name: str
    kind: str
    input_len: int | None = None
    output_len: int | None = None
    path: str | None = None
    ignore_eos: bool = True
    builder: Callable[[Any, int, int], list[Prompt]] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise WorkloadError(f"workload name must be a non-empty string, got {self.name!r}")
        if self.kind not in KINDS:
            raise WorkloadError(f"workload {self.name!r}: unknown kind {self.kind!r}; kinds: {', '.join(KINDS)}")
        for key in ("input_len", "output_len"):
            if getattr(self, key) is not None:
                _check_len(self.name, key, getattr(self, key))
        if self.kind in SYNTHETIC_KINDS and (self.input_len is None or self.output_len is None):
            raise WorkloadError(f"workload {self.name!r}: kind {self.kind!r} needs input_len and output_len")
        if (self.kind == "custom_builder") != (self.builder is not None):
            raise WorkloadError(f"workload {self.name!r}: a builder goes with kind 'custom_builder' and only with it")
        if self.path is not None and self.kind not in FILE_KINDS:
            raise WorkloadError(f"workload {self.name!r}: kind {self.kind!r} reads no data file, so it takes no path")

    def with_overrides(self, **overrides: Any) -> Workload:
        changes: dict[str, Any] = {}
        for key, value in overrides.items():
            bad = f"workload {self.name!r}: override {key!r}"
            if key not in OVERRIDE_KEYS:
                raise WorkloadError(f"{bad} is unknown; allowed: {', '.join(OVERRIDE_KEYS)}")
            if key in ("input_len", "output_len"):
                _check_len(self.name, key, value, "override")
                if key == "input_len" and self.kind == "custom_builder":
                    raise WorkloadError(f"{bad} does not apply: its builder decides prompt lengths")
            elif key == "path":
                value = os.fspath(value) if isinstance(value, os.PathLike) else value
                if not isinstance(value, str) or not value:
                    raise WorkloadError(f"{bad} must be a non-empty string, got {value!r}")
                if self.kind not in FILE_KINDS:
                    raise WorkloadError(f"{bad} does not apply: kind {self.kind!r} reads no data file")
            elif not isinstance(value, bool):
                raise WorkloadError(f"{bad} must be true or false, got {value!r}")
            changes[key] = value
        return replace(self, **changes) if changes else self

    def describe(self) -> dict:
        out = {"name": self.name, "kind": self.kind, "input_len": self.input_len,
               "output_len": self.output_len, "path": self.path, "ignore_eos": self.ignore_eos}
        if self.builder is not None:
            out["builder"] = f"{getattr(self.builder, '__module__', '?')}.{getattr(self.builder, '__qualname__', '?')}"
        return out

    def build(self, tokenizer: Any, num_prompts: int, seed: int = 0) -> list[Prompt]:
        _check_len(self.name, "num_prompts", num_prompts, "argument")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise WorkloadError(f"workload {self.name!r}: seed must be an integer >= 0, got {seed!r}")
        if self.kind == "custom_builder":
            return self._build_custom(tokenizer, num_prompts, seed)
        if self.kind in FILE_KINDS and self.path is None:
            raise WorkloadError(_no_path_message(self.name))
        # Mixing the name in keeps two workloads built with the same seed from
        # sharing prompt prefixes (a prefix-cache win nobody asked for).
        base = [seed, zlib.crc32(f"{self.name}/{self.kind}".encode())]
        try:
            return _BUILDERS[self.kind](self, _Tok(tokenizer), num_prompts, base)
        except UnicodeDecodeError as e:
            raise WorkloadError(f"workload {self.name!r}: {self.path}: not UTF-8 text (byte {e.start})") from None

    def _build_custom(self, tokenizer: Any, num_prompts: int, seed: int) -> list[Prompt]:
        prompts = list(self.builder(tokenizer, num_prompts, seed))  # type: ignore[misc]
        if len(prompts) != num_prompts or not all(isinstance(p, Prompt) for p in prompts):
            raise WorkloadError(f"workload {self.name!r}: builder must return {num_prompts} Prompt objects, "
                                f"got {len(prompts)} items of types {sorted({type(p).__name__ for p in prompts})}")
        if self.output_len is not None:
            prompts = [replace(p, output_len=self.output_len) for p in prompts]
        return prompts


def data_path_env_var(name: str) -> str:
    return "PYTEST_SPECDEC_" + re.sub(r"[^A-Za-z0-9]", "_", name).upper() + "_PATH"


def data_path_ini_key(name: str) -> str:
    return "specdec_" + re.sub(r"[^A-Za-z0-9]", "_", name).lower() + "_path"


def _no_path_message(name: str) -> str:
    return (f"workload {name!r} reads a data file but no path was given: pass "
            f"@pytest.mark.workload({name!r}, path=...), set {data_path_env_var(name)}, "
            f"or set the ini key {data_path_ini_key(name)}")


CATALOG: dict[str, Workload] = {w.name: w for w in [
    Workload("random_s", "random", input_len=1024, output_len=256),     # single-turn chat
    Workload("random_m", "random", input_len=10240, output_len=256),    # long chat, sub-agent
    Workload("random_l", "random", input_len=2048, output_len=2048),    # reasoning
    Workload("random_x", "random", input_len=10240, output_len=2048),   # agent
    Workload("code_edit", "code_edit", input_len=512, output_len=256),
    Workload("sharegpt", "sharegpt"),
    Workload("spec_bench", "spec_bench", output_len=DEFAULT_FILE_OUTPUT_LEN),
    Workload("burstgpt", "burstgpt"),
    Workload("swe_bench", "jsonl", output_len=DEFAULT_FILE_OUTPUT_LEN),
    Workload("mlperf", "jsonl", output_len=DEFAULT_FILE_OUTPUT_LEN),
    Workload("custom", "jsonl", output_len=DEFAULT_FILE_OUTPUT_LEN),
]}


def resolve_workload(name_or_workload: str | Workload, overrides: Mapping[str, Any] | None = None, *,
                     registered: Mapping[str, Workload] = {}, paths: Mapping[str, str] = {}) -> Workload:
    """Name or Workload + overrides -> the Workload to build; no tokenizer or file needed.

    Registered workloads shadow catalog entries of the same name, so a
    downstream repo can redefine one.  ``paths`` maps workload names to data
    paths found in env vars / ini; an explicit path (override or the
    Workload's own) comes first.
    """
    if isinstance(name_or_workload, Workload):
        workload = name_or_workload
    elif isinstance(name_or_workload, str):
        known = {**CATALOG, **registered}
        if name_or_workload not in known:
            raise WorkloadError(f"unknown workload {name_or_workload!r}; known workloads: {', '.join(sorted(known))}")
        workload = known[name_or_workload]
    else:
        raise WorkloadError(f"a workload is a catalog name or a Workload, got {type(name_or_workload).__name__}")
    workload = workload.with_overrides(**dict(overrides or {}))
    if workload.kind in FILE_KINDS and workload.path is None:
        path = paths.get(workload.name)
        if not path:
            raise MissingDataPath(_no_path_message(workload.name))
        workload = replace(workload, path=os.fspath(path))
    return workload


# ----------------------------------------------------------------- tokens


class _Tok:
    """The few tokenizer operations used here.

    Prompt lengths are defined as len(tokenizer(text).input_ids), which
    includes any BOS the tokenizer adds (vLLM counts it too); ids are edited
    without specials and the total is checked with them.
    """

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.n_special = len(tokenizer("").input_ids)

    def count(self, text: str) -> int:
        return len(self.tokenizer(text).input_ids)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False).input_ids)

    def decode(self, ids: Any) -> str:
        return self.tokenizer.decode([int(i) for i in ids])

    def allowed_ids(self) -> np.ndarray:
        return _allowed_ids(self.tokenizer)

    def word_ids(self) -> np.ndarray:
        return _word_ids(self.tokenizer)


# Vocabulary scans are cached per tokenizer object: the word scan takes ~0.5 s.
@functools.lru_cache(maxsize=4)
def _allowed_ids(tokenizer: Any) -> np.ndarray:
    banned = set(tokenizer.all_special_ids) | set(tokenizer.get_added_vocab().values())
    return np.array([i for i in range(tokenizer.vocab_size) if i not in banned])


@functools.lru_cache(maxsize=4)
def _word_ids(tokenizer: Any) -> np.ndarray:
    """Ids of plain " word" tokens: appending one adds exactly one token in
    byte-level BPE, which makes the last step of length fitting exact."""
    ids = [int(i) for i in _allowed_ids(tokenizer)]
    texts = tokenizer.batch_decode([[i] for i in ids])
    cand = [(i, t) for i, t in zip(ids, texts) if re.fullmatch(r" [a-z]{3,10}", t)]
    enc = tokenizer([t for _, t in cand], add_special_tokens=False).input_ids
    words = np.array([i for (i, _), e in zip(cand, enc) if list(e) == [i]])
    # A tokenizer without leading-space words still works, with noisier filler.
    return words if len(words) else _allowed_ids(tokenizer)


def _fit(tok: _Tok, rng: np.random.Generator, target: int, make: Callable[[str], str], first: list[int],
         pool: np.ndarray, who: str) -> str:
    """Adjust filler ids until len(tokenizer(make(decode(ids))).input_ids) == target.

    Decoding and re-encoding random ids does not round-trip (merges, split
    UTF-8 bytes), so each round re-encodes, then truncates or appends by the
    miss.  Appends after the first rounds use plain-word tokens, which add
    one token each, so the loop settles instead of oscillating.
    """
    ids = list(first)
    for round_no in range(_MAX_FIT_ROUNDS):
        filler = tok.decode(ids)
        text = make(filler)
        miss = tok.count(text) - target
        if miss == 0:
            return text
        ids = tok.encode(filler)
        if miss > 0:
            if miss > len(ids):
                raise WorkloadError(f"{who}: {target} tokens is too few for this prompt's fixed text")
            ids = ids[:len(ids) - miss]
        else:
            src = pool if round_no < 3 else tok.word_ids()
            ids += [int(i) for i in rng.choice(src, -miss)]
    raise WorkloadError(f"{who}: could not fit a prompt to exactly {target} tokens with this tokenizer")


def _random_prompt(tok: _Tok, rng: np.random.Generator, input_len: int, who: str) -> str:
    if input_len <= tok.n_special:
        raise WorkloadError(f"{who}: input_len {input_len} leaves no room beside the tokenizer's special tokens")
    pool = tok.allowed_ids()
    first = [int(i) for i in rng.choice(pool, input_len - tok.n_special)]
    return _fit(tok, rng, input_len, lambda s: s, first, pool, who)


def _rng(base: list[int], *more: int) -> np.random.Generator:
    return np.random.default_rng([*base, *more])


def _build_synthetic(w: Workload, tok: _Tok, n: int, base: list[int]) -> list[Prompt]:
    make, stream = (_random_prompt, 1) if w.kind == "random" else (_code_prompt, 2)
    # One generator per prompt: prompt i stays the same whatever num_prompts is.
    return [Prompt(make(tok, _rng(base, stream, i), w.input_len, f"workload {w.name!r}"),  # type: ignore[arg-type]
                   w.input_len, w.output_len) for i in range(n)]  # type: ignore[arg-type]


# ---------------------------------------------------------------- code_edit

_VERBS = ["compute", "parse", "load", "merge", "filter", "count", "format", "normalize", "scale",
          "validate", "collect", "render", "split", "rank", "summarize", "clean", "group", "encode"]
_NOUNS = ["items", "records", "scores", "totals", "names", "values", "rows", "tokens", "prices",
          "events", "users", "orders", "lines", "labels", "weights", "samples", "paths", "files"]
_PARAMS = ["data", "entries", "batch", "source", "table", "payload", "chunk", "series"]
_TEMPLATES = [
    "def {f}({p}, factor={k}):\n    result = 0\n    for item in {p}:\n        result += item * factor\n"
    "    return result\n",
    "def {f}({p}):\n    seen = set()\n    out = []\n    for item in {p}:\n        if item not in seen:\n"
    "            seen.add(item)\n            out.append(item)\n    return out\n",
    "def {f}({p}, limit={k}):\n    return [x for x in {p} if x is not None and len(str(x)) < limit]\n",
    "def {f}({p}, sep=\",\"):\n    parts = [str(x).strip() for x in {p}]\n    return sep.join(p for p in parts if p)\n",
    "def {f}({p}):\n    if not {p}:\n        return 0.0\n    total = sum({p})\n    return total / len({p})\n",
    "def {f}({p}, key=\"{n}\"):\n    groups = {{}}\n    for row in {p}:\n"
    "        groups.setdefault(row.get(key), []).append(row)\n    return groups\n",
    "def {f}({p}, width={k}):\n    lines = []\n    for i, value in enumerate({p}):\n"
    "        lines.append(f\"{{i:>4}} {{value!s:<{{width}}}}\")\n    return \"\\n\".join(lines)\n",
    "class {c}:\n    def __init__(self, {p}):\n        self.{p} = list({p})\n\n    def {f}(self):\n"
    "        return sorted(self.{p}, reverse=True)[:{k}]\n",
]
_INSTRUCTIONS = [
    "Rewrite the code above with the function `{old}` renamed to `{new}`; print the whole file.",
    "Rewrite the code above so that every use of `{p}` in `{old}` is called `{newp}`; print the whole file.",
    "Rewrite the code above adding a one-line docstring to `{old}`; print the whole file unchanged otherwise.",
]


def _code_prompt(tok: _Tok, rng: np.random.Generator, input_len: int, who: str) -> str:
    names = [f"{v}_{n}" for v in _VERBS for n in _NOUNS]
    order = rng.permutation(len(names))
    instruction = _INSTRUCTIONS[int(rng.integers(len(_INSTRUCTIONS)))]

    def render(blocks: list[tuple[str, str, str]], filler: str) -> str:
        old, p = blocks[0][1], blocks[0][2]
        text = instruction.format(old=old, new=names[int(order[-1])], p=p, newp=p + "_in")
        # The random tag line makes every prompt differ from its first token.
        return f"# module tag:{filler}\n\n" + "\n\n".join(b[0] for b in blocks) + "\n\n" + text

    def block(j: int, template: int) -> tuple[str, str, str]:
        f, p = names[int(order[j])], _PARAMS[int(rng.integers(len(_PARAMS)))]
        src = _TEMPLATES[template].format(f=f, p=p, k=int(rng.integers(2, 99)),
                                          n=_NOUNS[int(rng.integers(len(_NOUNS)))],
                                          c="".join(s.title() for s in f.split("_")))
        return src, f, p

    # The instruction names the first block's function and parameter, so that
    # block is always a plain function (template 0), never the class.
    blocks = [block(0, 0)]
    used = tok.count(render(blocks, ""))
    # Counting blocks one by one (not the whole file each time) keeps long
    # prompts cheap; block boundaries are newlines, so the sum is close and
    # the check below settles it.
    budget, misses = input_len - 8, 0
    for j in range(1, len(order) - 1):
        candidate = block(j, int(rng.integers(len(_TEMPLATES))))
        cost = tok.count(candidate[0] + "\n\n")
        if used + cost <= budget:
            blocks.append(candidate)
            used += cost
        else:
            misses += 1
            if misses > 8:
                break
    while (length := tok.count(render(blocks, ""))) > input_len - 2:
        if len(blocks) == 1:
            raise WorkloadError(f"{who}: input_len {input_len} is too small for a code_edit prompt "
                                f"(one function plus the instruction take {length} tokens)")
        blocks.pop()
    first = [int(i) for i in rng.choice(tok.word_ids(), 2)]
    return _fit(tok, rng, input_len, lambda s: render(blocks, s), first, tok.word_ids(), who)


# ---------------------------------------------------------------- data files


def _error(w: Workload, where: str, problem: str) -> WorkloadError:
    return WorkloadError(f"workload {w.name!r}: {w.path}, {where}: {problem}")


def _type_problem(key: str, value: Any, expected: str) -> str:
    return f"field {key!r} must be {expected}, got {type(value).__name__} {value!r:.40}"


def _open(w: Workload):
    path = os.path.expanduser(w.path)  # type: ignore[arg-type]
    if not os.path.isfile(path):
        raise WorkloadError(f"workload {w.name!r}: data file not found: {w.path} "
                            f"(give another with path=... or {data_path_env_var(w.name)})")
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


def _entries_jsonl(w: Workload) -> list[tuple[str, int]]:
    out = []
    for where, obj in _jsonl_lines(w):
        if "prompt" not in obj:
            raise _error(w, where, "field 'prompt' is missing")
        prompt, out_len = obj["prompt"], obj.get("output_tokens")
        if not isinstance(prompt, str) or not prompt:
            raise _error(w, where, _type_problem("prompt", prompt, "a non-empty string"))
        if out_len is not None and (isinstance(out_len, bool) or not isinstance(out_len, int) or out_len < 1):
            raise _error(w, where, _type_problem("output_tokens", out_len, "an integer >= 1"))
        out.append((prompt, out_len or w.output_len or DEFAULT_FILE_OUTPUT_LEN))
    return out


def _entries_spec_bench(w: Workload) -> list[tuple[str, int]]:
    out = []
    for where, obj in _jsonl_lines(w):
        if "turns" not in obj:
            raise _error(w, where, "field 'turns' is missing")
        turns = obj["turns"]
        if not isinstance(turns, list) or not turns or not isinstance(turns[0], str) or not turns[0]:
            raise _error(w, where, _type_problem("turns", turns, "a non-empty list of strings"))
        out.append((turns[0], w.output_len or DEFAULT_FILE_OUTPUT_LEN))
    return out


_HUMAN, _ASSISTANT = {"human", "user"}, {"gpt", "assistant", "chatgpt", "bard"}


def _entries_sharegpt(w: Workload) -> list[tuple[str, str]]:
    """(prompt, reply) pairs; replies are tokenized only for the selected entries."""
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
        # Usable: the first human turn, when an assistant reply follows it.
        h = next((j for j, t in enumerate(turns) if t["from"] in _HUMAN), len(turns))
        if h + 1 < len(turns) and turns[h + 1]["from"] in _ASSISTANT and turns[h]["value"]:
            out.append((turns[h]["value"], turns[h + 1]["value"]))
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
                        raise _error(w, f"line {reader.line_num}",
                                     f"column {col!r} must be a whole token count >= 1, got {row.get(col)!r}")
                rows.append((counts[0], counts[1]))
        except csv.Error as e:
            raise _error(w, f"line {reader.line_num}", f"malformed CSV ({e})") from None
    return rows


def _pick(w: Workload, n_entries: int, n: int, base: list[int]) -> list[int]:
    """Indices of the entries to use: a seeded sample, cycled when the file is short."""
    if n_entries == 0:
        raise WorkloadError(f"workload {w.name!r}: {w.path}: no usable entries")
    order = _rng(base, 0).permutation(n_entries)
    return [int(order[i % n_entries]) for i in range(n)]


def _cap(tok: _Tok, text: str, cap: int | None) -> tuple[str, int]:
    """Truncate text to at most `cap` prompt tokens (the input_len override)."""
    length = tok.count(text)
    while cap is not None and length > cap and text:
        ids = tok.encode(text)
        text = tok.decode(ids[:max(0, len(ids) - (length - cap))])
        length = tok.count(text)
    return text, length


def _build_text_file(w: Workload, tok: _Tok, n: int, base: list[int]) -> list[Prompt]:
    entries = _ENTRY_READERS[w.kind](w)
    out = []
    for index in _pick(w, len(entries), n, base):
        text, output = entries[index]
        if isinstance(output, str):  # a sharegpt reply: its length is the request's
            output = w.output_len or max(1, len(tok.encode(output)))
        text, length = _cap(tok, text, w.input_len)
        out.append(Prompt(text, length, output))
    return out


def _build_burstgpt(w: Workload, tok: _Tok, n: int, base: list[int]) -> list[Prompt]:
    rows = _entries_burstgpt(w)
    out = []
    for i, index in enumerate(_pick(w, len(rows), n, base)):
        request, response = rows[index]
        length = min(request, w.input_len or request)
        text = _random_prompt(tok, _rng(base, 1, i), length, f"workload {w.name!r}: {w.path}")
        out.append(Prompt(text, length, w.output_len or response))
    return out


_ENTRY_READERS: dict[str, Callable[[Workload], list]] = {
    "sharegpt": _entries_sharegpt, "spec_bench": _entries_spec_bench, "jsonl": _entries_jsonl}
_BUILDERS: dict[str, Callable[[Workload, _Tok, int, list[int]], list[Prompt]]] = {
    "random": _build_synthetic, "code_edit": _build_synthetic, "burstgpt": _build_burstgpt,
    "sharegpt": _build_text_file, "spec_bench": _build_text_file, "jsonl": _build_text_file}
