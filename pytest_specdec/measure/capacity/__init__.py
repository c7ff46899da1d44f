"""SLO capacity: the highest load at which a server still meets the test's service-level objectives.

`search` brackets the load (a pure search over a probe callable), `probes` is what one probe measured,
`ratio` compares the two sides' capacities, `sides` runs one side's search on its server and plans the
reference's into the target's batch of reference runs, and `slo` measures both sides into a `CapacityResult`.
"""
