"""tag.memory: huge pages requested for tag's processes unless the user said otherwise or the kernel has none."""

from __future__ import annotations

from tag.memory import ENV, thp_mode, use_huge_pages


def test_thp_mode_reads_the_bracketed_word(tmp_path):
    f = tmp_path / "enabled"
    f.write_text("always [madvise] never\n")
    assert thp_mode(str(f)) == "madvise"
    f.write_text("[always] madvise never\n")
    assert thp_mode(str(f)) == "always"
    f.write_text("always madvise [never]\n")
    assert thp_mode(str(f)) == "never"
    assert thp_mode(str(tmp_path / "missing")) is None


def test_use_huge_pages_sets_the_variable_only_where_it_helps():
    env: dict = {}
    assert use_huge_pages(env, mode="madvise") and env == {ENV: "1"}
    env = {}
    assert use_huge_pages(env, mode="always") and env[ENV] == "1"
    for mode in ("never", None):
        env = {}
        assert not use_huge_pages(env, mode=mode) and env == {}


def test_the_users_value_wins():
    env = {ENV: "0"}
    assert not use_huge_pages(env, mode="madvise") and env == {ENV: "0"}
    env = {ENV: "1"}
    assert use_huge_pages(env, mode="never") and env == {ENV: "1"}


# --- keep_freed_memory -----------------------------------------------------------------------------------------

import os  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

import pytest  # noqa: E402

from tag.memory import MALLOC_ENV, keep_freed_memory  # noqa: E402


class _FakeLibc:
    def __init__(self):
        self.calls = []

    def mallopt(self, param, value):
        self.calls.append((param, value))
        return 1


def test_keep_freed_memory_sets_the_children_s_variables_and_only_mallopts_its_own_process(monkeypatch):
    env: dict = {}
    lib = _FakeLibc()
    assert keep_freed_memory(env, libc=lib)
    assert env == {"MALLOC_MMAP_THRESHOLD_": str(32 * 2**20), "MALLOC_TRIM_THRESHOLD_": str(2**31 - 1)}
    assert lib.calls == []  # another environment: this process is not changed
    for k in MALLOC_ENV:
        monkeypatch.delenv(k, raising=False)
    lib = _FakeLibc()
    assert keep_freed_memory(libc=lib)
    assert sorted(lib.calls) == [(-3, 32 * 2**20), (-1, 2**31 - 1)]  # M_MMAP_THRESHOLD, M_TRIM_THRESHOLD (malloc.h)
    assert os.environ["MALLOC_TRIM_THRESHOLD_"] == str(2**31 - 1)


def test_keep_freed_memory_leaves_the_users_values_and_other_c_libraries_alone():
    env = {"MALLOC_TRIM_THRESHOLD_": "131072"}
    lib = _FakeLibc()
    assert keep_freed_memory(env, libc=lib)
    assert env == {"MALLOC_TRIM_THRESHOLD_": "131072", "MALLOC_MMAP_THRESHOLD_": str(32 * 2**20)}
    env = {}
    assert not keep_freed_memory(env, libc=None) and env == {}


_FAULTS = """
import resource, sys
import numpy as np
if sys.argv[1] == "call":
    from tag.memory import keep_freed_memory
    assert keep_freed_memory()
def step():  # a training step's shape: a dozen 3 MiB tensors written, then all freed
    xs = [np.ones(3 * 2**20 // 8) for _ in range(12)]
    return sum(float(x[-1]) for x in xs)
for _ in range(3):
    step()
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    step()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / 10)
"""


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's malloc only")
def test_a_fresh_process_stops_faulting_its_step_in_again():
    """Page faults a step (getrusage, the kernel's count): 36 MiB written and freed is 9,216 pages of 4 KiB when
    glibc hands the memory back after every step, ~0 when it keeps it (set at start by the environment, or by
    the call)."""
    base = {k: v for k, v in os.environ.items() if k not in MALLOC_ENV}

    def faults(env, how):
        out = subprocess.run([sys.executable, "-c", _FAULTS, how], env=env, capture_output=True, text=True, check=True)
        return float(out.stdout.strip())

    as_started = faults(base, "none")
    inherited = dict(base)
    keep_freed_memory(inherited, libc=_FakeLibc())
    assert as_started > 4000  # most of the 9,216 pages, every step
    assert faults(inherited, "none") < 100
    assert faults(base, "call") < 100
