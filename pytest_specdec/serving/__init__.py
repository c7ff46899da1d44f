"""The servers a session measures: vLLM processes, running endpoints, GPUs, ports, the bundled model."""
