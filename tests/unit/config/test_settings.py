import argparse

import pytest

from pytest_specdec.config.settings import parse_byte_size, parse_ini, parse_seconds


@pytest.mark.parametrize(
    "text, size",
    [("1073741824", 1 << 30), ("1GiB", 1 << 30), ("512MiB", 512 << 20), ("2GB", 2_000_000_000), ("1.5gib", 3 << 29)],
)
def test_byte_sizes(text, size):
    assert parse_byte_size(text) == size


@pytest.mark.parametrize("text", ["", "lots", "1 PB", "-1GiB", "0"])
def test_bad_byte_sizes(text):
    with pytest.raises(argparse.ArgumentTypeError):
        parse_byte_size(text)


def test_seconds():
    assert parse_seconds("90.5") == 90.5
    for bad in ("0", "-3", "soon"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_seconds(bad)


def test_ini_errors_name_the_setting():
    with pytest.raises(ValueError, match="ini setting specdec_startup_timeout: must be a finite number greater than 0"):
        parse_ini("specdec_startup_timeout", "0", parse_seconds)


def _resolve(options=None, ini=None, tmp_path=None):
    from pathlib import Path

    from pytest_specdec.config.settings import COMMAND_LINE_OPTIONS, resolve_settings

    given = {flag.lstrip("-").replace("-", "_"): None for flag, _ in COMMAND_LINE_OPTIONS}
    given.update(specdec_gpu=False, specdec_cpu=False, specdec_update_baselines=False, **(options or {}))
    ini_values = {"specdec_baseline_dir": "baselines", "specdec_tolerances": [], "specdec_extra_methods": []}
    ini_values.update(ini or {})
    root = Path(tmp_path or ".")
    return resolve_settings(given.get, lambda name: ini_values.get(name, ""), None, root, environ={})


def test_flags_match_their_ini_keys_and_old_flags_still_work(tmp_path):
    settings = _resolve({"specdec_gpu_usd_per_hour": 2.5}, tmp_path=tmp_path)
    assert settings.gpu_usd_per_hour == 2.5 and settings.deprecations == ()
    old = _resolve({"specdec_gpu_price": 3.0, "specdec_kv_cache_bytes": 1 << 29}, tmp_path=tmp_path)
    assert old.gpu_usd_per_hour == 3.0 and old.cpu_kv_cache_bytes == 1 << 29
    assert [message.split(" is ")[0] for message in old.deprecations] == [
        "--specdec-kv-cache-bytes",
        "--specdec-gpu-price",
    ]
    # The new flag wins over the old one; the ini is the fallback for both.
    both = _resolve({"specdec_gpu_usd_per_hour": 1.0, "specdec_gpu_price": 9.0}, tmp_path=tmp_path)
    assert both.gpu_usd_per_hour == 1.0
    from_ini = _resolve(ini={"specdec_gpu_usd_per_hour": "4"}, tmp_path=tmp_path)
    assert from_ini.gpu_usd_per_hour == 4.0


def test_settings_resolve_the_baseline_dir_and_tolerances_once(tmp_path):
    settings = _resolve(ini={"specdec_tolerances": ["median_tpot_ms = 0.2"]}, tmp_path=tmp_path)
    assert settings.baseline_dir == (tmp_path / "baselines").resolve()
    assert settings.tolerances == {"median_tpot_ms": 0.2}
    with pytest.raises(ValueError, match="ini setting specdec_tolerances"):
        _resolve(ini={"specdec_tolerances": ["median_tpot_ms = 20%"]}, tmp_path=tmp_path)


def test_client_workers_come_from_the_flag_or_the_ini_and_must_be_positive(tmp_path):
    assert _resolve(tmp_path=tmp_path).client_workers == 1
    assert _resolve({"specdec_client_workers": 3}, tmp_path=tmp_path).client_workers == 3
    assert _resolve(ini={"specdec_client_workers": "2"}, tmp_path=tmp_path).client_workers == 2
    with pytest.raises(ValueError, match="specdec_client_workers"):
        _resolve(ini={"specdec_client_workers": "0"}, tmp_path=tmp_path)


def test_the_dispatch_lag_limit_is_read_as_milliseconds():
    import argparse

    from pytest_specdec.config.settings import parse_milliseconds

    assert parse_milliseconds("2.5") == 2.5
    with pytest.raises(argparse.ArgumentTypeError, match="expected a number of milliseconds, got 'fast'"):
        parse_milliseconds("fast")
    with pytest.raises(argparse.ArgumentTypeError, match="greater than 0"):
        parse_milliseconds("0")


def test_parked_cpu_servers_default_to_two_take_zero_and_refuse_a_negative(tmp_path):
    from pytest_specdec.config.units import parse_count

    assert _resolve(tmp_path=tmp_path).cpu_parked_servers == 2
    assert _resolve({"specdec_cpu_parked_servers": 0}, tmp_path=tmp_path).cpu_parked_servers == 0
    assert _resolve(ini={"specdec_cpu_parked_servers": "1"}, tmp_path=tmp_path).cpu_parked_servers == 1
    assert parse_count("0") == 0
    for bad in ("-1", "two"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_count(bad)
    with pytest.raises(ValueError, match="ini setting specdec_cpu_parked_servers: must be 0 or more"):
        _resolve(ini={"specdec_cpu_parked_servers": "-2"}, tmp_path=tmp_path)


def test_error_rates_and_the_session_budget_come_from_the_flags_or_the_ini(tmp_path):
    plain = _resolve(tmp_path=tmp_path)
    assert (plain.false_fail, plain.false_pass, plain.session_false_fail) == (0.05, 0.05, None)
    given = _resolve({"specdec_false_fail": 0.02, "specdec_session_false_fail": 0.1}, tmp_path=tmp_path)
    assert (given.false_fail, given.session_false_fail) == (0.02, 0.1)
    from_ini = _resolve(ini={"specdec_false_pass": "10%", "specdec_session_false_fail": "0.05"}, tmp_path=tmp_path)
    assert (from_ini.false_pass, from_ini.session_false_fail) == (0.1, 0.05)
    with pytest.raises(ValueError, match="ini setting specdec_session_false_fail"):
        _resolve(ini={"specdec_session_false_fail": "0.7"}, tmp_path=tmp_path)


def test_measuring_the_drift_between_starts_comes_from_the_flag_or_the_ini(tmp_path):
    assert _resolve(tmp_path=tmp_path).measure_drift is False
    assert _resolve({"specdec_measure_drift": True}, tmp_path=tmp_path).measure_drift is True
    assert _resolve(ini={"specdec_measure_drift": True}, tmp_path=tmp_path).measure_drift is True
