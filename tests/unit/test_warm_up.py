"""The warm-up runs once per live server object, never skipped for a new one."""

import gc
import weakref
from types import SimpleNamespace

from pytest_specdec.config.spec import ServerSpec
from pytest_specdec.load.patterns import AccessPattern
from pytest_specdec.load.workloads import Prompt, resolve_workload
from pytest_specdec.measure import measurements as measuring
from pytest_specdec.measure.measurements import Measurements

SPEC = ServerSpec("m")


class FakeServer:
    url, model, process = "http://127.0.0.1:9", "m", None


def test_each_new_server_is_warmed_once_and_not_kept_alive(monkeypatch, tmp_path):
    sent = []
    monkeypatch.setattr(measuring, "generate_load",
                        lambda url, model, prompts, pattern, **kw: sent.append(len(prompts)) or
                        SimpleNamespace(records=[]))
    measurements = Measurements(pool=None, work_dir=tmp_path)
    monkeypatch.setattr(measurements, "prompts", lambda *a: [Prompt("p", 4, 64)] * 3)
    workload = resolve_workload("random_s", {"input_len": 4, "output_len": 64})
    pattern = AccessPattern("c1", max_concurrency=1, num_prompts=3)

    first = FakeServer()
    measurements._warm_up(first, SPEC, workload, pattern, 0)
    measurements._warm_up(first, SPEC, workload, pattern, 0)
    assert sent == [measuring.WARMUP_REQUESTS]  # once per server
    gone = weakref.ref(first)
    del first
    gc.collect()
    assert gone() is None  # remembering the warm-up keeps no stopped server alive
    # A new server, whatever address CPython gives it (often the freed one), is warmed again.
    for _ in range(3):
        measurements._warm_up(FakeServer(), SPEC, workload, pattern, 0)
    assert sent == [measuring.WARMUP_REQUESTS] * 4
