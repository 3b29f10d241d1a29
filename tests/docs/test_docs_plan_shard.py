"""docs/plan.md § shards: every shard error the page shows is the message `tag simulate` prints, word for word, and
the documented examples read into the Shard they describe (positions, replicas, shares) and write back equal."""

import json

from tag.strategy.planfile_read import parse_plan
from tag.strategy.planfile_shard import shard_to_json
from tag.strategy.shard import Shard
from docs_fences import check_documented_mistakes, example_plan, fences

PAGE = "plan.md"
ALL = ("local/0", "local/1", "local/2", "local/3")






def _shard(rows: dict, **shard):
    def edit(p):
        p["decisions"][0].update(rows=rows, shard=shard)
    return edit


def _zero_one_replica(p):
    _shard({d: 128 for d in ALL}, split="column", ratios={d: 0.25 for d in ALL})(p)
    p["decisions"][0]["zero"] = 1


def _split_of_relu(p):
    p["decisions"][1].update(rows={d: 128 for d in ALL}, shard={"split": "row", "ratios": {d: 0.25 for d in ALL}})


def _sfb_in_shard(p):
    _shard({d: 128 for d in ALL}, split="column", ratios={d: 0.25 for d in ALL})(p)
    p["decisions"][0]["sfb"] = ["node_linear"]


TWO_BY_TWO = [["local/0", "local/1"], ["local/2", "local/3"]]
MISTAKES = {
    "an unknown split": _shard({d: 128 for d in ALL}, split="diagonal", ratios={d: 0.25 for d in ALL}),
    "a shard on one device": _shard({"local/0": 128}, split="column", ratios={"local/0": 1.0}),
    "a replica whose devices have different rows": _shard({"local/0": 32, "local/1": 96}, split="row",
                                                          ratios={"local/0": 0.5, "local/1": 0.5}),
    "replicas of different sizes": _shard({d: 64 for d in ALL}, split="column",
                                          replicas=[["local/0", "local/1", "local/2"], ["local/3"]],
                                          ratios={d: 0.25 for d in ALL}),
    "rows counted per device, not per replica": _shard({d: 32 for d in ALL}, split="column",
                                                       ratios={d: 0.25 for d in ALL}),
    "shares not summing to 1": _shard({d: 128 for d in ALL}, split="column",
                                      ratios={"local/0": 0.3, "local/1": 0.2, "local/2": 0.2, "local/3": 0.2}),
    "shares that differ between replicas": _shard({d: 64 for d in ALL}, split="column", replicas=TWO_BY_TWO,
                                                  ratios={"local/0": 0.25, "local/1": 0.75, "local/2": 0.5,
                                                          "local/3": 0.5}),
    "ZeRO on a sharded group with one replica": _zero_one_replica,
    "a split the group's ops do not allow": _split_of_relu,
    "sufficient factors (`sfb`) in a sharded group": _sfb_in_shard,
}


def test_every_documented_shard_error_is_the_printed_message(tmp_path, monkeypatch, capsys):
    check_documented_mistakes(PAGE, "shard mistake", MISTAKES, tmp_path, monkeypatch, capsys)


def _documented_shards() -> list[dict]:
    """The page's two shard examples (the jsonc block whose entries start with "shard"), device ids as on cpu4."""
    block = next(text for _, text in fences(PAGE, "jsonc") if '"split": "column"' in text)
    entries = ['"shard"' + part for part in block.split('"shard"')[1:]]
    rename = {"m0/0": "local/0", "m0/1": "local/1", "m1/0": "local/2", "m1/1": "local/3"}
    out = []
    for entry in entries:
        text = entry.strip()
        for a, b in rename.items():
            text = text.replace(a, b)
        out.append(json.loads("{" + text + "}")["shard"])
    return out


def test_documented_shards_read_as_described_and_write_back():
    first, second = _documented_shards()
    plan = example_plan(PAGE)
    plan["decisions"][0].update(rows={"local/0": 128, "local/1": 128}, shard=first)
    strategy, _ = parse_plan(plan, "p.json")
    assert strategy.decisions[0].shard == Shard("column", ((0, 1),), (0.75, 0.25))
    assert strategy.decisions[0].batch_rows == (128, 0, 0, 0)
    assert not strategy.decisions[0].replicated  # one replica: no gradient sum
    plan["decisions"][0].update(rows={d: 64 for d in ALL}, shard=second)
    strategy, _ = parse_plan(plan, "p.json")
    sh = strategy.decisions[0].shard
    assert sh == Shard("heads", ((0, 1), (2, 3)), (0.5, 0.5))
    assert sh.peers(3) == (1, 3) and strategy.decisions[0].replicated
    assert strategy.decisions[0].batch_rows == (64, 0, 64, 0)
    assert shard_to_json(sh, list(ALL)) == {"shard": second}
