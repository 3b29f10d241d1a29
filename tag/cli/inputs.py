"""Loading a verb's inputs: typed options from the parsed flags, with a progress bar on stderr.

The library below the CLI takes typed values only (`tag.modelio.ModelOptions`, `tag.deploy.job.DeployOptions`);
this is the one place flags become those values.
"""

from __future__ import annotations

import argparse

from tag.deploy.job import DeployOptions, Job, prepare_job
from tag.modelio import LOAD_STAGES, Inputs, ModelOptions, cost_model_for, load_inputs


def model_options(args: argparse.Namespace) -> ModelOptions:
    """ModelOptions from the model flags (`add_model_flags`, plus --profile and --groups where the verb has them)."""
    from tag.cli.util import parse_input_shapes

    return ModelOptions(batch_size=getattr(args, "batch_size", None),
                        input_shapes=parse_input_shapes(getattr(args, "input_shape", None) or []),
                        data_inputs=tuple(getattr(args, "data_input", None) or ()),
                        optimizer=getattr(args, "optimizer", None), profile=getattr(args, "profile", None),
                        groups=getattr(args, "groups", None), precision=getattr(args, "precision", None))


def precision_costs(args: argparse.Namespace, inp: Inputs):
    """None when --precision fixes the precision; else precision -> the cost model of `inp` under it (for the
    search to choose, `tag.search.planner.plan(cost_for=...)`)."""
    from dataclasses import replace

    if getattr(args, "precision", None) is not None:
        return None
    return lambda precision: cost_model_for(inp.gg, replace(inp.training, precision=precision), inp.topology_path,
                                            getattr(args, "profile", None))


def plan_profile_default(args: argparse.Namespace, verb: str) -> None:
    """args.profile := the profile the plan records (`tag.deploy.job.plan_profile`) when --profile is not given, so
    a plan is shown under the cost model it was made with; a recorded profile that is missing or changed is one
    warning line on stderr, and the roofline model is used."""
    import sys

    from tag.deploy.job import plan_profile

    if getattr(args, "profile", None) is not None or not getattr(args, "plan", None):
        return
    path, note = plan_profile(args.plan)
    if path is not None:
        args.profile = path
    elif note is not None:
        sys.stderr.write(f"tag {verb}: warning: {note}; using the roofline cost model (pass --profile)\n")


def deploy_options(args: argparse.Namespace) -> DeployOptions:
    """DeployOptions from `tag deploy`'s flags."""
    return DeployOptions(topology_path=args.topology, steps=args.steps, nproc=args.nproc, seed=args.seed,
                         threads=args.threads, warmup=args.warmup, timeout_s=args.timeout, optimizer=args.optimizer,
                         model=model_options(args), data=args.data, loss=args.loss, epochs=args.epochs, lr=args.lr,
                         checkpoint=args.checkpoint, export=args.export)


def _loading_bar():
    from tag.cli.util import progress

    return progress(total=LOAD_STAGES, desc="loading", unit="step")


def _stepper(bar):
    def on_step(stage: str) -> None:
        bar.set_description(stage)
        bar.update(1)

    return on_step


def load_verb_inputs(args: argparse.Namespace, plan_path: str | None = None) -> Inputs:
    """`load_inputs(args.model, args.topology, model_options(args), plan_path)` under a progress bar."""
    with _loading_bar() as bar:
        return load_inputs(args.model, args.topology, model_options(args), plan_path=plan_path, on_step=_stepper(bar))


def prepare_verb_job(args: argparse.Namespace) -> Job:
    """`prepare_job(args.plan, args.model, deploy_options(args))` under a progress bar."""
    with _loading_bar() as bar:
        return prepare_job(args.plan, args.model, deploy_options(args), on_step=_stepper(bar))
