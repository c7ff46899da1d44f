"""The analyses: pure functions of measured runs (theory, acceptance, goodput, diagnosis, step figures, drift).

Nothing here starts a server, sends a request or reads an engine's process: an import-linter contract keeps
it so. The measurement loop that produces the runs is `pytest_specdec.measure`.
"""
