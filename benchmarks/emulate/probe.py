"""Measure a link: bulk TCP throughput from one namespace to another, in Mbit/s (10^6 bits per second).

`measure_mbit(star, src, dst, nbytes)` starts a receiver in dst's namespace and a sender in src's; the
receiver times from the first to the last byte, so connection set-up and the first RTT are not counted.
"""

from __future__ import annotations

import json
import subprocess
import sys

_RECV = r"""
import socket, sys, time, json
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1)
print("ready", flush=True)
c, _ = s.accept(); n = 0; t0 = None
while True:
    b = c.recv(1 << 20)
    if not b: break
    if t0 is None: t0 = time.perf_counter(); first = len(b)
    n += len(b)
t1 = time.perf_counter()
print(json.dumps({"bytes": n - first, "s": t1 - t0}), flush=True)
"""

_SEND = r"""
import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
buf = b"x" * (1 << 16); left = int(sys.argv[3])
while left > 0:
    c.sendall(buf[: min(left, len(buf))]); left -= len(buf)
c.close()
"""


def measure_mbit(star, src: int, dst: int, nbytes: int = 8_000_000, port: int = 5201) -> float:
    """Throughput of one bulk TCP flow from machine `src` to machine `dst` of `star`, Mbit/s."""
    addr = star.machines[dst].addr
    recv = subprocess.Popen(star.exec_prefix(dst) + [sys.executable, "-c", _RECV, addr, str(port)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert recv.stdout.readline().strip() == "ready"
        subprocess.run(star.exec_prefix(src) + [sys.executable, "-c", _SEND, addr, str(port), str(nbytes)],
                       check=True, timeout=120)
        out = json.loads(recv.stdout.readline())
    finally:
        recv.wait(timeout=30)
    return out["bytes"] * 8 / out["s"] / 1e6
