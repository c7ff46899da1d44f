"""Measuring SD against no-SD on the same traffic.

`Measurements` is the session's measuring state over a `ServerPool`: the target tokenizers, the prompts
built for each workload, and the reference runs, measured once per (target, server args, workload, pattern,
seed) and shared by every SD configuration tested against them.  A plain object, for scripts too.
"""

from __future__ import annotations

import collections
import hashlib
import json
import weakref
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from ..atomic import write_atomic
from ..load.client import count_output_tokens, generate_load
from ..engines.counters import CounterError, counters_from_requests
from .fairness import cold_flags
from ..analysis.metrics import summarize
from ..load.patterns import AccessPattern
from ..serving.pool import ServerPool
from .progress import QuietProgress
from .reproduce import reproduce_commands
from .result import Run, SpecDecResult, compare_outputs, repeat_seed
from ..analysis.theory import cost_ratio_for
from .reference_runs import WARMUP_REQUESTS, WARMUP_SEED_OFFSET, WARMUP_TOKENS, ReferenceRuns  # warm-up: own prompts
from .build_runs import BuildRuns
from .run_checks import RunError, check_run  # noqa: F401 - RunError is raised from here too
from .warm_up import MAX_ROUNDS, MAX_SECONDS, SteadyState, warm_until_steady
from ..engines import engine_named
from ..serving.energy import energy_meter
from ..serving.server_series import DEFAULT_INTERVAL_S
from .run_watch import RunWatch
from .start_drift import StartDrifts
from ..serving.engine_facts import read_engine_facts
from ..serving.server import ManagedServer
from ..serving.models import load_tokenizer
from ..engines.server_spec import ServerSpec
from ..load.workloads import Workload


class Measurements:
    """Measures runs on the pool's servers: the test's SD runs, with the reference's (`references`, shared by
    a target's configurations) and a baseline build's (`builds`) as parts of their own."""

    def __init__(
        self,
        pool: ServerPool,
        work_dir: Path,
        *,
        repeats: int = 1,
        on_event: Callable[[str], None] | None = None,
        progress=None,
        request_timeout: float = 600.0,
        max_dispatch_lag_ms: float = 10.0,
        client_workers: int = 1,
        energy=None,
    ):
        self.pool = pool
        # serving.energy: the meter read around every run, or why there is none (None: found from the device).
        self.energy = energy if energy is not None else energy_meter(getattr(pool, "device", None))
        self.series_interval_s: float | None = DEFAULT_INTERVAL_S  # server series reads (None: off)
        self.work_dir = Path(work_dir)
        self.repeats = repeats
        self.request_timeout = request_timeout  # seconds one request may take (a stalled server ends here)
        self.max_dispatch_lag_ms = max_dispatch_lag_ms  # p99 above which a run is client-bound
        self.client_workers = client_workers  # processes each measured run's requests are spread over
        self.on_event = on_event or (lambda message: None)
        # A progress.LiveProgress on a terminal; QuietProgress elsewhere.
        self.progress = progress or QuietProgress()
        self.references = ReferenceRuns(self)
        self.builds = BuildRuns(self)
        self._tokenizers: dict[str, object] = {}
        self._prompts: dict[str, list] = {}
        # Servers held weakly, not by id(): a stopped server's id can be reused by the next one.
        # server -> (its steady state, how often it had been resumed when warmed)
        self._warmed: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._facts: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # server -> engine facts
        # server -> the counters of its metrics page's first timed-out scrape: each read waits out the timeout,
        # so a page that did not answer once is not asked again by this server's later runs (sends again).
        self._unanswered: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.remeasures: collections.Counter = collections.Counter()  # spec key -> comparisons measured again
        self._servers: dict[str, object] = {}  # spec key -> the server that last measured it
        self.warm_up_rounds = MAX_ROUNDS  # bounds of warming one fresh server until it is steady
        # --specdec-repeats auto: checks send draws again up to `max_repeats` a side (measure.more_draws).
        self.sequential, self.max_repeats, self.strict = False, repeats, False
        self.sends_again: collections.Counter[str] = collections.Counter()  # spec key -> draws sent again
        # spec key -> times its reference's draws were sent again after SD's (the machine's move)
        self.references_again: collections.Counter[str] = collections.Counter()
        self.new_draws: collections.Counter[str] = collections.Counter()  # spec key -> batches of new draws
        self.warm_up_seconds = MAX_SECONDS
        # --specdec-measure-drift: each test's servers started once more (measure.start_drift), pooled by build.
        self.measure_drift = False
        self.start_drifts = StartDrifts()

    # The parts' methods the session, the tests and the capacity search call on the measurements.
    reference_key = staticmethod(ReferenceRuns.reference_key)

    @property
    def reference_measurements(self) -> collections.Counter[str]:
        """How often each reference traffic (`reference_key`) was measured this session."""
        return self.references.reference_measurements

    def plan_reference(self, spec: ServerSpec, workload: Workload, pattern: AccessPattern, seed: int = 0) -> None:
        self.references.plan_reference(spec, workload, pattern, seed)

    def measure_planned_references(self, spec: ServerSpec) -> None:
        self.references.measure_planned_references(spec)

    def plan_reference_search(self, spec: ServerSpec, key: str, search: Callable[[], Any]) -> None:
        self.references.plan_reference_search(spec, key, search)

    def reference_search(self, spec: ServerSpec, key: str, search: Callable[[], Any]) -> Any:
        return self.references.reference_search(spec, key, search)

    def reference(self, spec: ServerSpec, workload: Workload, pattern: AccessPattern, prompts: list, **kwargs):
        return self.references.reference(spec, workload, pattern, prompts, **kwargs)

    def tokenizer(self, model: str):
        """The target's tokenizer (transformers is imported only here, at run time)."""
        if model not in self._tokenizers:
            self._tokenizers[model] = load_tokenizer(self.pool.model_resolver(model))
        return self._tokenizers[model]

    def prompts(self, model: str, workload: Workload, pattern: AccessPattern, seed: int) -> list:
        key = json.dumps([model, workload.describe(), pattern.num_prompts, seed], sort_keys=True, default=str)
        if key not in self._prompts:
            self._prompts[key] = workload.build(self.tokenizer(model), pattern.num_prompts, seed)
        return self._prompts[key]

    def prompts_file(self, prompts: list) -> Path:
        """The prompts as a `vllm bench serve` custom dataset, for reproducing by hand."""
        if any(p.arrival_s is not None or p.turns or p.category for p in prompts):  # what vllm bench cannot send
            from ..load.traffic import trace_line

            lines = [trace_line(p) for p in prompts]  # `pytest-specdec replay` reads it; bench reads prompt/tokens
        else:
            lines = [json.dumps({"prompt": p.text, "output_tokens": p.output_len}) for p in prompts]
        text = "\n".join(lines) + "\n"
        path = self.work_dir / "prompts" / f"{hashlib.sha256(text.encode()).hexdigest()[:16]}.jsonl"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, text)
        return path

    def _warm_up(
        self, server: ManagedServer, spec: ServerSpec, workload: Workload, pattern: AccessPattern, seed: int
    ) -> SteadyState:
        # The first requests on a fresh server pay for lazy initialisation; a measured run must not.
        # Rounds of short requests until two agree (measure/warm_up.py); they use prompts of their own,
        # never ones a measured run sends.  A server resumed from parking (serving.pool) is warmed again:
        # one served again after idling read its first run cold (docs/benchmarks.md, idle_neighbour.py).
        resumes = getattr(server, "resumes", 0)
        if server in self._warmed and self._warmed[server][1] == resumes:
            return self._warmed[server][0]
        prompts = self.prompts(spec.model, workload, pattern, seed + WARMUP_SEED_OFFSET)
        warm = [type(p)(p.text, p.prompt_len, min(p.output_len, WARMUP_TOKENS)) for p in prompts[:WARMUP_REQUESTS]]

        def send_round(index: int):
            load = generate_load(
                server.url,
                server.model,
                warm,
                AccessPattern("warmup", num_prompts=len(warm)),
                request_timeout=self.request_timeout,
                ignore_eos=True,
                engine=spec.engine,
            )
            check_run(server, spec, load.records, f"warm-up of {spec.label()} (round {index + 1})")
            return load.records

        steady = warm_until_steady(
            send_round,
            max_rounds=self.warm_up_rounds,
            max_seconds=self.warm_up_seconds,
            requested_tokens=min(warm[0].output_len, WARMUP_TOKENS) if warm else None,
        )
        self.on_event(f"warm-up of {spec.label()}: {steady.describe()}")
        self._warmed[server] = (steady, resumes)
        return steady

    def measure(
        self,
        spec: ServerSpec,
        workload: Workload,
        pattern: AccessPattern,
        prompts: list,
        *,
        seed: int = 0,
        logprobs: int | None = None,
        what: str = "",
        repeats: int | None = None,
        only_repeat: int | None = None,
    ) -> list[Run]:
        """`repeats` runs (the session's, unless given) under `pattern` on the server for `spec`:
        `prompts` first, then fresh ones; with `only_repeat`, that repeat alone (builds A/B interleave them).
        Repeat r > 0 sends the workload built with ``repeat_seed(seed, r)`` (the reference's repeat r does
        too, so the two stay paired)."""
        server = self.pool.get(spec)
        self._servers[spec.key] = server  # the last one that served it, for the result's log and commands
        steady = self._warm_up(server, spec, workload, pattern, seed)
        if server not in self._facts:  # after the warm-up: the log then holds every start-up line
            self._facts[server] = read_engine_facts(server)
        runs = []
        repeats = self.repeats if repeats is None else repeats
        # An engine without run totals on its metrics page counts in each response instead.
        per_request = engine_named(spec.engine).counts_per_request
        first = prompts
        for repeat in range(repeats) if only_repeat is None else (only_repeat,):
            prompts = self.prompts(spec.model, workload, pattern, repeat_seed(seed, repeat)) if repeat else first
            before = None
            if spec.speculative_config and not per_request:
                before = self._unanswered[server] if server in self._unanswered else server.spec_decode_counters()
                if before.timed_out:
                    self._unanswered[server] = before
            # A draw past those planned (a builds A/B's more draws, a check undecided) has no total to count to.
            which = f" repeat {repeat + 1}/{repeats}" if repeat < repeats else f" draw {repeat + 1} (a check undecided)"
            which = which if repeats > 1 or only_repeat is not None else ""
            label = f"{what or spec.label()} on {workload.name}/{pattern.name}{which}"
            live = self.progress.start(label, pattern.num_prompts)
            # A metrics page that did not answer just now is not waited on again for this run (each read waits
            # up to its timeout): no series, and no second scrape to subtract from an unavailable first one.
            unanswered = before.problem if before is not None and before.timed_out else None
            watching = RunWatch(self.energy, server, spec, self.series_interval_s, unanswered=unanswered)
            try:
                load = generate_load(
                    server.url,
                    server.model,
                    prompts,
                    pattern,
                    seed=repeat_seed(seed, repeat),
                    ignore_eos=workload.ignore_eos,
                    sampling=workload.sampling,
                    endpoint=workload.endpoint,
                    logprobs=logprobs,
                    on_progress=live.update,
                    request_timeout=self.request_timeout,
                    workers=self.client_workers,
                    engine=spec.engine,
                )
            finally:
                live.stop()
                energy, series = watching.stop()
            # What each response could not say, from the server's configuration (SGLang: k for its per-step arrays).
            for record in load.records:
                if record.spec_decoding is not None:
                    record.spec_decoding = engine_named(spec.engine).settle_request_sd(record.spec_decoding, spec)
            # A dead server or failed requests explain everything after them: report them before /metrics
            # is scraped (a scrape of a dead server only says "connection refused").
            check_run(server, spec, load.records, label)
            counters = None
            try:
                if unanswered:
                    counters = before
                elif before is not None:
                    counters = server.spec_decode_counters().delta(before, where=f"{server.url}/metrics")
                elif spec.speculative_config and per_request:
                    counters = counters_from_requests(load.records, where=server.url)
            except CounterError as exc:
                raise RunError(f"{label}: {exc}") from None
            if counters is not None and not counters.present and before is not None:
                # A build whose metrics page keeps no SD totals (llama.cpp before its spec_decode counters):
                # the sum of each response's own figures, where every response carries them.
                summed = counters_from_requests(load.records, where=server.url)
                if summed.present and summed.num_draft_tokens > 0:  # responses that name no draft say nothing
                    self.on_event(f"{label}: {counters.problem}; summed each response's own SD figures instead")
                    counters = summed
            if counted := count_output_tokens(load.records, lambda: self.tokenizer(spec.model)):
                self.on_event(
                    f"{label}: {server.url} sent neither usage nor token ids for {counted} requests; "
                    "their output tokens were counted by tokenizing the text, as vllm bench serve does"
                )
            metrics = summarize(load.records, load.duration_s)
            runs.append(
                Run(
                    spec,
                    repeat,
                    metrics,
                    load.records,
                    counters,
                    server.command,
                    load.started_at,
                    warm_up=steady,
                    engine_facts=self._facts[server],
                    energy=energy,
                    series=series,
                )
            )
            self.on_event(
                f"{label}: {metrics.completed} requests in {metrics.duration_s:.1f} s, "
                f"{metrics.output_throughput:.1f} output tok/s, median TPOT {metrics.tpot.median:.1f} ms"
            )
        return runs

    def run(
        self,
        spec: ServerSpec,
        workload: Workload,
        pattern: AccessPattern,
        *,
        seed: int = 0,
        logprobs: int | None = None,
        slo: dict | None = None,
    ) -> SpecDecResult:
        if spec.speculative_config is None and spec.endpoints:
            raise RunError(
                f"{spec.label()} has no speculative_config. In endpoint mode the plugin starts nothing: "
                f"speculative_config describes what the speculative endpoint ({dict(spec.endpoints)['speculative']}) "
                "runs, and its method and k feed the theory column and the report. Add it to the marker, e.g. "
                "@pytest.mark.specdec(model=..., speculative_config={'method': 'eagle3', 'model': "
                "'<draft model>', 'num_speculative_tokens': 3})"
            )
        if spec.speculative_config is None:
            raise RunError(f"{spec.label()} has no speculative_config: nothing to compare with the reference")
        if spec.endpoints:  # running servers: fail in seconds on a bad URL, before any tokenizer loads
            self.pool.get(spec.reference())
            self.pool.get(spec)
        prompts = self.prompts(spec.model, workload, pattern, seed)
        reference_runs = self.reference(spec, workload, pattern, prompts, seed=seed, logprobs=logprobs)
        speculative_runs = self.measure(spec, workload, pattern, prompts, seed=seed, logprobs=logprobs, what="SD")
        result = self.result_of(spec, workload, pattern, prompts, reference_runs, speculative_runs, seed, logprobs, slo)
        cold, held_back = cold_flags(result), result.client_bound()
        if cold or held_back:  # a client that fell behind measured its own pace, not the server's: again too
            result = self._measure_again(
                result,
                cold,
                workload,
                pattern,
                prompts,
                seed,
                logprobs,
                self.tokenizer(spec.model),
                held_back=held_back,
            )
        return result

    def result_of(
        self, spec, workload, pattern, prompts, reference_runs, speculative_runs, seed, logprobs, slo
    ) -> SpecDecResult:
        """SD's runs against the reference's on the same traffic, as one result."""
        tokenizer = self.tokenizer(spec.model)
        outputs_per_repeat = _outputs_per_draw(reference_runs, speculative_runs, tokenizer, workload)
        server = self._servers.get(spec.key) or self.pool.get(spec)
        return SpecDecResult(
            spec=spec,
            workload=workload.describe(),
            pattern=pattern.describe(),
            reference_runs=reference_runs,
            speculative_runs=speculative_runs,
            dispatch_lag_limit_ms=self.max_dispatch_lag_ms,
            outputs=outputs_per_repeat[0],
            outputs_per_repeat=outputs_per_repeat,
            reproduce=reproduce_commands(
                reference_runs[0],
                speculative_runs[0],
                server,
                pattern,
                self.prompts_file(prompts),
                self.pool.model_resolver(spec.model),
                seed,
                workload.ignore_eos,
                logprobs,
                replay=pattern.replay_speed is not None or any(p.turns for p in prompts),
                engine=spec.engine,
                sampling=workload.sampling,
                endpoint=workload.endpoint,
            ),
            seed=seed,
            server_log=str(server.log_path or ""),
            cost_ratio=cost_ratio_for(spec, self.pool.model_resolver),
            slo=dict(slo or {}),
        )

    def _measure_again(
        self,
        result: SpecDecResult,
        cold: list,
        workload: Workload,
        pattern: AccessPattern,
        prompts: list,
        seed: int,
        logprobs,
        tokenizer,
        held_back: str | None = None,
    ) -> SpecDecResult:
        """A comparison flagged cold or drifting, or client-bound (`held_back`), measured again before any
        verdict: both servers warmed again, the reference run again, then SD, and the new runs replace the
        flagged ones (the reference's for every later test of the same traffic too).  Flags that stay make
        its speedups not compared; a client still behind leaves them unavailable."""
        spec = result.spec
        self.remeasures[spec.key] += 1  # each costs a start of both servers where one runs at a time
        reasons = [flag.describe() for flag in cold] + ([held_back] if held_back else [])
        self.on_event(f"{spec.label()}: measuring both sides again before any verdict: " + "; ".join(reasons))
        for server in [s for s in self._warmed if getattr(s, "spec", None) in (spec, spec.reference())]:
            del self._warmed[server]  # warm these two again; every other server stays warm
        key = self.reference_key(spec, workload, pattern, seed, logprobs)
        reference_runs = self.measure(
            spec.reference(), workload, pattern, prompts, seed=seed, logprobs=logprobs, what="reference again"
        )
        self.references.replace(key, reference_runs)
        speculative_runs = self.measure(spec, workload, pattern, prompts, seed=seed, logprobs=logprobs, what="SD again")
        outputs = _outputs_per_draw(reference_runs, speculative_runs, tokenizer, workload)
        again = replace(
            result,
            reference_runs=reference_runs,
            speculative_runs=speculative_runs,
            outputs=outputs[0],
            outputs_per_repeat=outputs,
            remeasured=reasons,
            earlier_runs=(*result.earlier_runs, (result.reference_runs, result.speculative_runs)),
        )
        standing = [flag.kind for flag in cold_flags(again)] + (["client-bound"] if again.client_bound() else [])
        self.on_event(
            f"{spec.label()}: measured again: "
            + (
                "no longer flagged"
                if not standing
                else "still flagged, its speedups are not compared: " + "; ".join(standing)
            )
        )
        return again


def _outputs_per_draw(reference_runs: list, speculative_runs: list, tokenizer, workload: Workload) -> list:
    """SD's outputs against the reference's, draw by draw: repeat i of each sent the same prompts."""
    return [
        compare_outputs(
            reference_runs[min(i, len(reference_runs) - 1)].records,
            run.records,
            decode=tokenizer.decode,
            sampling=workload.sampling,
        )
        for i, run in enumerate(speculative_runs)
    ]
