"""Emulated heterogeneous clusters on one machine with real OS mechanisms.

`netns.Star`: one network namespace per emulated machine, each joined to a hub namespace (a Linux bridge)
by a veth pair whose two ends are shaped with `tc netem` (rate and delay per direction), so every
machine has its own NIC speed, as a topology.json machine's ``nic_bandwidth_gbps``.
`cpuquota.CpuQuota`: a CFS bandwidth quota per emulated device (cgroup v2 ``cpu.max``, or cgroup v1
``cpu.cfs_quota_us`` where v2 has no cpu controller), for slower and faster "devices".
`probe`: a TCP throughput probe that measures a shaped link.

Each mechanism says, through `available()`, whether this machine allows it and why not; everything a
harness object makes is removed by its `close()` (also on exit and on SIGTERM/SIGINT).
"""
