"""The house's shape: imports without circles or upward arrows, modules a reader takes in at
once, the product apart from the lab, and the top level the design names."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Product code, as importable names: tuner/ ships as mcr.tuner.
PACKAGES = {"mcr": ROOT / "mcr", "mcr.tuner": ROOT / "tuner", "benchmarks": ROOT / "benchmarks"}
MAX_LINES = 400
LAB_LOG = ("NOTES" + ".md", "lab" + "/notes")   # spelled apart: this file names them
# Each layer may import its own and the layers before it, never one after it.
LAYERS = [
    ("foundation", ("mcr", "mcr.units", "mcr.errors", "mcr.config", "mcr.layout", "mcr.ops",
                    "mcr.spans", "mcr.streams", "mcr.threads", "mcr.waits", "mcr.work",
                    "mcr.groups", "mcr.topology", "mcr.tables", "mcr.table_file", "mcr.launch",
                    "mcr.logger", "mcr.bypass", "mcr.nans", "mcr.imports")),
    ("backends", ("mcr.backends",)),
    ("process", ("mcr.dispatcher", "mcr.runtime", "mcr.checks", "mcr.report", "mcr.session",
                 "mcr.route", "mcr.info", "mcr.ds_names", "mcr.signature", "mcr.stall",
                 "mcr.board", "mcr.guard")),
    ("api", ("mcr.collectives", "mcr.alltoall", "mcr.p2p", "mcr.hier", "mcr.compiled",
             "mcr.comm")),
    ("adapters", ("mcr.integrations", "mcr.measure")),
    ("tools", ("mcr.tuner", "benchmarks")),
]


def modules() -> dict[str, Path]:
    """Every product module by its import name."""
    out = {}
    for pkg, where in PACKAGES.items():
        for p in where.rglob("*.py"):
            parts = p.relative_to(where).with_suffix("").parts
            parts = parts[:-1] if parts[-1] == "__init__" else parts
            out[".".join((pkg, *parts))] = p
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The product modules `name` imports, at its top or inside functions."""
    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = pkg.split(".")[:len(pkg.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            subs = {f"{base}.{a.name}" for a in node.names} & known.keys()
            out |= subs or ({base} & known.keys())
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names} & known.keys()
    out.discard(name)
    return out


def graph() -> dict[str, set[str]]:
    """name -> the product modules it imports."""
    known = modules()
    return {m: imports(m, p, known) for m, p in known.items()}


def layer(name: str) -> int:
    """The index of the layer name belongs to (its longest matching prefix)."""
    best, depth = -1, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (name == p or name.startswith(p + ".") and p != "mcr") and len(p) > depth:
                best, depth = i, len(p)
    return best


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))
    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def test_no_import_circles():
    assert cycles(graph()) == []


def test_a_circle_is_found():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(g) == [["a", "b", "c"]]


def test_no_import_runs_up_a_layer():
    g = graph()
    unplaced = [m for m in g if layer(m) < 0]
    assert not unplaced, f"modules in no layer of LAYERS: {unplaced}"
    up = [f"{m} ({LAYERS[layer(m)][0]}) -> {d} ({LAYERS[layer(d)][0]})"
          for m, deps in sorted(g.items()) for d in sorted(deps) if layer(d) > layer(m)]
    assert not up, "imports that run up a layer:\n" + "\n".join(up)


def test_modules_are_short():
    """Product modules and test modules (the workers the tests launch are scripts)."""
    files = [*modules().values(), *(ROOT / "tests").glob("*.py")]
    long = {str(p.relative_to(ROOT)): n for p in files
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_product_keeps_out_of_the_lab():
    bad = []
    for where in (*PACKAGES.values(), ROOT / "tests", ROOT / "examples"):
        for p in where.rglob("*.py"):
            text = p.read_text()
            tree = ast.parse(text)
            names = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
            names += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
            if any(n == "lab" or n.startswith("lab.") for n in names):
                bad.append(f"{p.relative_to(ROOT)} imports the lab")
            if any(w in text for w in LAB_LOG):
                bad.append(f"{p.relative_to(ROOT)} sends its reader to the lab's log")
    assert not bad, "\n".join(bad)


def test_top_level_is_as_designed():
    """What the repository holds at its top (tracked files; outputs such as results/, build/
    and .venv/ are ignored and do not count)."""
    import subprocess
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    have = {f.split("/")[0] for f in tracked if not f.startswith(".")}
    want = {"mcr", "tuning_tables", "tuner", "benchmarks", "tests", "docs", "examples", "lab",
            "pyproject.toml", "setup.py", "README.md", "LICENSE", "run.sh"}
    assert want <= have, f"missing at the top: {sorted(want - have)}"
    assert have <= want, f"at the top but not in the design: {sorted(have - want)}"


def test_a_checkout_finds_its_tables_and_tuner_past_leftovers(tmp_path):
    """In a checkout, mcr.tuner and the shipped tables come from the top-level folders, also
    where a pull from the old layout left mcr/tuning_tables/ and mcr/tuner/ behind (untracked
    files keep them): found there, every GPU job ran on defaults."""
    import shutil
    import subprocess
    import sys
    for name in ("mcr", "tuner", "tuning_tables"):
        shutil.copytree(ROOT / name, tmp_path / name,
                        ignore=shutil.ignore_patterns("__pycache__", "*.png", "*.csv"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    for stale in ("mcr/tuning_tables", "mcr/tuner/__pycache__"):
        (tmp_path / stale).mkdir(parents=True)
        (tmp_path / stale / "left.png").write_bytes(b"")
    code = ("import mcr.runtime as r, mcr.tuner.cli as c; "
            "print(r.TABLES_DIR); print(c.__file__); print(len(list(r.TABLES_DIR.glob('*.yaml'))))")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin"},
                         check=True).stdout.split()
    assert out[0] == str(tmp_path / "tuning_tables")
    assert out[1] == str(tmp_path / "tuner" / "cli.py")
    assert int(out[2]) >= 2


def test_the_quick_tier_names_tests_that_exist():
    """Every test conftest.QUICK_TESTS names is defined (a renamed test would drop out of the
    quick tier without a word)."""
    from conftest import QUICK_MODULES, QUICK_TESTS
    for name in QUICK_MODULES:
        assert (ROOT / "tests" / f"{name}.py").is_file(), name
    for nodeid in QUICK_TESTS:
        file, _, func = nodeid.partition("::")
        tree = ast.parse((ROOT / "tests" / file).read_text())
        names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        assert func.split("[")[0] in names, f"QUICK_TESTS names {nodeid}, which is not a test"
