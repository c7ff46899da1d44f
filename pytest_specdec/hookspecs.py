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

    `launch` is a :class:`pytest_specdec.server.LaunchRequest`: the server
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
