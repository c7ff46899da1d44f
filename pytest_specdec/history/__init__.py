"""A results history: every session's rows stored, change points found across commits, trends drawn.

`url` parses and masks a history's address, `store` reads and writes it
(SQLite or PostgreSQL), `records` turns report rows into stored figures,
`changepoints` runs Apache Otava's E-divisive detector over each series,
`trends` draws them and `cli` is ``pytest-specdec history``.
"""
