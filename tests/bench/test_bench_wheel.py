"""A wheel built from the source tree carries the bench's data: every file under tag/bench/data/ (the links
into datasets/ resolved to the files' bytes), so `tag bench --quick` and `--published` run from a wheel install.

The build runs offline (`pip wheel --no-deps --no-build-isolation`) on a copy of the files the wheel is made of;
it is skipped when this environment's setuptools cannot build wheels.
"""

import os
import shutil
import subprocess
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tag", "bench", "data")


def _data_files() -> dict[str, str]:
    """{path inside the wheel: source file (links resolved)} of every file under tag/bench/data/."""
    out = {}
    for dirpath, _, filenames in os.walk(DATA):
        for fn in filenames:
            path = os.path.join(dirpath, fn)
            out[os.path.relpath(path, ROOT).replace(os.sep, "/")] = os.path.realpath(path)
    return out


def _can_build_wheels() -> bool:
    try:
        import setuptools  # noqa: F401
        from setuptools.command import bdist_wheel  # noqa: F401  (setuptools >= 70.1)
        return True
    except ImportError:
        try:
            import wheel  # noqa: F401
            return True
        except ImportError:
            return False


def test_quick_suite_and_published_files_are_package_data():
    files = _data_files()
    for m in ("vgg19", "resnet50", "gpt2_medium"):
        assert f"tag/bench/data/models/{m}.onnx" in files
    for t in ("heterog8", "tag16", "hap64"):
        assert f"tag/bench/data/topologies/{t}.json" in files
    for name in ("gpu-training-throughput.json", "scaling.json"):
        assert f"tag/bench/data/published/{name}" in files
    # the links point at datasets/: one copy of each model in the repository
    for rel, src in files.items():
        if "/models/" in rel and "/published/" not in rel:
            assert os.path.islink(os.path.join(ROOT, rel)) and src.startswith(os.path.join(ROOT, "datasets") + os.sep)


@pytest.mark.skipif(not _can_build_wheels(), reason="setuptools here cannot build wheels offline")
def test_wheel_holds_the_bench_data(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(os.path.join(ROOT, "tag"), src / "tag", symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(os.path.join(ROOT, name), src / name)
    files = _data_files()
    for target in set(files.values()):  # what the links point to, at the same place relative to the tree
        if target.startswith(os.path.join(ROOT, "datasets") + os.sep):
            dest = src / os.path.relpath(target, ROOT)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(target, dest)
    out = tmp_path / "wheels"
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(out), str(src)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (whl,) = out.glob("tag-*.whl")
    with zipfile.ZipFile(whl) as z:
        names = set(z.namelist())
        assert "tag/bench/suite.py" in names and "tag/cost/calibrate.py" in names
        for rel, source in files.items():
            assert rel in names, rel
            with open(source, "rb") as f:
                assert z.read(rel) == f.read(), rel  # the file's bytes, not a link
        assert not any(n.startswith("datasets/") or n.startswith("benchmarks/") for n in names)
