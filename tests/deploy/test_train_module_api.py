"""Must show 2: the user's own nn.Module trained through `tag.runtime` on 3 gloo ranks with uneven rows
(9 / 2 / 5 of a global batch of 16, two machines) gives the per-step losses and final weights of plain
single-process training; `train_onnx` on the exported model gives the same losses; a CNN module with
BatchNorm2d and Dropout gives plain torch's losses, weights and running statistics on the whole batch (dropout
masks by the documented rule). One launch of 3 ranks.
Also: a module whose parameter names do not match the plan's model is an InputError naming the parameter."""

from __future__ import annotations

import datetime
import json
import os
import warnings

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

from tag.cli import main
from tag.deploy.rank_exit import exit_rank

B, N, STEPS, LR, SEED = 16, 70, 12, 0.01, 5  # 70 rows: 4 steps per epoch, 6 rows dropped per epoch
TOPO = {"version": 1, "name": "two_machines", "machines": [
    {"name": "m0", "devices": [{"type": "cpu", "count": 2}], "nic_bandwidth_gbps": 10},
    {"name": "m1", "devices": [{"type": "cpu", "count": 1}], "nic_bandwidth_gbps": 10}]}


def _module():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32), torch.nn.ReLU(),
                               torch.nn.Linear(32, 5))


def _cnn():
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1, bias=False), torch.nn.BatchNorm2d(4),
                               torch.nn.ReLU(), torch.nn.Dropout(0.25), torch.nn.Flatten(), torch.nn.Linear(64, 5))


class _RefDropout(torch.nn.Module):
    """The documented rule on the whole batch: keep u >= p, u from a generator seeded dropout_seed(seed, step, 0)."""

    def __init__(self):
        super().__init__()
        self.step = 0

    def forward(self, x):
        from tag.deploy.onnx_torch.ops_nn import dropout_seed

        u = torch.rand(tuple(x.shape), generator=torch.Generator().manual_seed(dropout_seed(SEED, self.step, 0)))
        return x * (u >= 0.25).float() / 0.75


def _cnn_reference():
    x, y = _data()
    x = x[:, :16].reshape(N, 1, 4, 4)
    model = _cnn()
    drop = _RefDropout()
    model[3] = drop
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    losses = []
    for s in range(STEPS):
        epoch, k = divmod(s, N // B)
        idx = torch.from_numpy(np.random.default_rng([SEED, epoch]).permutation(N)[k * B:(k + 1) * B])
        drop.step = s
        opt.zero_grad()
        loss = F.cross_entropy(model(x[idx]), y[idx])
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return losses, state


def _data():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((N, 20)).astype(np.float32)
    y = (x[:, :5].argmax(1)).astype(np.int64)
    return torch.from_numpy(x), torch.from_numpy(y)


def _reference():
    x, y = _data()
    model = _module()
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    losses = []
    for s in range(STEPS):
        epoch, k = divmod(s, N // B)
        idx = torch.from_numpy(np.random.default_rng([SEED, epoch]).permutation(N)[k * B:(k + 1) * B])
        opt.zero_grad()
        loss = F.cross_entropy(model(x[idx]), y[idx])
        loss.backward()
        opt.step()
        losses.append(float(loss))
    return losses, {k: v.detach().clone() for k, v in model.named_parameters()}


def _rank(rank, world, port, plan, model_path, out):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    try:
        import tag.runtime as tr

        rp = tr.load_plan(plan, model_path)
        x, y = _data()
        module = _module()
        trainer = tr.ModuleTrainer(rp, module, torch.optim.Adam(module.parameters(), lr=LR), loss="cross_entropy")
        sampler = rp.sampler(N, seed=SEED, steps=STEPS)
        rows = [len(idx) for idx in sampler]
        losses = [trainer.step(x[idx], y[idx]) for idx in sampler]
        res = tr.train_onnx(rp, (x.numpy(), y.numpy()), loss="cross_entropy", steps=STEPS, lr=LR, optimizer="adam",
                            seed=SEED)
        cnn_plan = tr.load_plan(plan.replace("plan.json", "cnn_plan.json"), model_path.replace("m.onnx", "cnn.onnx"))
        cnn = _cnn()
        x4 = x[:, :16].reshape(N, 1, 4, 4)
        cnn_trainer = tr.ModuleTrainer(cnn_plan, cnn, torch.optim.Adam(cnn.parameters(), lr=LR), "cross_entropy",
                                       seed=SEED)
        cnn_losses = [cnn_trainer.step(x4[idx], y[idx]) for idx in cnn_plan.sampler(N, seed=SEED, steps=STEPS)]
        torch.save({"losses": losses, "rows": rows, "params": dict(module.named_parameters()),
                    "onnx_losses": res.losses, "cnn_losses": cnn_losses,
                    "cnn_state": {k: v.detach().clone() for k, v in cnn.state_dict().items()}},
                   os.path.join(out, f"r{rank}.pt"))
    finally:
        dist.destroy_process_group()
    exit_rank()  # success: skip the C++ teardown that can abort (tag.deploy.rank_exit)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("module_api")
    model_path, plan, topo = str(d / "m.onnx"), str(d / "plan.json"), str(d / "topo.json")
    torch.onnx.export(_module().eval(), (torch.zeros(2, 20),), model_path, input_names=["x"], output_names=["logits"],
                      dynamic_shapes=({0: torch.export.Dim("batch")},), external_data=False, verbose=False)
    open(topo, "w").write(json.dumps(TOPO))
    assert main(["plan", model_path, topo, "--baseline", "dp-even", "--batch-size", str(B), "-o", plan]) == 0
    raw = json.load(open(plan))
    for dec in raw["decisions"]:
        dec["rows"] = {"m0/0": 9, "m0/1": 2, "m1/0": 5}
    json.dump(raw, open(plan, "w"))
    cnn_path, cnn_plan = str(d / "cnn.onnx"), str(d / "cnn_plan.json")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(_cnn().eval(), (torch.zeros(2, 1, 4, 4),), cnn_path, input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "b"}, "y": {0: "b"}}, do_constant_folding=False, dynamo=False)
    assert main(["plan", cnn_path, topo, "--baseline", "dp-even", "--batch-size", str(B), "-o", cnn_plan]) == 0
    raw = json.load(open(cnn_plan))
    for dec in raw["decisions"]:
        dec["rows"] = {"m0/0": 9, "m0/1": 2, "m1/0": 5}
    json.dump(raw, open(cnn_plan, "w"))
    return d, model_path, plan


def test_module_and_onnx_training_through_the_api_match_one_process(files):
    from tests.deploy._deploy_harness import free_port

    d, model_path, plan = files
    mp.spawn(_rank, args=(3, free_port(), plan, model_path, str(d)), nprocs=3, join=True)
    res = [torch.load(os.path.join(d, f"r{r}.pt"), weights_only=False) for r in range(3)]
    ref_losses, ref_params = _reference()
    assert [r["rows"] for r in res] == [[9] * STEPS, [2] * STEPS, [5] * STEPS]
    for r in res:
        assert np.allclose(r["losses"], ref_losses, rtol=0, atol=1e-5)
        assert np.allclose(r["onnx_losses"], ref_losses, rtol=0, atol=1e-5)
        for name, value in ref_params.items():
            assert torch.allclose(r["params"][name], value, atol=1e-5), name
    cnn_losses, cnn_state = _cnn_reference()
    assert "1.running_var" in cnn_state and not torch.allclose(cnn_state["1.running_var"], torch.ones(4))
    for r in res:
        assert np.allclose(r["cnn_losses"], cnn_losses, rtol=0, atol=1e-5)
        for name, value in cnn_state.items():
            assert torch.allclose(r["cnn_state"][name].to(value.dtype), value, atol=1e-5), name


def test_a_module_parameter_the_plan_does_not_have_is_named(files):
    from tag.errors import InputError
    from tag.graph import load_model
    from tag.runtime import match_parameters

    _, model_path, _ = files
    graph = load_model(model_path, batch_size=B)
    assert sorted(match_parameters(_module(), graph, model_path)) == sorted(n for n, _ in _module().named_parameters())
    other = torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 5), torch.nn.Linear(5, 5))
    with pytest.raises(InputError, match="parameter '5.weight'"):
        match_parameters(other, graph, model_path)
    wide = torch.nn.Sequential(torch.nn.Linear(20, 33), torch.nn.Tanh(), torch.nn.Linear(33, 32), torch.nn.ReLU(),
                               torch.nn.Linear(32, 5))
    with pytest.raises(InputError, match=r"parameter '0.weight': expected shape \(32, 20\)"):
        match_parameters(wide, graph, model_path)
