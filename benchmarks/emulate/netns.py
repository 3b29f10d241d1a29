"""Network namespaces joined through a bridge by shaped veth pairs (a star: one NIC speed per machine).

Layout for machines 0..n-1, with prefix P (unique per harness: pid-based)::

    netns P-hub:  bridge Pbr, veth ends Ph<i> (egress shaped: traffic *to* machine i)
    netns P-<i>:  veth end eth0 = 10.<net>.0.<i+1>/24, lo up (egress shaped: traffic *from* machine i)

A flow from machine a to b crosses a's egress and b's ingress (the hub's egress toward b); the slower of
the two NIC rates bounds it, as the topology model's implicit switch does. Each end is shaped with a token
bucket (`tc qdisc ... tbf rate R`); a delay needs `netem` (half the one-way latency on each end, as a child
of the tbf). Where the kernel has no netem (this machine: "Specified qdisc kind is unknown"), `delay_ok`
is False, the harness says so and runs without the delay.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass


def _run(*cmd: str, ns: str | None = None) -> None:
    full = (["ip", "netns", "exec", ns] if ns else []) + list(cmd)
    p = subprocess.run(full, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(full)}: {p.stderr.strip()}")


def delay_available() -> tuple[bool, str]:
    """(True, '') when `tc netem` (link delay) works here; else (False, the kernel's answer)."""
    name = f"tagdelay{os.getpid() % 100000}"
    try:
        _run("ip", "netns", "add", name)
        try:
            _run("ip", "link", "add", "name", "tpa", "type", "veth", "peer", "name", "tpb", ns=name)
            _run("tc", "qdisc", "add", "dev", "tpa", "root", "netem", "delay", "1ms", ns=name)
        finally:
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
    except RuntimeError as e:
        return False, "no link delay: " + str(e).split(": ", 1)[-1]
    return True, ""


def available() -> tuple[bool, str]:
    """(True, '') when this process can make namespaces, veth pairs and tbf qdiscs; else (False, why)."""
    if os.geteuid() != 0:
        return False, "network namespaces need root"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return False, f"`{tool}` is not installed"
    name = f"tagprobe{os.getpid() % 100000}"
    try:
        _run("ip", "netns", "add", name)
        try:
            _run("ip", "link", "add", "name", "tpa", "type", "veth", "peer", "name", "tpb", ns=name)
            _run("tc", "qdisc", "add", "dev", "tpa", "root", "tbf", "rate", "100mbit", "burst", "32k",
                 "latency", "50ms", ns=name)
        finally:
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
    except RuntimeError as e:
        return False, str(e)
    return True, ""


@dataclass
class Machine:
    """One emulated machine: its namespace, address, and NIC figures."""

    name: str
    ns: str
    addr: str
    rate_mbit: float
    latency_us: float


class Star:
    """Namespaces for `rates_mbit` machines around one bridge; `close()` deletes all of them.

    >>> with Star([1000, 200], latency_us=100) as s:   # doctest: +SKIP
    ...     s.machines[1].addr
    '10.77.0.2'
    """

    def __init__(self, rates_mbit: list[float], latency_us: float = 0.0, prefix: str | None = None, net: int = 77):
        self.prefix = prefix or f"tf{os.getpid() % 100000}"
        self.hub = f"{self.prefix}-hub"
        self.namespaces: list[str] = []
        self.machines: list[Machine] = []
        atexit.register(self.close)
        self._old = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            self._build(rates_mbit, latency_us, net)
        except Exception:
            self.close()
            raise

    def _on_signal(self, signum, frame):
        self.close()
        raise SystemExit(128 + signum)

    def _ns(self, name: str) -> None:
        _run("ip", "netns", "add", name)
        self.namespaces.append(name)
        _run("ip", "link", "set", "lo", "up", ns=name)

    def _build(self, rates_mbit, latency_us, net) -> None:
        self.delay_ok, self.delay_why = delay_available() if latency_us > 0 else (True, "")
        self._ns(self.hub)
        br = "br0"
        _run("ip", "link", "add", br, "type", "bridge", ns=self.hub)
        _run("ip", "link", "set", br, "up", ns=self.hub)
        for i, rate in enumerate(rates_mbit):
            ns = f"{self.prefix}-{i}"
            self._ns(ns)
            hub_end = f"h{i}"
            _run("ip", "link", "add", "name", hub_end, "type", "veth", "peer", "name", "eth0", "netns", ns, ns=self.hub)
            _run("ip", "link", "set", hub_end, "master", br, ns=self.hub)
            _run("ip", "link", "set", hub_end, "up", ns=self.hub)
            addr = f"10.{net}.0.{i + 1}"
            _run("ip", "addr", "add", f"{addr}/24", "dev", "eth0", ns=ns)
            _run("ip", "link", "set", "eth0", "up", ns=ns)
            for dev, where in ((hub_end, self.hub), ("eth0", ns)):
                # GSO super-packets would make netem's per-packet rate accounting coarse; keep MTU-sized.
                subprocess.run(["ip", "netns", "exec", where, "ethtool", "-K", dev, "tso", "off", "gso", "off"],
                               capture_output=True)
                # 1 ms of tokens (at least two frames): a NIC has no burst allowance; hrtimers keep tbf exact
                burst = max(3_100, int(rate * 1e6 / 8 / 1000))
                _run("tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", "tbf", "rate", f"{rate:g}mbit",
                     "burst", str(burst), "latency", "200ms", ns=where)
                if latency_us > 0 and self.delay_ok:
                    _run("tc", "qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:", "netem",
                         "delay", f"{latency_us / 2:g}us", ns=where)
            self.machines.append(Machine(f"m{i}", ns, addr, float(rate), float(latency_us) if self.delay_ok else 0.0))

    def exec_prefix(self, i: int) -> list[str]:
        """The argv prefix that runs a command inside machine i's namespace."""
        return ["ip", "netns", "exec", self.machines[i].ns]

    def close(self) -> None:
        """Delete every namespace this harness made (their veth ends and qdiscs go with them)."""
        for name in reversed(self.namespaces):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        self.namespaces = []
        for s, h in getattr(self, "_old", {}).items():
            try:
                signal.signal(s, h)
            except (ValueError, TypeError):
                pass
        self._old = {}

    def __enter__(self) -> "Star":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
