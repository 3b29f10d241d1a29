"""Every docstring example in the `tag` package runs and prints what it shows (the examples are worked by hand)."""

import doctest
import importlib
import pkgutil

import pytest

import tag


def _modules() -> list[str]:
    names = [m.name for m in pkgutil.walk_packages(tag.__path__, "tag.")]
    return sorted(n for n in names if not n.endswith("__main__"))


@pytest.mark.parametrize("name", _modules())
def test_docstring_examples(name):
    try:
        module = importlib.import_module(name)
    except ImportError as e:  # an optional extra (e.g. transformers) that is not installed
        pytest.skip(f"{name}: {e}")
    failed, _ = doctest.testmod(module, optionflags=doctest.ELLIPSIS, verbose=False)
    assert failed == 0, f"{name}: {failed} docstring example(s) print something else (run python -m doctest -v)"
