"""The live progress line: rewritten on a terminal, silent in CI logs."""

from pytest_specdec.measure.progress import LiveProgress, QuietProgress, progress_text, running_on_ci


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_progress_text_pads_the_count():
    assert (
        progress_text("SD on code_edit/throughput_low", 7, 256, 12.4)
        == "SD on code_edit/throughput_low:   7/256 requests, 12 s elapsed"
    )


def test_live_progress_rewrites_one_line_throttled_and_clears_it():
    clock, lines, cleared = Clock(), [], []
    live = LiveProgress(lines.append, lambda: cleared.append(True), clock=clock, interval=0.5)
    live.start("reference on random_s/throughput_low", 4)
    clock.now += 0.1
    live.update(1, 4)  # within the interval: not shown
    clock.now += 0.6
    live.update(2, 4)
    clock.now += 0.1
    live.update(4, 4)  # the last request always shows
    live.stop()
    assert lines == [
        "[specdec] reference on random_s/throughput_low: 0/4 requests, 0 s elapsed",
        "[specdec] reference on random_s/throughput_low: 2/4 requests, 1 s elapsed",
        "[specdec] reference on random_s/throughput_low: 4/4 requests, 1 s elapsed",
    ]
    assert cleared == [True]


def test_quiet_progress_prints_nothing():
    quiet = QuietProgress()
    assert quiet.start("x", 3) is quiet
    quiet.update(1, 3)
    quiet.stop()


def test_ci_is_detected_as_pytest_does():
    assert running_on_ci({"CI": "true"}) and running_on_ci({"BUILD_NUMBER": "7"})
    assert not running_on_ci({}) and not running_on_ci({"CI": ""})
