"""The documentation against the repo: the generated configuration page matches conf.json, and the
Python API reference covers every public name. Pure Python: no Spark, no import of sluice (its
modules are read with ast, as mkdocstrings reads them)."""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "python" / "sluice"
REFERENCE = ROOT / "docs" / "reference" / "python.md"
PUBLIC_MODULES = ["sluice", "sluice.suppress", "sluice.windowstore", "sluice.inspect", "sluice.input",
                  "sluice.stores", "sluice.testing"]


def _all(module: str) -> list[str]:
    rel = "__init__.py" if module == "sluice" else module.split(".", 1)[1] + ".py"
    tree = ast.parse((PACKAGE / rel).read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return list(ast.literal_eval(node.value))
    raise AssertionError(f"{module} has no __all__")


def _directives() -> set[str]:
    return set(re.findall(r"^:::\s*([\w.]+)", REFERENCE.read_text(encoding="utf-8"), re.MULTILINE))


def test_configuration_page_matches_conf_json() -> None:
    run = subprocess.run([sys.executable, str(ROOT / "dev" / "docs-conf"), "--check"], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_every_public_module_has_a_directive() -> None:
    missing = [m for m in PUBLIC_MODULES if m not in _directives()]
    assert not missing, f"docs/reference/python.md has no '::: <module>' for {missing}"


def test_public_modules_are_the_ones_documented() -> None:
    found = sorted("sluice." + p.stem for p in PACKAGE.glob("*.py") if not p.stem.startswith("_"))
    assert found == sorted(m for m in PUBLIC_MODULES if m != "sluice"), \
        f"public modules in python/sluice: {found}; update PUBLIC_MODULES and docs/reference/python.md"


def test_every_public_name_is_in_the_reference() -> None:
    """Each name of a public module's __all__ is a ':::' target of its own, or is named on the page
    under a directive of its module (which renders the module's __all__)."""
    text = REFERENCE.read_text(encoding="utf-8")
    targets = _directives()
    missing = []
    for module in PUBLIC_MODULES:
        for name in _all(module):
            own = f"{module}.{name}" in targets
            covered = module in targets and re.search(rf"\b{re.escape(name)}\b", text)
            if not (own or covered):
                missing.append(f"{module}.{name}")
    assert not missing, f"docs/reference/python.md does not cover {missing}"
