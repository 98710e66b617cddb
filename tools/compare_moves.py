"""Check that a module split is a pure move: every definition of the old modules is in the new ones, unchanged.

    python tools/compare_moves.py REV OLD.py [OLD.py ...] -- NEW.py [NEW.py ...]

Reads each OLD module as it was at git revision REV and each NEW module from the work tree, and compares syntax trees
(``ast.dump``): every top-level function, class and assignment of the old modules must appear with an identical tree in
one of the new modules. A class split into mixins passes when each of its methods and class-level statements appears
unchanged in some class of the new modules. Imports, ``__all__`` and docstrings are not compared (a move changes them).
Exits 1 and lists what is missing or changed otherwise.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator


def _units(tree: ast.Module) -> Iterator[ast.stmt]:
    """Top-level statements a move must keep: not imports, docstrings or ``__all__``."""
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            continue
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            continue
        yield node


def _label(node: ast.stmt) -> str:
    name = getattr(node, "name", None)
    return name if name else ast.unparse(node).splitlines()[0][:80]


def _class_members(node: ast.ClassDef) -> Iterator[ast.stmt]:
    for member in node.body:
        if isinstance(member, ast.Expr) and isinstance(member.value, ast.Constant):
            continue  # the class docstring
        yield member


def main(argv: list[str]) -> int:
    rev, rest = argv[0], argv[1:]
    split = rest.index("--")
    old_paths, new_paths = rest[:split], rest[split + 1:]
    new_top: set[str] = set()
    new_members: set[str] = set()
    for path in new_paths:
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
        for node in _units(tree):
            new_top.add(ast.dump(node))
            if isinstance(node, ast.ClassDef):
                new_members.update(ast.dump(member) for member in _class_members(node))
    missing: list[str] = []
    checked = 0
    for path in old_paths:
        source = subprocess.run(["git", "show", f"{rev}:{path}"], check=True, capture_output=True, text=True).stdout
        for node in _units(ast.parse(source)):
            checked += 1
            if ast.dump(node) in new_top:
                continue
            if isinstance(node, ast.ClassDef):
                lost = [m for m in _class_members(node) if ast.dump(m) not in new_members]
                missing.extend(f"{path}: {node.name}.{_label(m)}" for m in lost)
                continue
            missing.append(f"{path}: {_label(node)}")
    for item in missing:
        print("changed or missing:", item)
    print(f"{checked} top-level definitions compared, {len(missing)} changed or missing")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
