"""docs/plan.md § memory and precision: every memory and precision error the page shows is the message `tag simulate`
prints, word for word, and the documented keys read back into the strategy."""

from tag.strategy.planfile_read import parse_plan
from docs_fences import check_documented_mistakes, example_plan

PAGE = "plan.md"






def _one_device(p):
    p["decisions"][2].update(rows={"local/0": 128}, sync=None, zero=2)


def _pipelined_zero_2(p):
    from test_docs_plan_pipeline import _pipelined

    p.clear()
    p.update(_pipelined())
    p["decisions"][0]["zero"] = 2


MISTAKES = {
    "ZeRO above 1 in a pipelined plan": _pipelined_zero_2,
    "a ZeRO stage that is not 0-3": lambda p: p["decisions"][2].update(zero=4),
    "ZeRO on a group with one replica (one device)": _one_device,
    "`recompute` not a boolean": lambda p: p["decisions"][2].update(recompute=1),
    "an unknown precision": lambda p: p["training"].update(precision="amp"),
    "a precision a device lacks (fp16 on CPU ranks)": lambda p: p["training"].update(precision="fp16"),
}


def test_every_documented_memory_error_is_the_printed_message(tmp_path, monkeypatch, capsys):
    check_documented_mistakes(PAGE, "memory mistake", MISTAKES, tmp_path, monkeypatch, capsys)


def test_memory_keys_read_into_the_decisions():
    plan = example_plan(PAGE)
    plan["decisions"][0].update(zero=3, recompute=True)
    plan["training"]["precision"] = "bf16"
    strategy, meta = parse_plan(plan, "p.json")
    assert (strategy.decisions[0].zero, strategy.decisions[0].recompute) == (3, True)
    assert (strategy.decisions[1].zero, strategy.decisions[1].recompute) == (0, False)
    assert meta.training.precision == "bf16"
    for key in ("zero", "recompute"):
        del plan["decisions"][0][key]
    strategy, _ = parse_plan(plan, "p.json")
    assert (strategy.decisions[0].zero, strategy.decisions[0].recompute) == (0, False)
