"""Build the tag model zoo: export every model of datasets/zoo to datasets/models/<name>.onnx.

    python datasets/build.py                 # every model, then README.md
    python datasets/build.py mlp bert_tiny   # only these (README.md is rewritten from the files present)
    python datasets/build.py --list

Prints one row per exported model: parameters (float graph inputs that are not data plus float
initializers, shared tensors once), file size and export seconds.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from zoo import MODELS  # noqa: E402

MODELS_DIR = os.path.join(HERE, "models")
FLOAT_ELEM_TYPES = (1, 10, 11, 16)  # FLOAT, FLOAT16, DOUBLE, BFLOAT16


def count_params(model, data_inputs) -> int:
    """Elements of float graph inputs not named in data_inputs plus float initializers (each name once)."""
    seen, total = set(), 0
    for value in model.graph.input:
        tensor_type = value.type.tensor_type
        if value.name in data_inputs or value.name in seen or tensor_type.elem_type not in FLOAT_ELEM_TYPES:
            continue
        seen.add(value.name)
        n = 1
        for dim in tensor_type.shape.dim:
            n *= dim.dim_value
        total += n
    for init in model.graph.initializer:
        if init.data_type in FLOAT_ELEM_TYPES and init.name not in seen:
            seen.add(init.name)
            n = 1
            for d in init.dims:
                n *= d
            total += n
    return total


def _shape_text(spec_input) -> str:
    dims = ["batch"] + [str(d) for d in spec_input.shape[1:]]
    text = f"`{spec_input.name}` {spec_input.dtype} [{', '.join(dims)}]"
    return text + (f" in [0, {spec_input.high})" if spec_input.dtype == "int64" else "")


def write_readme() -> str:
    """Rewrite datasets/models/README.md: one line per committed model; returns its path."""
    import onnx

    lines = ["# tag model zoo", "",
             "Regenerate with `python datasets/build.py` (builders in `datasets/zoo/`, plain torch, dynamo ONNX "
             "exporter, opset 20, `optimize=False`, symbolic batch dim `batch` on axis 0 of every data input).",
             "`weights: inputs` = built on the meta device, float weights are graph inputs without values "
             "(deploy initialises them, seeded); `weights: initializers` = real weights from `torch.manual_seed(0)`. "
             "Params = float graph inputs that are not data + float initializers (includes BatchNorm running "
             "statistics; tied weights once).", ""]
    for name, spec in MODELS.items():
        path = os.path.join(MODELS_DIR, f"{name}.onnx")
        if not os.path.exists(path):
            continue
        model = onnx.load(path, load_external_data=False)
        params = count_params(model, {i.name for i in spec.inputs})
        inputs = ", ".join(_shape_text(i) for i in spec.inputs)
        weights = "inputs" if spec.weights_as_inputs else "initializers"
        lines.append(f"- `{name}.onnx`: {params:,} params; inputs {inputs}; weights: {weights}; "
                     f"{spec.description} (`zoo.{spec.build.__module__.split('.')[-1]}.{spec.build.__name__}`).")
    readme = os.path.join(MODELS_DIR, "README.md")
    with open(readme, "w") as f:
        f.write("\n".join(lines) + "\n")
    return readme


def main(argv=None) -> int:
    """Export the named (default: all) zoo models and print a table; returns the exit code."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help="models to build (default: all)")
    parser.add_argument("--list", action="store_true", help="print the model names and exit")
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(MODELS))
        return 0
    unknown = [n for n in args.names if n not in MODELS]
    if unknown:
        print(f"build.py: unknown model(s) {', '.join(unknown)}; known: {', '.join(MODELS)}", file=sys.stderr)
        return 2
    import logging

    import onnx

    from zoo.export import export_spec

    warnings.filterwarnings("ignore")
    logging.getLogger("torch").setLevel(logging.ERROR)
    os.makedirs(MODELS_DIR, exist_ok=True)
    print(f"{'model':<18} {'params':>13} {'file MB':>8} {'export s':>9}")
    for name in args.names or list(MODELS):
        spec = MODELS[name]
        model, seconds = export_spec(spec)
        onnx.checker.check_model(model)
        path = os.path.join(MODELS_DIR, f"{name}.onnx")
        onnx.save(model, path)
        params = count_params(model, {i.name for i in spec.inputs})
        print(f"{name:<18} {params:>13,} {os.path.getsize(path) / 1e6:>8.2f} {seconds:>9.1f}", flush=True)
    write_readme()
    return 0


if __name__ == "__main__":
    sys.exit(main())
