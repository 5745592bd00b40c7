"""The canary's Prometheus probe against a real HTTP endpoint on loopback (a thread of this test).

The endpoint serves the exposition a service would, one scrape after another: a counter that grows
by a known amount between the window's two scrapes, a summary's quantile, labels to tell series
apart. The probe's clock is given, so the rate it reports is exact.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Callable, Iterator

import pytest

from threadwise.errors import MetricsError
from threadwise.refine.canary.probe import PrometheusProbe, parse_exposition
from threadwise.refine.measure.workload_schema import Series

EXPOSITION = """# HELP app_requests_total Requests served.
# TYPE app_requests_total counter
app_requests_total{{cmd="get"}} {get} 1700000000000
app_requests_total{{cmd="set"}} 7
# TYPE request_seconds summary
request_seconds{{quantile="0.5"}} 0.0002
request_seconds{{quantile="0.99"}} {p99}
request_seconds_count 1e3
"""


class Endpoint:
    """Serves `pages` in turn, one per GET, on 127.0.0.1 (the last one again once they run out)."""

    def __init__(self, pages: list[str]) -> None:
        self.pages, self.served = pages, 0
        endpoint = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = endpoint.pages[min(endpoint.served, len(endpoint.pages) - 1)].encode()
                endpoint.served += 1
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args: object) -> None:
                return None

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def endpoint() -> Iterator[Callable]:
    opened: list[Endpoint] = []

    def serve(*pages: str) -> Endpoint:
        opened.append(Endpoint(list(pages)))
        return opened[-1]

    yield serve
    for one in opened:
        one.close()


SERIES = {"get_per_s": Series(name="app_requests_total", labels={"cmd": "get"}, rate=True),
          "p99_ms": Series(name="request_seconds", labels={"quantile": "0.99"}, scale=1000.0)}


def probe_at(url: str, times: list[float]) -> PrometheusProbe:
    ticks = iter(times)
    return PrometheusProbe(url, SERIES, clock=lambda: next(ticks))


def test_a_counter_reads_as_its_rate_over_the_window_and_a_quantile_as_its_value(endpoint):
    served = endpoint(EXPOSITION.format(get=1000, p99=0.004), EXPOSITION.format(get=1500, p99=0.006))
    probe = probe_at(served.url, [10.0, 12.5])
    probe.begin(2.5)
    assert probe.end() == pytest.approx({"get_per_s": 200.0, "p99_ms": 6.0})
    assert served.served == 2


def test_a_missing_series_names_what_the_endpoint_has(endpoint):
    served = endpoint(EXPOSITION.format(get=1, p99=0.1))
    probe = PrometheusProbe(served.url, {"x": Series(name="app_request_total", rate=True)})
    probe.begin(1.0)
    with pytest.raises(MetricsError, match="no series app_request_total") as missing:
        probe.end()
    assert "app_requests_total" in (missing.value.hint or "")


def test_series_that_labels_do_not_tell_apart_are_refused(endpoint):
    served = endpoint(EXPOSITION.format(get=1, p99=0.1))
    probe = PrometheusProbe(served.url, {"n": Series(name="app_requests_total", rate=True)})
    probe.begin(1.0)
    with pytest.raises(MetricsError, match="2 series match app_requests_total"):
        probe.end()


def test_a_counter_that_went_back_leaves_the_window_out(endpoint):
    served = endpoint(EXPOSITION.format(get=900, p99=0.1), EXPOSITION.format(get=3, p99=0.1))
    probe = probe_at(served.url, [0.0, 1.0])
    probe.begin(1.0)
    with pytest.raises(MetricsError, match="went back"):
        probe.end()


def test_an_endpoint_that_does_not_answer_is_a_window_error_not_a_crash():
    probe = PrometheusProbe("http://127.0.0.1:9/metrics", SERIES)   # discard: nothing listens
    with pytest.raises(MetricsError, match="did not answer"):
        probe.begin(1.0)


def test_the_exposition_subset_reads_escapes_timestamps_and_specials():
    samples = parse_exposition('a{l="x\\"y\\\\z",m="1"} +Inf\nb 2 123\n# c 3\nd{} -1.5e-3\n')
    assert samples[0][:2] == ("a", {"l": 'x"y\\z', "m": "1"}) and samples[0][2] == float("inf")
    assert samples[1:] == [("b", {}, 2.0), ("d", {}, -0.0015)]


# -- the command probe: its own length is the window ------------------------------------

REDIS_CSV = '"test","rps","p99_latency_ms"\n"GET","2000.00","4.000"\n'


def test_a_command_slower_than_its_window_is_read_not_cut(monkeypatch):
    """A slow window is the evidence (the default scheduler serving fewer requests): cutting it
    would drop exactly the slowest windows. Only a command that hangs is stopped."""
    from threadwise.refine.canary import probe as probes

    # 10 s of grace: beside a lab VM at nice -20 a 1.5-s command once took over 3 s to finish
    monkeypatch.setattr(probes, "HANG_S", 10.0)
    slow = probes.CommandProbe(["sh", "-c", f"sleep 0.5; printf '{REDIS_CSV}'"], "redis-benchmark")
    slow.begin(0.1)   # the canary's window: 0.1 s; the command takes 0.5 s
    assert slow.end() == {"get_rps": 2000.0, "get_p99_ms": 4.0}
    hung = probes.CommandProbe(["sleep", "60"], "redis-benchmark")
    hung.begin(0.1)
    with pytest.raises(MetricsError, match="still running 10 s after its window"):
        hung.end()
