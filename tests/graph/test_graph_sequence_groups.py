"""No sequence-typed value crosses op groups: the deploy runtime moves tensors between ranks, not lists.

A fused projection split by SplitToSequence and read by one SequenceAt per chunk, each chunk feeding its own
MatMul (as the dynamo exporter writes GPT-2's QKV split): coarsened at every group count, the split and all
its readers land in one group. Before the tie (tag.graph.coarsen.atoms_of) each SequenceAt joined the atom
of its own consumer, so at 4+ groups the sequence crossed groups.
"""

import numpy as np
from onnx import helper

from helpers_graph import F, I64, save, w
from tag.graph import load_model
from tag.graph.coarsen import atoms_of, coarsen
from tag.graph.sequences import SEQUENCE_PRODUCERS


def _split_model(tmp_path):
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["h"]),
             helper.make_node("SplitToSequence", ["h", "four"], ["seq"], axis=1)]
    outs = []
    for k in range(3):
        nodes += [helper.make_node("SequenceAt", ["seq", f"p{k}"], [f"c{k}"]),
                  helper.make_node("MatMul", [f"c{k}", f"w{k + 1}"], [f"m{k}"]),
                  helper.make_node("Relu", [f"m{k}"], [f"r{k}"])]
        outs.append(f"r{k}")
    nodes += [helper.make_node("Add", ["r0", "r1"], ["s01"]), helper.make_node("Add", ["s01", "r2"], ["y"])]
    inits = [("w0", w(12, 12)), ("four", np.array(4, np.int64))]
    inits += [(f"w{k + 1}", w(4, 8, seed=k + 1)) for k in range(3)]
    inits += [(f"p{k}", np.array(k, np.int64)) for k in range(3)]
    return save(tmp_path, nodes, [("x", F, ["B", 12])], [("y", F, ["B", 8])], inits)


def _crossing_sequences(graph, groups):
    where = {i: g for g, ops in enumerate(groups) for i in ops}
    bad = []
    for i, op in enumerate(graph.ops):
        if op.op_type not in SEQUENCE_PRODUCERS:
            continue
        for t in op.outputs:
            bad += [(t, graph.ops[c].name) for c in graph.tensors[t].consumers if where[c] != where[i]]
    return bad


def test_split_and_its_readers_share_one_atom(tmp_path):
    g = load_model(_split_model(tmp_path), batch_size=8)
    atom = atoms_of(g)
    idx = {op.op_type + (op.inputs[1] if op.op_type == "SequenceAt" else ""): i for i, op in enumerate(g.ops)}
    split = atom[idx["SplitToSequence"]]
    assert [atom[idx[f"SequenceAtp{k}"]] for k in range(3)] == [split] * 3
    # by hand: the split and its reads join the first chunk MatMul's atom; the other MatMuls keep their own
    assert len({atom[i] for i, op in enumerate(g.ops) if op.op_type == "MatMul"}) == 4


def test_no_sequence_crosses_groups_at_any_group_count(tmp_path):
    g = load_model(_split_model(tmp_path), batch_size=8)
    n_atoms = len(set(atoms_of(g)))
    for k in range(1, n_atoms + 1):
        gg = coarsen(g, k=k, n_devices=2)
        groups = [list(grp.op_ids) for grp in gg.groups]
        assert _crossing_sequences(g, groups) == [], k
