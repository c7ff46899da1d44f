"""The series sampler's reads of /metrics go over one kept connection, not a client per read.

A client per read (``httpx.get``) costs about 26 ms of CPU each, most of it with the interpreter's lock held
on the load client's own process, and held its requests back (benchmarks/server_series.py).
"""

import threading

import httpx
import pytest

from pytest_specdec.serving.metrics_page import MetricsPage
from tests.support.metrics_http import serve_metrics

PAGE = "vllm:num_requests_running 1\n"


@pytest.fixture
def metrics_server():
    with serve_metrics(PAGE) as served:
        yield served


def test_every_read_of_a_run_shares_one_connection(metrics_server):
    url, seen = metrics_server
    page = MetricsPage(url + "/", 5.0)
    assert [page.text() for _ in range(5)] == [PAGE] * 5
    assert seen["paths"] == ["/metrics"] * 5
    assert seen["connections"] == 1
    page.close()
    page.close()  # closing twice is harmless


def test_a_read_after_close_opens_a_new_client_and_an_error_status_raises(metrics_server):
    url, seen = metrics_server
    page = MetricsPage(url, 5.0)
    page.text()
    page.close()
    assert page.text() == PAGE and seen["connections"] == 2
    page.close()
    with pytest.raises(httpx.HTTPStatusError):
        MetricsPage(url + "/missing", 5.0).text()


def test_reads_from_two_threads_share_the_page(metrics_server):
    url, seen = metrics_server
    page = MetricsPage(url, 5.0)
    texts = []
    threads = [threading.Thread(target=lambda: texts.extend(page.text() for _ in range(10))) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    page.close()
    assert texts == [PAGE] * 20 and seen["paths"] == ["/metrics"] * 20
