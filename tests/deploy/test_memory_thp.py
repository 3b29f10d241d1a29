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
