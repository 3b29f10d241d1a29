"""The search's ablation: for one model x topology, the plan each part of the search reaches, side by side.

Every column is one `tag.search.planner.plan` call on the same inputs, cost model and seed, and one `tag plan`
command line (`PART_FLAGS`); columns differ only in which parts run:

    start            --playouts 0 --no-refine --no-sfb   the starts (baselines, memory-pass variants, every pipeline
                                                         and shard candidate) and the per-group tree's start
    start+refine     --playouts 0 --no-sfb               ... then local refinement of the best and of every other start
    tree (uniform)   --no-gnn --no-refine --no-sfb       the structure tree (`tag.search.structure_tree`) from the best
                                                         start, then the per-group tree as polish, uniform priors
    tree (GNN)       --no-refine --no-sfb                the same with the networks' priors: the structure network's
                                                         (`tag.gnn.structure_model`) on the structure tree, the
                                                         per-group GNN's on the per-group polish
    tree+refine      --no-sfb                            ... then refinement of the best
    full             (no flag)                           ... then SFB selection

and two bounds (`tag.bench.ideal`): the compute bound (no plan computes faster than the whole batch spread over the
devices at full-batch speed) and the latency floor (no plan runs a dependency chain of groups faster than their
kernel launches); a case's headroom is measured over each. The share of the gain each part earns is measured in
log-speedup along the chain start -> tree (uniform) -> tree (GNN) -> tree+refine -> full:

    share(part) = ln(t_before / t_after) / ln(t_start / t_full)

(a part that makes the plan slower has a negative share; shares sum to 1 when t_full < t_start). `refine alone`
is ln(t_start / t_start+refine) / ln(t_start / t_full): what refinement earns without the tree. Times that do not
fit in memory are inf, and shares involving them are nan.

As `tag plan` does, no column runs SFB selection on more than `SFB_MAX_DEVICES` devices (`full` is then
`tree+refine` again). Unlike `tag plan`, the GNN columns use the networks on any cluster (`tag plan` searches with
uniform priors above `GNN_MAX_DEVICES`), so that the ablation measures them there too.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

PARTS = ("start", "start+refine", "tree (uniform)", "tree (GNN)", "tree+refine", "full")
PART_FLAGS = {"start": "--playouts 0 --no-refine --no-sfb", "start+refine": "--playouts 0 --no-sfb",
              "tree (uniform)": "--no-gnn --no-refine --no-sfb", "tree (GNN)": "--no-refine --no-sfb",
              "tree+refine": "--no-sfb", "full": ""}
# (playouts given?, GNN priors, refine, SFB) per part; playouts False = 0 playouts
_SETTINGS = {"start": (False, False, False, False), "start+refine": (False, False, True, False),
             "tree (uniform)": (True, False, False, False), "tree (GNN)": (True, True, False, False),
             "tree+refine": (True, True, True, False), "full": (True, True, True, True)}
CHAIN = ("start", "tree (uniform)", "tree (GNN)", "tree+refine", "full")


@dataclass(frozen=True)
class AblationSettings:
    """What a case was asked to run with; None = `tag plan`'s default (the file's batch or 32 per device, Adam,
    the default work counts, which `tag plan` scales down on large instances)."""

    batch_size: int | None = None
    optimizer: str | None = None
    playouts: int | None = None
    simulations: int | None = None  # refinement simulations
    seed: int = 0

    def label(self) -> str:
        """The settings that differ from `tag plan`'s defaults, as the table prints them ("default" when none)."""
        parts = [f"--batch-size {self.batch_size}" if self.batch_size is not None else "",
                 f"--optimizer {self.optimizer}" if self.optimizer is not None else "",
                 f"--playouts {self.playouts}" if self.playouts is not None else "",
                 f"--simulations {self.simulations}" if self.simulations is not None else "",
                 f"--seed {self.seed}" if self.seed else ""]
        return " ".join(p for p in parts if p) or "default"


@dataclass
class AblationCase:
    """One model x topology: iteration ms per part (inf = out of memory), the compute bound, work per part."""

    model: str
    topology: str
    ms: dict[str, float] = field(default_factory=dict)
    bound_ms: float = math.nan
    floor_ms: float = math.nan  # the latency floor (`tag.bench.ideal.latency_floor_ms`); nan: not computed
    simulations: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    precision: str = ""  # the precision the search chose (the same in every part)
    settings: AblationSettings = AblationSettings()
    batch_size: int = 0  # the global batch planned (the file's, 32 per device, or --batch-size)
    capped: dict[str, bool] = field(default_factory=dict)  # per part: the wall-clock safety cap cut its work
    random_seed: int | None = None  # a random cluster's seed (`random_topology_file`), None for a datasets one
    commit: str | None = None  # the commit of the code that planned it (`tag.bench.ablate_results.code_commit`)
    starts: dict[str, str] = field(default_factory=dict)  # per part: the start the search began from (plan.json)
    paths: dict[str, str] = field(default_factory=dict)  # per tree part: the structure tree's best path, " / "-joined

    def shares(self) -> dict[str, float]:
        """Share of the start -> full gain per step of `CHAIN` (keyed by the part reached) and "refine alone"
        (module docstring); nan when the gain is zero or a time is not finite."""
        t = self.ms
        out = {}
        total = _log_gain(t.get("start"), t.get("full"))
        steps = list(zip(CHAIN, CHAIN[1:])) + [("start", "start+refine")]
        for a, b in steps:
            g = _log_gain(t.get(a), t.get(b))
            name = "refine alone" if (a, b) == ("start", "start+refine") else b
            out[name] = g / total if total and math.isfinite(total) and math.isfinite(g) else math.nan
        return out

    @property
    def headroom(self) -> float:
        """How far the start is above the compute bound: t_start / bound - 1."""
        s = self.ms.get("start", math.nan)
        return s / self.bound_ms - 1.0 if self.bound_ms > 0 else math.nan

    @property
    def headroom_floor(self) -> float:
        """How far the start is above the larger of the two bounds: t_start / max(bound, floor) - 1 (nan when
        the floor was not computed)."""
        s, b = self.ms.get("start", math.nan), max(self.bound_ms, self.floor_ms)
        return s / b - 1.0 if math.isfinite(self.floor_ms) and b > 0 else math.nan


def _log_gain(before: float | None, after: float | None) -> float:
    if before is None or after is None or not (math.isfinite(before) and math.isfinite(after)) or after <= 0:
        return math.nan
    return math.log(before / after)


def command_line(part: str, model_path: str, topology_path: str, playouts: int | None, seed: int,
                 simulations: int | None = None, batch_size: int | None = None, optimizer: str | None = None) -> str:
    """The `tag plan` command that reproduces one column."""
    flags = PART_FLAGS[part]
    if playouts is not None and "--playouts 0" not in flags:
        flags = f"--playouts {playouts} " + flags
    if simulations is not None and "--no-refine" not in flags:
        flags = f"--simulations {simulations} " + flags
    model_flags = (f" --batch-size {batch_size}" if batch_size is not None else "") + \
        (f" --optimizer {optimizer}" if optimizer is not None else "")
    return f"tag plan {model_path} {topology_path}{model_flags} {flags} --seed {seed}".replace("  ", " ").strip()


def run_ablation(model_path: str, topology_path: str, *, model: str | None = None, topology: str | None = None,
                 playouts: int | None = None, refine_simulations: int | None = None, seed: int = 0,
                 budget_s: float | None = None, gnn_checkpoint: str | None = None,
                 structure_checkpoint: str | None = None, parts=PARTS, batch_size: int | None = None,
                 optimizer: str | None = None, random_seed: int | None = None) -> AblationCase:
    """Plan one case once per part (module docstring) and compute its bound. `gnn_checkpoint`,
    `structure_checkpoint`: None = the shipped per-group GNN and structure network (no shipped structure network:
    uniform structure priors). `batch_size`, `optimizer`: as `tag plan --batch-size / --optimizer` (None: the
    model's own batch, Adam); the roofline cost model (as `tag bench`); the search chooses the precision as
    `tag plan` does without --precision, and the bound is under the chosen precision's cost model."""
    from dataclasses import replace

    from tag.bench.ideal import compute_bound, latency_floor_ms
    from tag.gnn import default_checkpoint, load_priors_fn
    from tag.gnn.checkpoint import default_structure_checkpoint
    from tag.gnn.structure_priors import load_structure_priors_fn
    from tag.modelio import ModelOptions, cost_model_for, load_inputs
    from tag.search.budget import DEFAULT_BUDGET_S
    from tag.search.planner import SFB_MAX_DEVICES, plan

    settings = AblationSettings(batch_size, optimizer, playouts, refine_simulations, seed)
    case = AblationCase(model or os.path.basename(model_path), topology or os.path.basename(topology_path),
                        settings=settings, random_seed=random_seed)
    inp = load_inputs(model_path, topology_path, ModelOptions(batch_size=batch_size, optimizer=optimizer))
    case.batch_size = inp.batch_size
    priors = load_priors_fn(gnn_checkpoint or default_checkpoint(), inp.gg, inp.cluster, inp.cost, inp.training)
    structure_ckpt = structure_checkpoint or default_structure_checkpoint()
    structure_priors = (load_structure_priors_fn(structure_ckpt, inp.gg, inp.cluster, inp.cost, inp.training)
                        if structure_ckpt else None)
    costs: dict = {}

    def cost_for(precision: str):  # one cost model per precision for all parts (they are pure functions of it)
        if precision not in costs:
            costs[precision] = cost_model_for(inp.gg, replace(inp.training, precision=precision), topology_path)
        return costs[precision]

    res = None
    for part in parts:
        tree, gnn, refine, sfb = _SETTINGS[part]
        sfb = sfb and inp.cluster.n_devices <= SFB_MAX_DEVICES  # as `tag plan`: no SFB selection above its limit
        res = plan(inp.gg, inp.cluster, inp.cost, inp.training, playouts=playouts if tree else 0,
                   refine_simulations=refine_simulations, budget_s=budget_s or DEFAULT_BUDGET_S, seed=seed,
                   priors_fn=priors if gnn else None, refine=refine, sfb=sfb, cost_for=cost_for,
                   structure_priors_fn=structure_priors if gnn else None)
        r = res.result
        case.ms[part] = r.iteration_ms if not r.oom else math.inf
        case.simulations[part] = res.simulations
        case.seconds[part] = res.seconds
        case.capped[part] = res.capped
        case.starts[part] = res.start
        if res.structure:
            case.paths[part] = " / ".join(map(str, res.structure.get("path", [])))
        case.precision = res.training.precision
    cost = res.cost if res is not None else inp.cost
    case.bound_ms = compute_bound(inp.gg, inp.cluster, cost, inp.batch_size).iteration_ms
    case.floor_ms = latency_floor_ms(inp.gg, inp.cluster, cost)
    return case


def case_floor_ms(case: AblationCase, model_path: str, topology_path: str) -> float:
    """The latency floor of a case planned before the file recorded it: its model and topology read as it was
    planned (batch, optimizer, the chosen precision), under the roofline cost model (`tag.bench.ideal`)."""
    from tag.bench.ideal import latency_floor_ms
    from tag.modelio import ModelOptions, load_inputs

    inp = load_inputs(model_path, topology_path, ModelOptions(batch_size=case.batch_size or None,
                                                              optimizer=case.settings.optimizer,
                                                              precision=case.precision or None))
    return latency_floor_ms(inp.gg, inp.cluster, inp.cost)


def random_topology_file(seed: int, directory: str) -> str:
    """Write the random cluster of `seed` (`tag.topology.random_topology`, at most 4 machines x 4 devices, the
    sizes `tag train` draws) to `directory`/random-SEED.json and return the path. `tag train --topologies random:N`
    draws its seeds from [10,000, 2^31), so seeds below 10,000 are clusters the shipped GNN never trained on."""
    import json

    from tag.topology import random_topology

    path = os.path.join(directory, f"random-{seed}.json")
    with open(path, "w") as f:
        json.dump(random_topology(seed, max_machines=4, max_devices_per_machine=4), f)
    return path
