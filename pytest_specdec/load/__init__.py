"""The traffic a run sends: workloads (prompts), access patterns (arrivals) and the streaming client."""

# Each registers how its kinds of workload are built (workloads.register_builder).
from . import datafiles, structured, synthetic, traffic  # noqa: F401
