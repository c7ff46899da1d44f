"""What a session and its tests ask for: options and ini values, markers, plans, shards.

Plain logic, no pytest: `settings` resolves the command line and ini once,
`spec` and `plans` turn a test's markers into what to run, `sharding` picks
a CI shard's share.
"""
