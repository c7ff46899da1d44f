"""Hooks a downstream repository implements in its ``conftest.py``.

Registered by the plugin in ``pytest_addhooks``; the plugin itself provides
the default implementation of each, so an override only needs to handle the
cases it cares about and return None for the rest.
"""

from __future__ import annotations

import pluggy

hookspec = pluggy.HookspecMarker("pytest")


@hookspec(firstresult=True)
def pytest_specdec_server_command(launch):
    """Return the command line that starts a server, or None for the default.

    `launch` is a :class:`pytest_specdec.LaunchRequest` (`pytest_specdec.serving.server`): the server
    spec, device, host and port the plugin claimed, the resolved model path,
    the speculative config, and ``launch.default_command()``, the vLLM
    command the plugin would run.  The process must serve the OpenAI API
    (``/health``, ``/v1/models`` listing ``launch.spec.model``, ``/metrics``)
    on ``launch.host:launch.port``; it runs in its own process group and is
    stopped with SIGTERM, then SIGKILL.

    Example: run vLLM from a container image instead of the local install::

        def pytest_specdec_server_command(launch):
            if launch.device != "gpu":
                return None
            vllm_args = launch.default_command()[2:]   # drop "vllm serve"
            return ["docker", "run", "--rm", "--gpus", "all", "--network", "host",
                    "vllm/vllm-openai:latest", *vllm_args]

    Example: the same vLLM command from another virtual environment::

        import dataclasses

        def pytest_specdec_server_command(launch):
            nightly = dataclasses.replace(launch, python="/opt/venvs/vllm-nightly/bin/python")
            return nightly.default_command()

    """


@hookspec
def pytest_specdec_workloads(config):
    """Return workloads to add to the catalog: a ``{name: Workload}`` dict or a list.

    Called once at collection; names then work in ``@pytest.mark.workload``
    like the built-in ones, overrides included.

    Example: a team's own prompts, built by a function::

        from pytest_specdec import Prompt, Workload

        def build_support_chats(tokenizer, num_prompts, seed):
            texts = load_our_tickets()[:num_prompts]
            return [Prompt(t, len(tokenizer(t).input_ids), 256) for t in texts]

        def pytest_specdec_workloads(config):
            return [Workload("support_chat", kind="custom_builder", builder=build_support_chats)]
    """


@hookspec
def pytest_specdec_access_patterns(config):
    """Return access patterns to add to the catalog: a ``{name: AccessPattern}`` dict or a list.

    Example: the team's own peak traffic::

        from pytest_specdec import AccessPattern

        def pytest_specdec_access_patterns(config):
            return [AccessPattern("peak_hour", request_rate=12, burstiness=0.5,
                                  max_concurrency=64, num_prompts=512)]
    """


@hookspec(firstresult=True)
def pytest_specdec_fingerprint(config, fingerprint):
    """Return the environment fingerprint stored with baselines (extend `fingerprint` and return it).

    Absolute numbers (tok/s, ms) are compared only between baselines and runs
    whose fingerprints match, so add what makes your numbers comparable.

    Example: the inference image and the node type::

        import os

        def pytest_specdec_fingerprint(config, fingerprint):
            fingerprint["image"] = os.environ.get("INFERENCE_IMAGE", "unknown")
            fingerprint["node_type"] = os.environ.get("NODE_TYPE", "unknown")
            return fingerprint
    """


@hookspec
def pytest_specdec_results(config, rows, report_dir):
    """Export the session's results: called once at session end (on the xdist controller).

    `rows` is a list of dicts, one per measured result (the rows of
    ``results.json``, see ``schemas/report.schema.json``): test id, SD config,
    workload, access pattern, speedup, expected speedup, acceptance, TPOT and
    TTFT change, match rate, the baseline verdict and both runs' headline
    metrics.  `report_dir` is the ``--specdec-report`` directory or None.
    The plugin's own implementation does nothing; the files are written
    whether or not a hook is implemented.

    Example: send each speedup to a metrics service::

        def pytest_specdec_results(config, rows, report_dir):
            for row in rows:
                if row["speedup_output_throughput"] is not None:
                    statsd.gauge("specdec.speedup", row["speedup_output_throughput"],
                                 tags=[f"config:{row['config']}", f"workload:{row['workload']}"])
    """
