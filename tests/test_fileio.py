"""tag.fileio: output paths checked up front, atomic writes that leave the target untouched on failure."""

import os

import pytest

from tag.errors import InputError
from tag.fileio import atomic_write, check_output_path, check_output_paths, write_text_atomic


def test_missing_directory_names_flag_and_path(tmp_path):
    p = tmp_path / "nope" / "p.json"
    with pytest.raises(InputError) as e:
        check_output_path(str(p), "-o")
    msg = str(e.value)
    assert msg.startswith(f"-o: {p}:") and "no directory" in msg and "\n" not in msg


def test_parent_is_a_file_and_target_is_a_directory(tmp_path):
    f = tmp_path / "f.txt"
    f.write_text("x")
    with pytest.raises(InputError, match="not a directory"):
        check_output_path(str(f / "p.json"), "--trace")
    with pytest.raises(InputError, match="a directory"):
        check_output_path(str(tmp_path), "--out")


def test_output_that_is_an_input_is_refused_after_resolving(tmp_path):
    src = tmp_path / "model.onnx"
    src.write_text("m")
    (tmp_path / "sub").mkdir()
    roundabout = str(tmp_path / "sub" / ".." / "model.onnx")
    link = tmp_path / "link.onnx"
    link.symlink_to(src)
    hard = tmp_path / "hard.onnx"
    os.link(src, hard)
    for out in (roundabout, str(link), str(hard)):
        with pytest.raises(InputError, match="the input"):
            check_output_path(out, "-o", inputs=[str(src)])
    check_output_path(str(tmp_path / "plan.json"), "-o", inputs=[str(src), None])  # a new file is fine


def test_two_outputs_on_one_file_are_refused(tmp_path):
    p = str(tmp_path / "x.json")
    with pytest.raises(InputError, match="--trace"):
        check_output_paths([("-o", p), ("--trace", p)])
    check_output_paths([("-o", p), ("--trace", None)])


def test_interrupted_write_leaves_old_file_and_no_temp(tmp_path):
    target = tmp_path / "plan.json"
    target.write_text("old contents\n")

    def half_then_fail(f):
        f.write("new partial")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        atomic_write(str(target), half_then_fail)
    assert target.read_text() == "old contents\n"
    assert sorted(os.listdir(tmp_path)) == ["plan.json"]
    absent = tmp_path / "new.json"
    with pytest.raises(RuntimeError):
        atomic_write(str(absent), half_then_fail)
    assert not absent.exists() and sorted(os.listdir(tmp_path)) == ["plan.json"]


def test_write_replaces_and_keeps_mode(tmp_path):
    target = tmp_path / "t.json"
    target.write_text("a")
    os.chmod(target, 0o640)
    write_text_atomic(str(target), "bbb")
    assert target.read_text() == "bbb" and (os.stat(target).st_mode & 0o777) == 0o640
    atomic_write(str(tmp_path / "b.bin"), lambda f: f.write(b"\x00\x01"), binary=True)
    assert (tmp_path / "b.bin").read_bytes() == b"\x00\x01"
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(tmp_path / "b.bin").st_mode & 0o777 == 0o666 & ~umask
