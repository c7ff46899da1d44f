"""pytest wiring: options, markers, fixtures, and hooks that forward to the session.

Every decision lives in `session.SpecdecSession` and the modules under it;
this module only translates between pytest (items, reports, the terminal,
skip and fail) and that plain object.  Collection never imports vllm or torch.
"""

from __future__ import annotations

import warnings

import pytest

from . import hookspecs
from .config.plans import MARKER_DOCS
from .config.settings import COMMAND_LINE_OPTIONS, INI_KEYS, SpecdecDeprecationWarning, resolve_settings
from .deprecation import renamed
from .measure.progress import terminal_on
from .session import SetupDecision, SpecdecSession, Terminal

session_key = pytest.StashKey[SpecdecSession]()


def pytest_addhooks(pluginmanager):
    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser):
    group = parser.getgroup("specdec", "speculative decoding regression tests (pytest-specdec)")
    for flag, kwargs in COMMAND_LINE_OPTIONS:
        group.addoption(flag, **kwargs)
    for name, help_text, kwargs in INI_KEYS:
        parser.addini(name, help_text, **kwargs)


def pytest_configure(config):
    for line in MARKER_DOCS:
        config.addinivalue_line("markers", line)
    try:
        settings = resolve_settings(config.getoption, config.getini, config.inipath, config.rootpath)
        for message in settings.deprecations:
            config.issue_config_time_warning(SpecdecDeprecationWarning(message), stacklevel=2)
        session = SpecdecSession(
            settings,
            rootpath=config.rootpath,
            launcher=lambda launch: config.hook.pytest_specdec_server_command(launch=launch),
            fingerprint=lambda fp: config.hook.pytest_specdec_fingerprint(config=config, fingerprint=fp),
            is_worker=hasattr(config, "workerinput"),
            machine_probe=getattr(config, "workerinput", {}).get("specdec_machine_probe"),
        )
        config.stash[session_key] = session
        config.pluginmanager.register(_ReportCollector(session), "specdec-reports")
        session.start(xdist_load_scheduling=getattr(config.option, "dist", "no") == "load")
    except ValueError as exc:  # a bad option or ini value, or a history that cannot be written
        raise pytest.UsageError(str(exc)) from None


def pytest_sessionstart(session):
    # The terminal reporter registers itself in its own pytest_configure, after ours.
    session.config.stash[session_key].terminal = _terminal(session.config)


def _terminal(config) -> Terminal:
    """Lines on pytest's terminal that bypass output capturing (a start-up takes minutes)."""
    quiet = config.get_verbosity() < 0
    plugins = config.pluginmanager
    return terminal_on(None if quiet else plugins.get_plugin("terminalreporter"), plugins.get_plugin("capturemanager"))


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    session = node.config.stash[session_key]  # one machine probe for all workers, timed before any server starts
    probe = session.machine_probe() if session.settings.device else None
    node.workerinput.update(specdec_groups_dir=session.groups_dir, specdec_machine_probe=probe)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    groups_dir = config.stash[session_key].groups_dir
    if not groups_dir:
        return None
    from .xdist_scheduler import TargetScheduling

    return TargetScheduling(config, log, groups_dir=groups_dir)


def pytest_unconfigure(config):
    if session_key in config.stash:
        config.stash[session_key].close()


@pytest.hookimpl(trylast=True)
def pytest_specdec_server_command(launch):
    return launch.default_command()


@pytest.hookimpl(trylast=True)
def pytest_specdec_fingerprint(config, fingerprint):
    return fingerprint


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups (it suffixes node ids with them)
def pytest_collection_modifyitems(session, config, items):
    try:
        collected = config.stash[session_key].collect(
            [(item.nodeid, item.get_closest_marker) for item in items],
            config.hook.pytest_specdec_workloads(config=config),
            config.hook.pytest_specdec_access_patterns(config=config),
            worker=getattr(config, "workerinput", None),
        )
    except TypeError as exc:
        raise pytest.UsageError(str(exc)) from None
    for item in items:
        if item.nodeid in collected.groups:
            item.add_marker(pytest.mark.xdist_group(collected.groups[item.nodeid]))
    if collected.deselected:
        config.hook.pytest_deselected(items=[items[index] for index in collected.deselected])
    items[:] = [items[index] for index in collected.order]


def pytest_collection_finish(session):  # -k, -m and shards have had their say
    session.config.stash[session_key].collection_finished(item.nodeid for item in session.items)


def _apply(decision: SetupDecision | None) -> None:
    if decision is not None:
        pytest.skip(decision.reason) if decision.action == "skip" else pytest.fail(decision.reason, pytrace=False)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    _apply(item.config.stash[session_key].setup(item.nodeid))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    rows, failure = item.config.stash[session_key].report.report_rows(item.nodeid, report)
    if failure:  # the plugin's own error fails this test, never the session (INTERNALERROR)
        report.outcome, report.longrepr = "failed", failure
    if rows is not None:
        report.specdec_rows = rows  # rows ride on the report, so under xdist they reach the controller
    return report


class _ReportCollector:
    """Hooks that need the config: every report and deselection reaches the session."""

    def __init__(self, session: SpecdecSession):
        self.session = session

    def pytest_runtest_logreport(self, report):
        self.session.report.record(report.nodeid, getattr(report, "specdec_rows", None))

    def pytest_deselected(self, items):
        self.session.deselected += len(items)

    def pytest_keyboard_interrupt(self, excinfo):  # Ctrl-C, or SIGTERM turned into one by the session
        self.session.interrupted = str(excinfo.value) or excinfo.typename


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    stopped = session.shouldstop or session.shouldfail
    completed = not stopped and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED)
    config.stash[session_key].report.finish(
        completed=completed,
        whole_suite=config.args_source != pytest.Config.ArgsSource.ARGS,
        args=config.args,
        results_hook=lambda rows, report_dir: config.hook.pytest_specdec_results(
            config=config, rows=rows, report_dir=report_dir
        ),
        outcome="passed" if exitstatus == pytest.ExitCode.OK else "failed" if completed else "interrupted",
    )
    if config.stash[session_key].report.failed_at_end and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED  # a broken report or a regressing change point is not green


def pytest_terminal_summary(terminalreporter, config):
    config.stash[session_key].report.write_summary(terminalreporter)


@pytest.fixture(scope="session")
def specdec_pool(request, tmp_path_factory):
    """The session's servers: one at a time, reused by configuration."""
    pool, decision = request.config.stash[session_key].open_pool(tmp_path_factory.getbasetemp())
    _apply(decision)
    yield pool
    request.config.stash[session_key].close_pool()


@pytest.fixture
def specdec_server(request, specdec_pool):
    """Factory for a raw server of any engine, ``specdec_server(model=..., speculative_config=...)`` with the
    marker's fields: a ready `ManagedServer` (``.url``, ``.metrics()``, ``.log_path``) shared by configuration."""
    session = request.config.stash[session_key]

    def start(**fields):
        try:
            return session.server(request.node.nodeid, fields)
        except LookupError as exc:
            pytest.skip(str(exc))

    return start


@pytest.fixture
def vllm_server(specdec_server):
    """Deprecated: `specdec_server`, under its name from when vLLM was the only engine."""
    warnings.warn(renamed("the vllm_server fixture", "specdec_server"), stacklevel=2)
    return specdec_server


@pytest.fixture(scope="session")
def specdec_measurements(request, specdec_pool):
    """The session's measuring state: prompts, tokenizers, shared reference runs."""
    return request.config.stash[session_key].measurements


@pytest.fixture(scope="session")
def specdec_baselines(request):
    """The session's stored baselines: what tests used and what to write at the end."""
    return request.config.stash[session_key].baselines


@pytest.fixture
def specdec(request, specdec_measurements, specdec_baselines):
    """The test's speculative configuration and traffic (from its markers), and ``run()``."""
    session = request.config.stash[session_key]
    test = session.test_for(request.node.nodeid)
    if test is None:
        pytest.fail("the specdec fixture needs @pytest.mark.specdec(model=..., speculative_config=...)", pytrace=False)
    yield test
    call = getattr(request.node, "callspec", None)  # parametrized: its id and values, as pytest-benchmark keeps them
    session.report.export(
        test,
        request.node.name,
        request.node.nodeid,
        call and call.id,
        call and call.params,
        request.node.user_properties,
        getattr(request.config, "_benchmarksession", None),
    )
