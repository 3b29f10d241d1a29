"""Measuring real hardware (issue 13): op times into a profile database, links into a topology.json.

- `tag.profile.ops.profile_ops`: forward/backward time of every op signature and group via the deploy
  converter, at several row counts (`tag profile ops`);
- `tag.profile.links`: p2p and all-reduce sweeps among torch.distributed ranks, alpha-beta fits
  (`tag.profile.fit`), a measured topology and `--compare` (`tag profile links`);
- `tag.profile.timing`: median-of-repeats timing and the machine block (matmul peak, copy bandwidth,
  dispatch overhead) that overrides a topology's `cpu` figures.
"""
