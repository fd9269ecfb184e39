"""What `pip install` of the package asks for: pyproject.toml's ranges admit Colab's preinstalled
versions (.ci/colab-runtime.txt) and the exact pins that make installs (requirements.txt), and a
regular install (not editable) carries every module of the source tree."""

import importlib.metadata
import json
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")

ROOT = Path(__file__).resolve().parents[1]
COLAB = ROOT / ".ci" / "colab-runtime.txt"
PINS = ROOT / "requirements.txt"


def pinned_versions(path):
    """{canonical name: version} of the `name==version` lines of a requirements or constraints file
    (a line with a range, such as `name<2`, pins nothing and is left out)."""
    versions = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        specs = list(Requirement(line).specifier) if line else []
        if len(specs) == 1 and specs[0].operator == "==":
            versions[canonicalize_name(Requirement(line).name)] = specs[0].version
    return versions


def declared_requirements():
    """The dependencies and every extra's requirements, less the extras that name tfattn itself."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    lines = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    return [req for req in map(Requirement, lines) if canonicalize_name(req.name) != "tfattn"]


def outside_their_range(versions):
    """(requirement, version) for each requirement whose package `versions` pins to a version it refuses."""
    return [(str(req), versions[name]) for req in declared_requirements()
            if (name := canonicalize_name(req.name)) in versions
            and not req.specifier.contains(versions[name], prereleases=True)]


def test_pyproject_admits_colab_versions():
    colab = pinned_versions(COLAB)
    assert {"tensorflow", "tensorflow-text", "keras", "numpy"} <= colab.keys()
    assert outside_their_range(colab) == []


def test_pyproject_admits_the_exact_pins_and_every_requirement_is_pinned():
    pins = pinned_versions(PINS)
    assert outside_their_range(pins) == []
    unpinned = {canonicalize_name(req.name) for req in declared_requirements()} - pins.keys()
    assert unpinned == set(), "requirements.txt should pin every package pyproject.toml asks for"


def test_requires_python_is_what_the_pins_and_ci_support():
    # requirements.txt's numpy 2.4 needs 3.11; CI runs 3.11 and Colab's 3.13 (make test-colab); the
    # README's install line says the same.
    from packaging.specifiers import SpecifierSet

    requires = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["requires-python"]
    assert [v for v in ("3.10", "3.11", "3.12", "3.13") if SpecifierSet(requires).contains(v)] == ["3.11", "3.12", "3.13"]
    assert "Python 3.11 or newer" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_version_check_refuses_a_version_outside_a_range():
    # The helpers above, on a case worked out by hand: 2.19.1 is below ">=2.20,<2.22", 2.21.0 inside.
    assert Requirement("tensorflow>=2.20,<2.22").specifier.contains("2.21.0")
    assert outside_their_range({"tensorflow": "2.19.1", "tensorflow-text": "2.21.1"}) == [
        ("tensorflow<2.22,>=2.20", "2.19.1")]


def test_a_regular_install_carries_every_module_of_the_source_tree():
    # The installed distribution, not the tfattn.egg-info that a build leaves in the source tree
    # (`python -m pytest` puts the working directory on sys.path).
    elsewhere = [p for p in sys.path if Path(p or ".").resolve() != ROOT]
    dist = next(iter(importlib.metadata.distributions(name="tfattn", path=elsewhere)), None)
    if dist is None:
        pytest.skip("tfattn is not installed in this environment")
    direct_url = json.loads(dist.read_text("direct_url.json") or "{}")
    if direct_url.get("dir_info", {}).get("editable"):
        pytest.skip("an editable install (make's .venv) imports the source tree itself")
    installed = {f.as_posix() for f in dist.files if f.suffix == ".py" and f.parts[0] == "tfattn"}
    source = {p.relative_to(ROOT).as_posix() for p in (ROOT / "tfattn").rglob("*.py")}
    assert sorted(source - installed) == [], "modules missing from the install (or it predates them)"
