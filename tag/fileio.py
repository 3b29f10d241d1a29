"""Output files: checked before any work starts, written atomically.

Every verb that writes a file checks its output paths first (`check_output_paths`: the directory exists and is
writable, the path is not a directory, not one of the inputs and not another output), then writes through
`atomic_write`: a temporary file in the target's directory, flushed and fsynced, then `os.replace`d over the
target. A writer that fails part-way leaves the target as it was (absent or the old file) and no temporary file.
"""

from __future__ import annotations

import os
import tempfile
from typing import IO, Callable, Iterable, Sequence

from tag.errors import InputError


def check_output_path(path: str, flag: str, inputs: Iterable[str | None] = ()) -> None:
    """InputError(flag, path, ...) unless `path` can be written and is none of `inputs` (same file after resolving).

    >>> check_output_path("/no/such/dir/p.json", "-o")
    Traceback (most recent call last):
    ...
    tag.errors.InputError: -o: /no/such/dir/p.json: expected a file in an existing directory, found no directory /no/such/dir
    """
    path = str(path)
    target = os.path.abspath(path)
    d = os.path.dirname(target)
    if os.path.isdir(target):
        raise InputError(flag, path, "a file path", "a directory")
    if not os.path.isdir(d):
        what = "not a directory" if os.path.exists(d) else "no directory"
        raise InputError(flag, path, "a file in an existing directory", f"{what} {os.path.dirname(path) or d}")
    if not os.access(d, os.W_OK | os.X_OK):
        raise InputError(flag, path, "a file in a writable directory", f"{os.path.dirname(path) or d} is not writable")
    if os.path.exists(target) and not os.access(target, os.W_OK):
        raise InputError(flag, path, "a writable file", "a read-only file")
    for src in inputs:
        if src and _same_file(target, str(src)):
            raise InputError(flag, path, "a path other than the inputs", f"the input {src}")


def check_output_paths(outputs: Sequence[tuple[str, str | None]], inputs: Iterable[str | None] = ()) -> None:
    """`check_output_path` for each (flag, path) with a path, and no two outputs the same file."""
    inputs = [str(i) for i in inputs if i]
    seen: list[tuple[str, str]] = []
    for flag, path in outputs:
        if not path:
            continue
        check_output_path(path, flag, inputs)
        for other_flag, other in seen:
            if _same_file(os.path.abspath(path), other):
                raise InputError(flag, str(path), f"a path other than {other_flag}'s", f"the same file as {other_flag}")
        seen.append((flag, os.path.abspath(path)))


def _same_file(a: str, b: str) -> bool:
    """True if `a` and `b` name the same file: equal after resolving links, or the same inode if both exist."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def atomic_write(path: str, write: Callable[[IO], None], binary: bool = False) -> None:
    """Call `write(f)` on a temporary file next to `path`, then rename it over `path`.

    The new file gets the old file's permission bits, or 0o666 minus the umask for a new file (as `open` would).
    On any exception from `write` the temporary file is removed and `path` is left untouched.
    """
    path = str(path)
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb" if binary else "w") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, file_mode_for(path))
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_text_atomic(path: str, text: str) -> None:
    """Write `text` to `path` atomically (see `atomic_write`)."""
    atomic_write(path, lambda f: f.write(text))


def file_mode_for(path: str) -> int:
    """The permission bits a rewrite of `path` gets: its own when it exists, else 0o666 minus the umask."""
    try:
        return os.stat(path).st_mode & 0o777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask
