"""TorchProgram: an ONNX model executed op by op with torch, for any subset of ops and any row count.

Build time: nodes are put in the stable topological order (equal to ``OpGraph.ops``), attributes decoded,
constant subgraphs folded (Constant nodes, weight generators such as ConstantOfShape on a constant shape),
parameters made ``nn.Parameter`` (initializer or generated values; a seeded fresh initialisation for weights
stored as graph inputs), the other constants kept as buffers. Run time: ``run_ops`` executes any list of nodes
on the tensors at hand; constants that encode the file's batch are rewritten for the rows being run.
"""

from __future__ import annotations

import re
from typing import Sequence

import onnx
import torch

from tag.deploy.onnx_torch import ops_math, ops_nn, ops_rnn, ops_sequence, ops_shape  # noqa: F401  (fill the table)
from tag.deploy.onnx_torch.build import (consumer_map, default_data_inputs, default_param_names, fresh_parameter,
                                         input_shape, stable_topological_order)
from tag.deploy.onnx_torch.ops_nn import Unsupported
from tag.deploy.onnx_torch.registry import CONVERTERS, NodeSpec, as_tuple, decode_attrs, tensor_from_proto
from tag.errors import InputError
from tag.graph.sequences import SEQUENCE_PRODUCERS

_GENERATORS = {"ConstantOfShape", "Constant", "RandomNormal", "RandomUniform"}
# random ops stay live; sequence values are lists, which are no buffers (their readers then run live too)
_NOT_FOLDED = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli",
               "Multinomial"} | SEQUENCE_PRODUCERS


def _sanitize(name: str, taken: set[str], prefix: str) -> str:
    """A unique attribute-safe key for ONNX tensor ``name`` (the prefix avoids clashes with Module attributes)."""
    key = prefix + re.sub(r"[^0-9A-Za-z_]", "_", name)
    base, n = key, 1
    while key in taken:
        key, n = f"{base}_{n}", n + 1
    taken.add(key)
    return key


def rewrite_batch_constant(value: torch.Tensor, index: int, file_batch: int, rows: int) -> torch.Tensor:
    """A batch-encoding constant for ``rows`` rows: element ``index`` becomes value // file_batch * rows."""
    out = value.clone()
    flat = out.view(-1)
    flat[index] = int(flat[index].item()) // max(file_batch, 1) * rows
    return out


class TorchProgram(torch.nn.Module):
    """An ONNX model as a torch module whose nodes can be run in any subset, on any row count.

    model: the ONNX model; graph: its OpGraph (node order, input roles, batch constants) or None to derive
    them from the file; seed: seeds the fresh initialisation of weights that have no value in the file;
    param_names / batch_constants / file_batch / data_inputs override what the graph says.
    """

    def __init__(self, model: onnx.ModelProto, graph=None, *, seed: int = 0, param_names: list[str] | None = None,
                 batch_constants=None, file_batch: int = 1, data_inputs: list[str] | None = None,
                 model_path: str | None = None):
        super().__init__()
        if model.functions:
            model = onnx.inliner.inline_local_functions(model)
        self.path = model_path or (graph.path if graph is not None else "<model>")
        self.file_batch = graph.file_batch if graph is not None and file_batch == 1 else file_batch
        opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
        protos = self._ordered_nodes(model, graph)
        self.nodes: list[NodeSpec] = []
        for i, n in enumerate(protos):
            self.nodes.append(self._node_spec(i, n, opset))
        if data_inputs is None:
            data_inputs = list(graph.data_inputs) if graph is not None else default_data_inputs(model, self.file_batch)
        self.data_inputs = list(data_inputs)
        infer_params = param_names is None and graph is None
        if param_names is None:
            param_names = list(graph.param_names) if graph is not None else default_param_names(model, self.data_inputs)
        if batch_constants is None:
            batch_constants = list(graph.batch_constants) if graph is not None else []
        self.batch_constants = list(batch_constants)
        self.outputs = [o.name for o in model.graph.output]
        self._batch_axis = {}
        if graph is not None:
            self._batch_axis = {n: graph.tensors[n].batch_axis for n in self.data_inputs if n in graph.tensors}

        values = {t.name: tensor_from_proto(t) for t in model.graph.initializer}
        params = set(param_names)
        generated = self._fold(values, params, infer_params)
        order = list(param_names) + [g for g in generated if g not in set(param_names)]
        consumers = consumer_map(protos)
        taken: set[str] = set()
        self.params = torch.nn.ParameterDict()
        self._param_key: dict[str, str] = {}
        for name in order:
            if name in self._param_key:
                continue
            if name in values:
                value = values.pop(name)
            else:
                shape = graph.tensors[name].shape if graph is not None and name in graph.tensors else None
                shape = shape if shape is not None else input_shape(model, name)
                if shape is None:
                    raise InputError(self.path, f"input '{name}'", "a static shape for a weight stored as a graph input",
                                     "a symbolic shape")
                value = fresh_parameter(model, name, tuple(shape), seed, consumers, protos)
            key = _sanitize(name, taken, "p_")
            self._param_key[name] = key
            self.params[key] = torch.nn.Parameter(value.float() if not value.dtype.is_floating_point else value)
        self.param_names = list(self._param_key)
        self.constants = torch.nn.Module()
        self._const_key: dict[str, str] = {}
        for name, value in values.items():
            key = _sanitize(name, taken, "c_")
            self._const_key[name] = key
            self.constants.register_buffer(key, value, persistent=False)
        self._batch_cache: dict[tuple, dict[str, torch.Tensor]] = {}

    # ---- build helpers -------------------------------------------------------------------------------
    def _ordered_nodes(self, model, graph) -> list[onnx.NodeProto]:
        if graph is None:
            return [model.graph.node[i] for i in stable_topological_order(model, self.path)]
        by_outputs = {tuple(n.output): n for n in model.graph.node}
        out = []
        for op in graph.ops:
            n = by_outputs.get(tuple(op.outputs))
            if n is None:
                raise InputError(self.path, f"node '{op.name}' ({op.op_type})", "an op of the OpGraph present in the model",
                                 "no node with these outputs")
            out.append(n)
        if len(out) != len(model.graph.node):
            raise InputError(self.path, "graph.node", f"{len(out)} nodes as in the OpGraph", str(len(model.graph.node)))
        return out

    def _node_spec(self, i: int, n: onnx.NodeProto, opset: int) -> NodeSpec:
        fn = CONVERTERS.get(n.op_type) if n.domain in ("", "ai.onnx") else None
        if fn is None:
            found = n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}"
            raise InputError(self.path, f"node '{n.name}' ({n.op_type})", "an op type the converter supports",
                             f"{found} (see docs/converter-coverage.md)")
        return NodeSpec(i, n.name, n.op_type, n.domain, list(n.input), list(n.output), decode_attrs(n), opset, fn)

    def _fold(self, values: dict, params: set, infer_params: bool) -> list[str]:
        """Evaluate nodes whose inputs are all constants (not parameters, not batch constants) into ``values``.

        A node reading a parameter is folded only if all its outputs are parameters (a weight generator
        chain). Without an OpGraph, float outputs of generator chains become parameters; returns their names.
        """
        batch = {c.tensor for c in self.batch_constants}
        from_generator: set[str] = set()
        generated: list[str] = []
        self._folded = [False] * len(self.nodes)
        for node in self.nodes:
            ins = [x for x in node.inputs if x]
            if node.op_type in _NOT_FOLDED or any(x not in values or x in batch for x in ins):
                continue
            outs = [o for o in node.outputs if o]
            if any(x in params for x in ins) and not all(o in params for o in outs):
                continue
            try:
                res = as_tuple(node.fn(node, [values[x] if x else None for x in node.inputs]))
            except Unsupported as e:
                raise self._unsupported(node, e) from None
            self._folded[node.index] = True
            gen = node.op_type in _GENERATORS and node.op_type != "Constant" or any(x in from_generator for x in ins)
            for o, t in zip(node.outputs, res):
                if not o:
                    continue
                values[o] = t.detach()
                if gen and t.dtype.is_floating_point:
                    from_generator.add(o)
        if infer_params:
            consumers = {x for n in self.nodes if not self._folded[n.index] for x in n.inputs}
            for name in sorted(from_generator, key=lambda s: s):
                if name in consumers:
                    params.add(name)
                    generated.append(name)
        return generated

    def _unsupported(self, node: NodeSpec, e: Exception) -> InputError:
        return InputError(self.path, f"node '{node.name}' ({node.op_type})", "an op the converter supports", str(e))

    # ---- access --------------------------------------------------------------------------------------
    def param(self, name: str) -> torch.nn.Parameter:
        """The parameter for ONNX tensor ``name``."""
        return self.params[self._param_key[name]]

    def constant(self, name: str, rows: int | None = None) -> torch.Tensor:
        """The constant ONNX tensor ``name``, rewritten for ``rows`` rows if it encodes the file's batch."""
        if rows is not None and self.batch_constants:
            table = self._batch_table(rows)
            if name in table:
                return table[name]
        return self.constants._buffers[self._const_key[name]]

    def _batch_table(self, rows: int) -> dict[str, torch.Tensor]:
        key = (rows, str(next(iter(self.constants.buffers()), torch.empty(0)).device))
        table = self._batch_cache.get(key)
        if table is None:
            table = {}
            for c in self.batch_constants:
                base = table.get(c.tensor, self.constants._buffers[self._const_key[c.tensor]])
                table[c.tensor] = rewrite_batch_constant(base, c.index, self.file_batch, rows)
            self._batch_cache[key] = table
        return table

    # ---- execution -----------------------------------------------------------------------------------
    def run_ops(self, op_ids: Sequence[int], env: dict[str, torch.Tensor], rows: int) -> dict[str, torch.Tensor]:
        """Execute nodes ``op_ids`` (indices into the topological node order = OpGraph.ops) on ``env``.

        env holds every activation / data tensor the nodes read (parameters and constants are looked up
        here; batch constants are rewritten for ``rows`` and take precedence over copies in env). Returns a
        new dict: env plus the nodes' outputs (for nodes folded at build time, their constant or parameter).
        """
        out = dict(env)
        table = self._batch_table(rows) if self.batch_constants else {}
        for i in op_ids:
            node = self.nodes[i]
            if self._folded[i]:  # evaluated at build time: expose its outputs like any other node's
                for o in node.outputs:
                    if o:
                        out[o] = table[o] if o in table else self._lookup_static(o)
                continue
            ins = []
            for name in node.inputs:
                if not name:
                    ins.append(None)
                elif name in table:  # batch constants: always this call's rows, even if env holds another copy
                    ins.append(table[name])
                elif name in out:
                    ins.append(out[name])
                elif name in self._param_key:
                    ins.append(self.params[self._param_key[name]])
                elif name in self._const_key:
                    ins.append(self.constants._buffers[self._const_key[name]])
                else:
                    raise KeyError(f"node {i} '{node.name}' ({node.op_type}) reads '{name}', which is not in env")
            try:
                res = as_tuple(node.fn(node, ins))
            except Unsupported as e:
                raise self._unsupported(node, e) from None
            except Exception as e:
                e.add_note(f"while running node {i} '{node.name}' ({node.op_type})")
                raise
            for o, t in zip(node.outputs, res):
                if o:
                    out[o] = t
        return out

    def forward(self, *inputs: torch.Tensor, **named: torch.Tensor):
        """Run the whole model: inputs in ``data_inputs`` order (or by name); returns the graph outputs
        (one tensor, or a tuple when the graph has several)."""
        env = dict(zip(self.data_inputs, inputs))
        env.update(named)
        first = self.data_inputs[0]
        rows = env[first].shape[self._batch_axis.get(first) or 0] if env[first].dim() else 1
        env = self.run_ops(range(len(self.nodes)), env, rows)
        outs = tuple(env[o] if o in env else self._lookup_static(o) for o in self.outputs)
        return outs[0] if len(outs) == 1 else outs

    def _lookup_static(self, name: str) -> torch.Tensor:
        if name in self._param_key:
            return self.param(name)
        return self.constant(name)
