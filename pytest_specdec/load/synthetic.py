"""Synthetic prompts fitted to an exact token count: random tokens and code edits.

Prompt lengths are defined as ``len(tokenizer(text).input_ids)`` (vLLM counts
the same), and decoding random ids does not round-trip, so every prompt is
fitted by re-encoding until it is exactly ``input_len`` tokens long.  The
``code_edit`` generator writes Python plus an instruction whose answer mostly
repeats the prompt: the traffic where n-gram and suffix speculation win.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Callable

import numpy as np

from .workloads import Prompt, Workload, WorkloadError, register_builder

# Several rounds are normally enough; the cap only turns a pathological
# tokenizer into an error instead of a hang.
_MAX_FIT_ROUNDS = 200


class Tok:
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


def _fit(
    tok: Tok,
    rng: np.random.Generator,
    target: int,
    make: Callable[[str], str],
    first: list[int],
    pool: np.ndarray,
    who: str,
) -> str:
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
            ids = ids[: len(ids) - miss]
        else:
            src = pool if round_no < 3 else tok.word_ids()
            ids += [int(i) for i in rng.choice(src, -miss)]
    raise WorkloadError(f"{who}: could not fit a prompt to exactly {target} tokens with this tokenizer")


def random_prompt(tok: Tok, rng: np.random.Generator, input_len: int, who: str) -> str:
    if input_len <= tok.n_special:
        raise WorkloadError(f"{who}: input_len {input_len} leaves no room beside the tokenizer's special tokens")
    pool = tok.allowed_ids()
    first = [int(i) for i in rng.choice(pool, input_len - tok.n_special)]
    return _fit(tok, rng, input_len, lambda s: s, first, pool, who)


def rng_for(base: list[int], *more: int) -> np.random.Generator:
    return np.random.default_rng([*base, *more])


def build_synthetic(w: Workload, tok: Tok, n: int, base: list[int]) -> list[Prompt]:
    make, stream = (random_prompt, 1) if w.kind == "random" else (_code_prompt, 2)
    # One generator per prompt: prompt i stays the same whatever num_prompts is.
    return [
        Prompt(
            make(tok, rng_for(base, stream, i), w.input_len, f"workload {w.name!r}"),  # type: ignore[arg-type]
            w.input_len,
            w.output_len,
        )
        for i in range(n)
    ]  # type: ignore[arg-type]


# --- code_edit ---

_VERBS = [
    "compute",
    "parse",
    "load",
    "merge",
    "filter",
    "count",
    "format",
    "normalize",
    "scale",
    "validate",
    "collect",
    "render",
    "split",
    "rank",
    "summarize",
    "clean",
    "group",
    "encode",
]
_NOUNS = [
    "items",
    "records",
    "scores",
    "totals",
    "names",
    "values",
    "rows",
    "tokens",
    "prices",
    "events",
    "users",
    "orders",
    "lines",
    "labels",
    "weights",
    "samples",
    "paths",
    "files",
]
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


def _code_prompt(tok: Tok, rng: np.random.Generator, input_len: int, who: str) -> str:
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
        src = _TEMPLATES[template].format(
            f=f,
            p=p,
            k=int(rng.integers(2, 99)),
            n=_NOUNS[int(rng.integers(len(_NOUNS)))],
            c="".join(s.title() for s in f.split("_")),
        )
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
            raise WorkloadError(
                f"{who}: input_len {input_len} is too small for a code_edit prompt "
                f"(one function plus the instruction take {length} tokens)"
            )
        blocks.pop()
    first = [int(i) for i in rng.choice(tok.word_ids(), 2)]
    return _fit(tok, rng, input_len, lambda s: render(blocks, s), first, tok.word_ids(), who)


register_builder(("random", "code_edit"), build_synthetic, Tok)
