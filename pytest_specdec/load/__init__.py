"""The traffic a run sends: workloads (prompts), access patterns (arrivals) and the streaming client."""
