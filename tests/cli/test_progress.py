"""Progress on long work: a shown bar is redrawn while no unit ends (`tag.cli.util.progress`), forks made meanwhile
start with the redraw lock free, and `tag plan`'s bar counts the search's simulations."""

import json
import os
import threading

import pytest

import tag.cli.util as util
from tag.cli import main


class FakeBar:
    """What `_keep_redrawing` touches of a tqdm bar: refresh() and close()."""

    def __init__(self):
        self.refreshes = 0
        self.closed = False
        self.redrawn = threading.Event()

    def refresh(self):
        self.refreshes += 1
        if self.refreshes >= 3:
            self.redrawn.set()

    def close(self):
        self.closed = True


def test_a_bar_is_redrawn_until_it_is_closed():
    bar = FakeBar()
    thread = util._keep_redrawing(bar, 0.005)
    assert bar.redrawn.wait(10.0), "no redraw within 10 s at a 5 ms interval"
    bar.close()
    thread.join(10.0)
    assert not thread.is_alive() and bar.closed  # the wrapped close stops the thread, then closes the bar
    after = bar.refreshes
    threading.Event().wait(0.05)
    assert bar.refreshes == after


def test_no_heartbeat_when_stderr_is_not_a_terminal(capsys):
    bar = util.progress(total=3, desc="x")  # pytest captures stderr: not a terminal, so the bar is hidden
    try:
        assert bar.disable
        assert not any(t.name == "progress-heartbeat" and t.is_alive() for t in threading.enumerate())
    finally:
        bar.close()


class SlowBar(FakeBar):
    """A redraw that takes 2 ms, so the heartbeat holds the redraw lock most of the time."""

    def refresh(self):
        threading.Event().wait(0.002)
        super().refresh()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_fork_during_a_heartbeat_finds_the_redraw_lock_free():
    bar = SlowBar()
    thread = util._keep_redrawing(bar, 0.0001)
    try:
        for i in range(20):  # forks at varied points of the heartbeat's loop, mostly while it redraws
            threading.Event().wait(0.001 + 0.0001 * i)
            pid = os.fork()
            if pid == 0:  # the child: the lock must be free (its hook released it) and stderr writable
                ok = util._REDRAW.acquire(blocking=False)
                os.write(2, b"")
                os._exit(0 if ok else 3)
            _, status = os.waitpid(pid, 0)
            assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
            assert util._REDRAW.acquire(timeout=10.0)  # and the parent's is released after the fork
            util._REDRAW.release()
    finally:
        bar.close()
        thread.join(10.0)


class RecordingBar:
    """A stand-in for `tag plan`'s bar recording what it is told."""

    def __init__(self, **kw):
        self.desc = kw.get("desc")
        self.descriptions, self.postfixes, self.n = [], [], 0

    def __enter__(self):  # the loading bar (`tag.cli.inputs`) is a context manager
        return self

    def __exit__(self, *exc):
        return False

    def set_description(self, s, refresh=True):
        self.descriptions.append(s)

    def set_description_str(self, s, refresh=True):
        self.descriptions.append(s)

    def set_postfix_str(self, s, refresh=True):
        self.postfixes.append(s)

    def update(self, n=1):
        self.n += n

    def close(self):
        pass


def test_plan_bar_counts_the_simulations_of_plan_json(tmp_path, monkeypatch, capsys):
    bars = []
    monkeypatch.setattr(util, "progress", lambda **kw: bars.append(RecordingBar(**kw)) or bars[-1])
    out = tmp_path / "plan.json"
    assert main(["plan", "datasets/models/mlp.onnx", "datasets/topologies/heterog8.json", "--playouts", "4",
                 "--simulations", "10", "--jobs", "1", "-o", str(out)]) == 0
    sims = json.loads(out.read_text())["search"]["simulations"]
    (bar,) = [b for b in bars if b.desc == "search"]
    assert bar.descriptions == ["starts", "tree", "refine", "sfb"]
    assert bar.n == 4  # one update per playout
    counts = [int(p.split(" simulations")[0]) for p in bar.postfixes]
    assert counts == sorted(counts) and counts[-1] == sims > 0
    assert any(", best " in p for p in bar.postfixes)  # the tree's best, once it has one
