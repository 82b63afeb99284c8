"""One spelling per concept in the public signatures (issue 17, item 8): a token choice is
``alpha`` (``opt`` only for the optimal tokens), a number of draws is ``trials``, the query model
is ``cross: bool`` and a step rule is passed as ``optimizer=``. An old keyword raises a
``TypeError`` that names the new one; it is never accepted silently."""
import importlib
import inspect
import pkgutil

import numpy as np
import pytest

import attnsvm
from attnsvm._checks import renamed

#: old parameter names and the spelling that replaces them
OLD = {"instances": "trials", "query": "cross", "sel": "alpha", "rule": "optimizer"}
#: (module, function) whose parameter keeps an old name on purpose: in ``optim`` a rule is the
#: object of the registry itself
KEEP = {("attnsvm.optim", "rule")}


def _public_functions():
    for info in pkgutil.walk_packages(attnsvm.__path__, "attnsvm."):
        mod = importlib.import_module(info.name)
        for name in getattr(mod, "__all__", []):
            obj = getattr(mod, name, None)
            if inspect.isfunction(obj) and obj.__module__ == mod.__name__:
                yield mod.__name__, name, obj
            elif inspect.isclass(obj) and obj.__module__ == mod.__name__:
                for meth, f in vars(obj).items():
                    if inspect.isfunction(f) and not meth.startswith("_"):
                        yield mod.__name__, f"{name}.{meth}", f


def test_public_signatures_use_one_spelling():
    bad = []
    for mod, name, fn in _public_functions():
        for p in inspect.signature(fn).parameters:
            if p in OLD and (mod, p) not in KEEP:
                bad.append(f"{mod}.{name}({p}=...): spell it {OLD[p]}")
    assert not bad, "\n".join(bad)


def test_the_signature_check_sees_an_old_spelling(monkeypatch):
    def f(X, sel):
        return X
    f.__module__ = "attnsvm.tokens"
    monkeypatch.setattr(attnsvm.tokens, "__all__", attnsvm.tokens.__all__ + ["f"])
    monkeypatch.setattr(attnsvm.tokens, "f", f, raising=False)
    with pytest.raises(AssertionError, match=r"attnsvm.tokens.f\(sel=...\): spell it alpha"):
        test_public_signatures_use_one_spelling()


def test_renamed_names_the_new_keyword():
    @renamed(rule="optimizer")
    def g(*, optimizer):
        return optimizer
    assert g(optimizer="gd") == "gd"
    with pytest.raises(TypeError, match=r"g\(\) takes optimizer=, not rule="):
        g(rule="gd")


@pytest.mark.parametrize("call, new", [
    (lambda: attnsvm.svm.att_svm(np.zeros((1, 2, 2)), np.zeros((1, 2)), opt=np.zeros(1, int)), "alpha="),
    (lambda: attnsvm.svm.att_svm_batch(np.zeros((1, 1, 2, 2)), np.zeros((1, 1, 2)),
                                       opt=np.zeros((1, 1), int)), "alpha="),
    (lambda: attnsvm.svm.p_svm(np.zeros((1, 2, 2)), opt=np.zeros(1, int)), "alpha="),
    (lambda: attnsvm.data.keyed_instance(2, 3, 4, seed=0, query="cross"), "cross="),
    (lambda: attnsvm.data.keyed_trials(2, 3, 4, 2, seed=0, query="self"), "cross="),
    (lambda: attnsvm.experiments.feasibility.feasibility_sweep([2], [3], [4], instances=2), "trials="),
    (lambda: attnsvm.experiments.feasibility.feasibility_study([2], 3, 2, [3], [4], instances=2, n_rank=2,
                                                               T_rank=3, ds_rank=[4], trials_rank=1), "trials="),
    (lambda: attnsvm.data.sized_trials(2, 3, 4, query="cross"), "cross="),
    (lambda: attnsvm.experiments.convergence.local_experiment(query="cross"), "cross="),
    (lambda: attnsvm.experiments.convergence.overparam_sweep(query="cross"), "cross="),
    (lambda: attnsvm.experiments.regpath.regpath_study(2, 3, 4, R=[1.0], instances=2), "trials="),
    (lambda: attnsvm.svm.att_margin_gap(None, None, None, W_svm=None, sel=None), "alpha="),
])
def test_an_old_keyword_raises_a_type_error_naming_the_new_one(call, new):
    with pytest.raises(TypeError, match=new):
        call()


def test_cross_must_be_a_bool():
    with pytest.raises(ValueError, match="cross"):
        attnsvm.data.keyed_instance(2, 3, 4, seed=0, cross="cross")
    a = attnsvm.data.keyed_instance(2, 3, 4, seed=(1, 2), cross=True)
    b = attnsvm.data.random_unit(2, 3, 4, cross=True, seed=np.random.SeedSequence([1, 2]))
    np.testing.assert_array_equal(a.Z, b.Z)


def _parameter_names(path):
    """The names assigned in a notebook's ``parameters`` cell."""
    import ast
    import json
    nb = json.loads(path.read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] == "code" and "parameters" in cell.get("metadata", {}).get("tags", []):
            tree = ast.parse("".join(cell["source"]))
            return [t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
                    if isinstance(t, ast.Name)]
    return []


def _old_spellings(names):
    return [f"{p}: spell it {OLD[p.split('_')[0]]}" for p in names
            if p in OLD or (p.split("_")[0] in OLD and "_" in p)]


def test_notebook_parameters_use_one_spelling():
    """The parameters cells spell a number of draws ``trials`` (``trials_feas``, not
    ``instances_feas``), as the signatures do."""
    from pathlib import Path
    root = Path(__file__).resolve().parents[1] / "notebooks"
    bad = [f"{p.name}: {m}" for p in sorted(root.glob("*.ipynb")) for m in _old_spellings(_parameter_names(p))]
    assert not bad, "\n".join(bad)
    assert _old_spellings(["n", "instances_rank", "trials", "rule"]) == [
        "instances_rank: spell it trials", "rule: spell it optimizer"]
