"""Functions stay short: none in `src/agent_run` is over 60 lines (AGENTS.md, "simple and
legible"), counted with `ast` from its `def` to its last line, decorators and docstring in."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "agent_run"
LIMIT = 60


def long_functions(source: str, limit: int = LIMIT) -> list[tuple[str, int]]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > limit:
                found.append((node.name, length))
    return found


def test_no_function_is_over_60_lines():
    found = sorted(
        f"{path.relative_to(PACKAGE)}: {name} ({length} lines)"
        for path in PACKAGE.rglob("*.py")
        for name, length in long_functions(path.read_text())
    )
    assert found == [], "split them (a helper per step)"


def test_the_counter_counts_nested_and_async_functions():
    body = "\n".join(f"    x{i} = {i}" for i in range(61))
    source = f"async def outer():\n    def inner():\n{body.replace('    ', '        ')}\n"
    assert long_functions(source) == [("outer", 63), ("inner", 62)]
    assert long_functions("def short():\n    return 1\n") == []
