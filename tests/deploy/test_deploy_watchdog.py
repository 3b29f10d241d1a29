"""The launcher's watchdog on stand-in rank processes (no torch): hangs are killed within the timeout."""

from __future__ import annotations

import subprocess
import sys
import time
from types import SimpleNamespace

from tag.deploy.launcher import _first_error, _watch

# two "ranks" in one process: rank 0 keeps starting step 2, rank 1 stops after step 1 and sleeps
FAKE = r"""
import os, sys, time
d = sys.argv[1]
def beat(r, v):
    open(os.path.join(d, f"rank{r}.beat.tmp"), "w").write(str(v))
    os.replace(os.path.join(d, f"rank{r}.beat.tmp"), os.path.join(d, f"rank{r}.beat"))
for v in range(5):
    beat(0, v); beat(1, v)
beat(0, 5)
time.sleep(600)
"""


def test_hung_rank_is_named_and_killed_within_the_timeout(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", FAKE, str(tmp_path)], start_new_session=True)
    t0 = time.monotonic()
    msg = _watch(proc, SimpleNamespace(nproc=2, timeout_s=1.5), str(tmp_path))
    elapsed = time.monotonic() - t0
    assert proc.returncode is not None  # killed, not left running
    assert msg == "rank 1 hung: no rank made progress for 1.5 s (it stopped after step 1); killed all ranks"
    assert 1.5 <= elapsed < 10


def test_first_error_is_the_earliest_rank_error(tmp_path):
    (tmp_path / "rank1.error").write_text("100.5\nRuntimeError: boom\ntrace")
    (tmp_path / "rank0.error").write_text("101.0\nDistBackendError: connection closed\ntrace")
    assert _first_error(str(tmp_path), 2, str(tmp_path / "none.log"), 1) == "rank 1 failed: RuntimeError: boom"
    log = tmp_path / "t.log"
    log.write_text("Root Cause (first observed failure):\n[0]:\n  time : x\n  host : h\n  rank      : 0 (local_rank: 0)\n"
                   "  exitcode  : -9 (pid: 12)\n")
    # rank 0 reported an error of its own before it was killed: that error is the root cause
    assert _first_error(str(tmp_path), 2, str(log), 1) == "rank 1 failed: RuntimeError: boom"
    (tmp_path / "rank0.error").unlink()
    (tmp_path / "rank1.error").unlink()
    assert _first_error(str(tmp_path), 2, str(log), 1) == "rank 0 died: signal SIGKILL; the other ranks were stopped"


def test_kill_reaches_ranks_in_sessions_of_their_own():
    """torchrun puts each rank in its own session: killing the launcher's session must still end them."""
    import os
    import subprocess
    import sys
    import time

    from tag.deploy.launcher import _kill

    code = ("import subprocess, sys, time\n"
            "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'], start_new_session=True)\n"
            "print(c.pid, flush=True)\n"
            "time.sleep(300)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    grandchild = int(proc.stdout.readline())
    _kill(proc)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{grandchild}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break  # killed, waiting to be reaped by init
        except FileNotFoundError:
            break
        time.sleep(0.05)
    else:
        os.kill(grandchild, 9)
        raise AssertionError("the rank in its own session survived _kill")


def test_signalled_rank_is_the_root_cause_even_when_torchrun_names_another(tmp_path):
    """torchrun 2.13's report when rank 1 is SIGKILLed and rank 0 then fails on the closed connection: the
    'Root Cause' block names rank 0, but the rank that died by a signal (and wrote no error file) is rank 1."""
    from tag.deploy.launcher import _signalled_rank

    log = tmp_path / "torchrun.log"
    log.write_text(
        "rank 0: RuntimeError: Connection closed by peer\n"
        "E1121 api.py:1002] failed (exitcode: 1) local_rank: 0 (pid: 16964) of binary\n"
        "============================================================\n"
        "tag.deploy.worker FAILED\n"
        "------------------------------------------------------------\n"
        "Failures:\n[1]:\n  time      : 2026-11-21_22:48:31\n  host      : localhost\n"
        "  rank      : 1 (local_rank: 1)\n  exitcode  : -9 (pid: 16965)  (SIGKILL)\n  error_file: <N/A>\n"
        "------------------------------------------------------------\n"
        "Root Cause (first observed failure):\n[0]:\n  time      : 2026-11-21_22:48:31\n"
        "  rank      : 0 (local_rank: 0)\n  exitcode  : 1 (pid: 16964)\n  error_file: <N/A>\n")
    (tmp_path / "rank0.error").write_text("1.0\nRuntimeError: Connection closed by peer\n")
    assert _signalled_rank(str(log), str(tmp_path)) == (1, "signal SIGKILL")
    (tmp_path / "rank1.error").write_text("0.5\nValueError: x\n")  # a rank that reported its own error first
    assert _signalled_rank(str(log), str(tmp_path)) is None


def test_a_rank_torchrun_stopped_with_sigterm_is_not_the_root_cause(tmp_path):
    """Rank 1 SIGKILLed; torchrun then stops rank 0 with SIGTERM before it writes an error file, and lists it first:
    the root cause is still rank 1 (SIGTERM is how torchrun stops survivors)."""
    from tag.deploy.launcher import _signalled_rank

    block = ("[{i}]:\n  time      : 2026-11-22_02:20:00\n  host      : localhost\n"
             "  rank      : {r} (local_rank: {r})\n  exitcode  : {c} (pid: 1{r})  ({n})\n  error_file: <N/A>\n")
    log = tmp_path / "torchrun.log"
    log.write_text("tag.deploy.worker FAILED\nFailures:\n" + block.format(i=1, r=0, c=-15, n="SIGTERM")
                   + block.format(i=2, r=1, c=-9, n="SIGKILL")
                   + "Root Cause (first observed failure):\n" + block.format(i=0, r=0, c=-15, n="SIGTERM"))
    assert _signalled_rank(str(log), str(tmp_path)) == (1, "signal SIGKILL")
    # only SIGTERMed ranks (the launcher's own stop, say): the first listed is reported
    log.write_text("Failures:\n" + block.format(i=1, r=0, c=-15, n="SIGTERM"))
    assert _signalled_rank(str(log), str(tmp_path)) == (0, "signal SIGTERM")
