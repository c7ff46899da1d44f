"""Measuring SD against no SD: runs, counters, per-run metrics, results and the theory beside them."""
