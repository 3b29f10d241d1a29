"""Lossless gradient compression: sufficient-factor broadcasting (SFB) chosen by OR-Tools CP-SAT.

`eligible_ops` finds the ops whose weight gradient is X^T dY (`tag.compression.eligibility`),
`select_sfb` chooses among them with a CP-SAT model over the simulator's cost terms and validates the
choice with the simulator (`tag.compression.select`), `sfb_summary` prints the report. The simulator
charges SFB in `tag.sim.sfb` / `tag.sim.gradsync.group_syncs`.
"""

from tag.compression.eligibility import Candidate, eligible_ops, with_sfb
from tag.compression.report import sfb_summary
from tag.compression.select import no_sfb_report, select_sfb

__all__ = ["Candidate", "eligible_ops", "with_sfb", "select_sfb", "no_sfb_report", "sfb_summary"]
