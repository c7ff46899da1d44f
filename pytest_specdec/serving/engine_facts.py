"""What a server actually runs, read from its start-up log, `/metrics` and `/version`.

Turning on SD can change more than SD: on the first H100 run the reference
server used vLLM's V2 model runner with async scheduling, while the n-gram
server logged "Model Runner V2 does not yet support ngram" and "Async
scheduling not supported with ngram ... will be disabled".  The comparison
then measured SD plus two engine changes.  The facts read here are recorded
per side.  A difference the engine's own log says it made because of the
speculative method (vLLM's fallbacks for `ngram`) is *SD's cost* (`sd_costs`):
a team that deploys the method pays it, so the comparison against the
reference as deployed stands, with the cost and the engine's alternative
named.  Every other difference, one the test or the harness made, is a
*confound* (`confounds`), shown with its fix where there is one.

Facts are read, never assumed: a fact a server does not reveal is absent, and
a fact known on one side only is not a confound (the other side may well run
the same way).  The exception is a fallback the log announces ("... will be
disabled"): that names a change against the engine's default, which is what
the other side runs unless its own log says otherwise.
"""

from __future__ import annotations

import re

from dataclasses import asdict, dataclass
from typing import Mapping

from ..engines import Engine, engine_named
from ..engines.counters import parse_prometheus
from ..engines.server_spec import DEFAULT_ENGINE

# Facts that SD itself brings with it and that are not a change of engine path.
SD_OWN = frozenset({"speculative_config"})


@dataclass(frozen=True)
class Confound:
    """One engine fact that differs between the reference and SD, with the fix where one is known."""

    fact: str
    reference: str
    speculative: str
    fix: str = ""

    def describe(self) -> str:
        text = f"{self.fact}: reference {self.reference}, SD {self.speculative}"
        return text + (f" (fix: {self.fix})" if self.fix else "")

    def as_dict(self) -> dict:
        return {**asdict(self), "describe": self.describe()}


@dataclass(frozen=True)
class SDCost:
    """One engine fact the engine changed on the SD side because of the speculative method (its log says so)."""

    fact: str
    reference: str
    speculative: str
    cost: str  # the engine's words: what it turned off for the method, and the alternative that keeps it

    def describe(self) -> str:
        return f"{self.cost} ({self.fact}: reference {self.reference}, SD {self.speculative})"

    def as_dict(self) -> dict:
        return {**asdict(self), "describe": self.describe()}


def read_engine_facts(server, timeout: float = 5.0) -> dict[str, str]:
    """Everything `server` reveals (a launched server's log, then /metrics, then /version; an endpoint
    has no log).  What cannot be read is left out: an unreadable source is not a fact."""
    import httpx

    engine = engine_of(server)
    log: dict[str, str] = {}
    if getattr(server, "log_path", None):
        try:
            log = engine.facts_from_log(server.log_path.read_bytes().decode("utf-8", "replace"))
        except OSError:
            pass
    metrics: dict[str, str] = {}
    if engine.metrics_facts:  # never a read that drains what the run's counters are summed from
        try:
            metrics = engine.facts_from_metrics(parse_prometheus(server.metrics_text()))
        except Exception:  # a server without /metrics (another engine) still has its other facts
            pass
    version: dict[str, str] = {}
    for path in engine.version_paths:  # each engine says where its version is
        try:
            response = httpx.get(f"{server.url}{path}", timeout=timeout)
            found = engine.version_from(path, response.json()) if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            continue
        if isinstance(found, str) and found:
            version = {"version": found}
            break
    if not version and (local := engine.local_version(getattr(server, "command", None) or [])):
        version = {"version": local}  # a build that does not know its own version: the package that ran it
    # What the harness set in the server's environment, where the log is silent on it (VLLM_USE_V2_MODEL_RUNNER).
    env = engine.facts_from_env(getattr(server, "env", None) or {})
    return merge(log, metrics, version, env)


def merge(*sources: Mapping[str, str]) -> dict[str, str]:
    """Facts from several sources; an earlier source wins (the log names them most precisely)."""
    facts: dict[str, str] = {}
    for source in sources:
        for key, value in source.items():
            facts.setdefault(key, str(value))
    return facts


def engine_of(server) -> Engine:
    return engine_named(getattr(getattr(server, "spec", None), "engine", DEFAULT_ENGINE))


def confounds(
    reference: Mapping[str, str], speculative: Mapping[str, str], engine: str = DEFAULT_ENGINE, method: str = ""
) -> list[Confound]:
    """Every fact both sides reveal that differs, plus fallbacks one side logged against the other's default
    (the fallbacks and the fixes are the engine's own); with the SD side's `method`, not those the engine
    says it made for that method (`sd_costs`)."""
    known = engine_named(engine)
    return [
        found
        for found in _differences(reference, speculative, known)
        if not known.sd_cost(found.fact, found.reference, found.speculative, method)
    ]


def sd_costs(
    reference: Mapping[str, str], speculative: Mapping[str, str], engine: str = DEFAULT_ENGINE, method: str = ""
) -> list[SDCost]:
    """The differences the engine made because of SD's `method`, as its own log says: SD's cost, compared."""
    known = engine_named(engine)
    found = []
    for difference in _differences(reference, speculative, known):
        cost = known.sd_cost(difference.fact, difference.reference, difference.speculative, method)
        if cost:
            found.append(SDCost(difference.fact, difference.reference, difference.speculative, cost))
    return found


def _differences(reference: Mapping[str, str], speculative: Mapping[str, str], known: Engine) -> list[Confound]:
    fallback_defaults, fixes = known.fallback_defaults, known.confound_fixes
    found = []
    for fact in sorted(set(reference) | set(speculative)):
        if fact in SD_OWN:
            continue
        ref, sd = reference.get(fact), speculative.get(fact)
        if fact in fallback_defaults and (ref is None) != (sd is None) and "fallback" in (ref or sd):
            ref, sd = ref or fallback_defaults[fact], sd or fallback_defaults[fact]
        if ref is None or sd is None or _same(ref, sd):
            continue
        found.append(Confound(fact, ref, sd, fixes.get(fact, "")))
    return found


def _same(a: str, b: str) -> bool:
    try:
        return float(a) == float(b)
    except ValueError:
        return _state(a) == _state(b)


def _state(value: str) -> str:
    """A fact's value without the note on where it came from: "disabled (fallback)" is "disabled"."""
    return re.sub(r"\s*\([^)]*\)$", "", value.strip()).lower()
