import argparse

import pytest

from pytest_specdec.settings import parse_byte_size, parse_ini, parse_seconds


@pytest.mark.parametrize("text, size", [("1073741824", 1 << 30), ("1GiB", 1 << 30), ("512MiB", 512 << 20),
                                        ("2GB", 2_000_000_000), ("1.5gib", 3 << 29)])
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
    with pytest.raises(ValueError, match="ini setting specdec_startup_timeout: must be greater than 0"):
        parse_ini("specdec_startup_timeout", "0", parse_seconds)
