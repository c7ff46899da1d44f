"""How the package writes a figure, a missing one, and a load or a concurrency."""

import math

from pytest_specdec.formatting import NOTHING, UNAVAILABLE, figure, quantity


def test_a_figure_missing_or_unmeasurable_reads_the_same_everywhere():
    assert figure(None) == NOTHING and figure(math.nan) == UNAVAILABLE
    assert figure(12.345) == "12.3" and figure(0.12345) == "0.123" and figure(7) == "7"
    assert figure(0.5, ".0%") == "50%"


def test_a_load_or_a_concurrency_is_a_whole_number_where_it_is_one():
    assert quantity(2.0) == "2" and quantity(32) == "32"
    assert quantity(0.7071067) == "0.707" and quantity(1.6817928) == "1.68"
    assert quantity(150.5) == "150.5"  # 100 and more: one decimal, as any figure
    assert quantity(None) == NOTHING and quantity(math.inf) == "inf"
