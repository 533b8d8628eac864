"""benchmarks/soak.py's whole course in seconds (the long profiles are the benchmark's):
a real `marag serve` with the scripted model under four clients asking in bursts past
its capacity and browsing, an evaluation started through the API, the server stopped
(SIGTERM) while that evaluation runs, started again, the evaluation resumed through the
API and its files checked line by line."""

from __future__ import annotations

from bench import load_benchmark


def _soak():
    return load_benchmark("soak")


def test_a_short_soak_fails_no_request_but_429s_and_resumes_the_stopped_evaluation_whole(tmp_path, data_dir):
    soak = _soak()
    # An evaluation of 1,600 scripted answers takes seconds: the stop catches one in its
    # first half. Grace 0: the stop cuts what runs at once, so that evaluation is still
    # unfinished when the server is gone (the default grace of 10 s would let it finish).
    args = soak.parse_args(["--minutes", "0.1", "--clients", "4", "--burst", "6", "--grace", "0",
                            "--eval-dataset", "wiki_mix", "--eval-strategies", "llm_only,cot", "--eval-limit", "800",
                            "--cache", str(tmp_path / "cache"), "--keep", str(tmp_path / "soak"), "--data-dir", str(data_dir)])  # fmt: skip
    report = soak.soak(args)

    assert "| ask |" in report.table and "| 429 past capacity |" in report.table and "| resume |" in report.table
    # some browsing answered (which pages a client visits in a few seconds depends on the
    # machine's speed: "run page" alone was missed once when the cores were shared)
    browsed = [k for k, lat in report.tally.latencies.items() if lat and k not in ("ask", "eval start")]
    assert report.tally.statuses["ask"][200] > 0 and len(browsed) >= 3, report.table
    assert report.tally.failures() == 0, report.table
    assert report.interrupted, report.table
    check = report.resume
    assert check is not None and check.ok() and check.answers == check.requested == 1600 and check.traces == 1600, report.table
    # the stop itself was in time: the only failure left to the memory line (a few seconds
    # of load have no warm-up worth the name)
    assert [f for f in report.failures if "memory" not in f] == [], report.table


def test_memory_levels_compare_peak_with_peak_so_a_sawtooth_is_level_and_a_leak_is_not():
    levels = _soak().memory_levels
    # readings every 2 s over 600 s: an evaluation every 60 s lifts the memory by 200 MB
    # for 40 s, then frees it; the first reading after the warm-up falls in a trough
    saw = [(t, (450 + (200 if t % 60 < 40 else 0)) * 2**20) for t in range(0, 601, 2)]
    warm, end = levels(saw, 50.0, 600.0)
    assert warm == end == 650 * 2**20
    # the same sawtooth on a floor rising 1 MB every 10 s
    leak = [(t, b + (t // 10) * 2**20) for t, b in saw]
    warm, end = levels(leak, 50.0, 600.0)
    assert (end - warm) / warm > 0.05
    # evaluations of 300 s, each climbing to its peak at its end: a fifth of the rest
    # (110 s) would catch the second one's climb, not its peak; a window one cycle long does
    climb = [(t, (450 + (t % 300) // 2) * 2**20) for t in range(0, 1201, 2)]
    assert levels(climb, 300.0, 1200.0)[0] < levels(climb, 300.0, 1200.0)[1]
    warm, end = levels(climb, 300.0, 1200.0, cycle_s=300.0)
    assert warm == end
    # nothing read in a window: 0, which the soak reports as "not measured"
    assert levels([], 50.0, 600.0) == (0, 0)
