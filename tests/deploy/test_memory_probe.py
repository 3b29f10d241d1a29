"""tag.deploy.memory_probe: live tensor bytes counted by hand on small autograd programs."""

import torch

from tag.deploy.memory_probe import LiveTensorBytes


def test_linear_forward_backward_bytes_by_hand():
    w = torch.randn(100, 50, requires_grad=True)  # 20,000 B
    x = torch.randn(64, 100)  # 25,600 B
    with LiveTensorBytes() as m:
        m.register([w, x])
        y = x @ w  # + 12,800 B (saved: x and w, already counted)
        loss = y.sum()  # + a 4-byte scalar
        loss.backward()  # dY: ones of 4 B expanded (a view); dW = x^T dY: + 20,000 B, kept as w.grad
        del y, loss
    scalars = 4 * 2
    assert 20_000 + 25_600 + 12_800 + 20_000 <= m.peak_bytes <= 20_000 + 25_600 + 12_800 + 20_000 + scalars
    assert m.live_bytes == 20_000 + 25_600 + 20_000  # y and the scalars freed, the gradient kept


def test_views_and_in_place_ops_allocate_nothing():
    a = torch.zeros(256)
    with LiveTensorBytes() as m:
        m.register([a])
        a.add_(1)
        v = a.view(16, 16).t()
        v.mul_(2)
    assert m.peak_bytes == m.live_bytes == 1024


def test_storage_resized_in_place_counts_its_new_size():
    w = torch.ones(1000)
    with LiveTensorBytes() as m:
        m.register([w])
        w.untyped_storage().resize_(0)  # as ZeRO-3 frees a gathered weight
        assert m.live_bytes == 0
        w.untyped_storage().resize_(4000)
    assert m.live_bytes == m.peak_bytes == 4000


def test_runtime_state_counts_zero_stage1_kept_gradient_buffers():
    """A ZeRO stage-1 unit's kept flat gradient buffer is persistent state between steps (its parameters' .grad are
    None then, and it is in no bucket): the probe's starting bytes must hold it, or stage 1 reads a gradient short."""
    from types import SimpleNamespace

    import torch

    from tag.deploy.memory_probe import runtime_state_tensors

    w = torch.nn.Parameter(torch.zeros(10))
    kept = torch.zeros(10)
    rt = SimpleNamespace(my_params=["w"], p=SimpleNamespace(param=lambda n: w), optimizer=None, grad_buckets=[],
                         zero=SimpleNamespace(units=[SimpleNamespace(grad_kept=kept), SimpleNamespace(grad_kept=None)]))
    got = runtime_state_tensors(rt)
    assert any(t is kept for t in got) and any(t is w for t in got) and len(got) == 2
