"""The public names of the package."""

import importlib

import tfattn


def test_every_public_name_resolves_to_what_its_module_defines():
    for name in tfattn.__all__:
        module = importlib.import_module(f"tfattn.{tfattn._EXPORTS[name]}")
        assert getattr(tfattn, name) is getattr(module, name), name


def test_export_stays_the_function_after_its_module_is_imported():
    import tfattn.serving.translator  # noqa: F401  (a submodule named like a public function would shadow it)

    assert tfattn.export is tfattn.serving.translator.export and callable(tfattn.export)
