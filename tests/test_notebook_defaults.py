"""The quick defaults have one home, the notebook (issue 39.4): where a notebook passes one of its
parameters to a driver's entry point, the entry point's default for that argument equals the
notebook's value (tuples and lists alike), so that calling a driver with its defaults runs the
chapter's quick profile. Read with ``ast`` and ``inspect``: the notebook's cell tagged
``parameters`` and its calls of the drivers' public functions."""
from __future__ import annotations

import ast
import importlib
import inspect
import json
import pkgutil
from pathlib import Path

import attnsvm.experiments as drivers

ROOT = Path(__file__).resolve().parents[1]


def entry_points():
    """``{name: function}`` of the public functions of every driver module."""
    out = {}
    for m in pkgutil.iter_modules(drivers.__path__):
        mod = importlib.import_module(f"{drivers.__name__}.{m.name}")
        for name in getattr(mod, "__all__", []):
            if inspect.isfunction(getattr(mod, name)):
                out[name] = getattr(mod, name)
    return out


def _plain(v):
    return [_plain(x) for x in v] if isinstance(v, (list, tuple)) else v


def notebook_parts(path):
    """``(parameters, code)``: the literal values of the parameters cell, the other code cells."""
    params, code = {}, []
    for cell in json.loads(Path(path).read_text())["cells"]:
        if cell["cell_type"] != "code":
            continue
        src = "".join(cell["source"])
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            for node in ast.parse(src).body:
                if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
                    params[node.targets[0].id] = ast.literal_eval(node.value)
        else:
            code.append("\n".join(line for line in src.splitlines()
                                  if not line.lstrip().startswith(("%", "!"))))
    return params, "\n".join(code)


def default_mismatches(params, code, functions):
    """``(shared, mismatches)``: the arguments of the calls of ``functions`` in ``code`` that a
    parameter of the notebook fills, by name, and those whose default is not the parameter's value."""
    shared, bad = 0, []
    for node in ast.walk(ast.parse(code)):
        if not isinstance(node, ast.Call):
            continue
        name = ast.unparse(node.func).split(".")[-1]
        if name not in functions:
            continue
        sig = inspect.signature(functions[name])
        args = [a.id if isinstance(a, ast.Name) else None for a in node.args]
        kws = {k.arg: k.value.id if isinstance(k.value, ast.Name) else None for k in node.keywords if k.arg}
        for arg, given in sig.bind_partial(*args, **kws).arguments.items():
            default = sig.parameters[arg].default
            if given not in params or default is inspect.Parameter.empty:
                continue
            shared += 1
            if _plain(default) != _plain(params[given]):
                bad.append(f"{name}({arg}={default!r}) but the notebook has {given} = {params[given]!r}")
    return shared, bad


def test_drivers_default_to_their_notebooks_quick_values():
    functions, shared, bad = entry_points(), 0, {}
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        n, wrong = default_mismatches(*notebook_parts(nb), functions)
        shared += n
        if wrong:
            bad[nb.name] = wrong
    assert shared >= 150, f"only {shared} notebook parameters reach a driver's defaulted argument"
    assert not bad, f"drivers' defaults that are not their notebooks' quick values: {bad}"


def test_a_planted_default_mismatch_is_found():
    """A default that differs from the notebook's value is found (a list equal to a tuple is not);
    an argument the notebook does not fill from a parameter is not compared."""
    def toy_experiment(n, *, steps=100, ds=(2, 4), device="cpu", lr=0.1):
        pass

    params = {"n": 3, "steps": 200, "ds": [2, 4], "device": "auto", "lr": 0.5}
    code = "r = drv.toy_experiment(n, steps=steps, ds=ds, device=device, lr=2 * lr)\nprint(steps)\n"
    shared, bad = default_mismatches(params, code, {"toy_experiment": toy_experiment})
    assert shared == 3
    assert bad == ["toy_experiment(steps=100) but the notebook has steps = 200",
                   "toy_experiment(device='cpu') but the notebook has device = 'auto'"]
