"""The public API: every re-exported name resolves to the submodule's object."""
import importlib

import pytest

import attnsvm


@pytest.mark.parametrize("name", attnsvm.__all__)
def test_reexported_names_resolve_to_their_module(name):
    mod = next(m for m, names in attnsvm._EXPORTS.items() if name in names)
    assert getattr(attnsvm, name) is getattr(importlib.import_module(f"attnsvm.{mod}"), name)


def test_every_submodule_imports_and_lists_its_public_names():
    for sub in attnsvm._SUBMODULES:
        mod = getattr(attnsvm, sub)
        for name in getattr(mod, "__all__", []):
            assert hasattr(mod, name), f"attnsvm.{sub}.__all__ names missing {name!r}"


def test_unknown_attribute_is_a_clear_error():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        attnsvm.nope
