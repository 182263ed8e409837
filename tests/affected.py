"""Which test modules a change can break: `make test-fast`'s selection (tests/phases.py --affected).

A change is the files git reports against a base (tests/phases.py picks it: the working tree
against HEAD, or HEAD's own commit when the tree is clean, or `--since REV`). A test module is
affected when it reaches a changed file through the project's imports, read statically with
`ast` and counted generously, since a test left out is a bug missed and one too many only costs
a few seconds:
- `import x` and `from x import y` (relative ones resolved), y counted as a module when it is one;
- a string that names a project module (`"ui.commands.run"` in the CLI's lazy table, a
  `pytest_plugins` entry, `"-m", "loadgen.sim"`), a package with a `__main__.py`
  (`"-m", "ui"`: a test that runs the CLI in a subprocess reaches it, and the commands it names,
  below), or a file beside the module (`st.Page("views/runs.py")`);
- a test module reaches every `conftest.py` above it, and of the modules a conftest loads as
  `pytest_plugins` those whose fixtures it asks for (by parameter name, `usefixtures`, or
  through another plugin's fixture), and those with a hook or an autouse fixture, which apply
  to every test.
The CLI's command table (`COMMANDS` in ui/cli.py) names every command's module, but a command
runs only when asked for by name: the path from a command's module up through ui/cli.py counts
only for the modules on the way up (the test or a helper it uses) that name that command as a
string (`"run"`), or import the table itself (a test over every command).
`tests/test_house.py` reads every module of the product (its import contracts and sizes) and
imports none: any change to a product module selects it.
A changed file that is not Python counts as a change to every module in its folder (or the
nearest folder up that has modules: a preset's TOML) and to every test that names the file
(README.md's exit-code table, docs/HOSTILE_INPUT.md); prose outside the packages changes
nothing else, but any other file there (pyproject.toml, the Makefile, deploy/, examples/) can
change anything, so it selects every test (`None`).
"""

from __future__ import annotations

import ast
import subprocess
from collections import Counter, defaultdict
from collections.abc import Iterable
from functools import cache
from itertools import pairwise
from pathlib import Path

PACKAGES = ("loadgen", "workers", "analysis", "ui", "tests", "bench")
PROSE = (".md", ".txt", ".rst", ".png", ".svg")  # outside the packages: read by tests, no code
PRODUCT = ("loadgen", "workers", "analysis", "ui")
HOUSE_TEST = "tests/test_house.py"  # the import contracts and module sizes of the whole product


def module_name(root: Path, path: Path) -> str:
    """`loadgen/engine/runner.py` -> `loadgen.engine.runner`; a package is its `__init__`."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules(root: Path) -> dict[str, Path]:
    """Every Python module of the project's packages, by dotted name."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            if ".venv" not in path.parts and "__pycache__" not in path.parts:
                found[module_name(root, path)] = path
    return found


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of `name` that is a project module (`a.b.func` -> `a.b`)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def _file_near(root: Path, path: Path, text: str) -> Path | None:
    """A file named by a string, in the module's folder or one above it within the project
    (`st.Page("views/runs.py")` beside ui/app.py; `parents[1] / "app.py"` from ui/commands)."""
    for folder in path.parents:
        if folder == root.parent or not folder.is_relative_to(root):
            return None
        candidate = folder / text
        if candidate.is_file() and candidate.is_relative_to(root):
            return candidate
    return None


@cache
def _parsed(path: Path, mtime_ns: int) -> tuple[frozenset[tuple[int, str]], frozenset[str]]:
    """A file's imports, as (level, dotted name) with `from a import b` giving both `a` and
    `a.b`, and its string constants; cached by modification time (one parse per file)."""
    imports: set[tuple[int, str]] = set()
    for node in ast.walk(_tree(path, mtime_ns)):
        if isinstance(node, ast.Import):
            imports.update((0, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            imports.add((node.level, base))
            imports.update(
                (node.level, f"{base}.{alias.name}" if base else alias.name) for alias in node.names
            )
    return frozenset(imports), frozenset(_strings(path, mtime_ns))


@cache
def _tree(path: Path, mtime_ns: int) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


@cache
def _strings(path: Path, mtime_ns: int) -> Counter[str]:
    """How often each string constant occurs in a file."""
    return Counter(
        node.value
        for node in ast.walk(_tree(path, mtime_ns))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    )


@cache
def _words(path: Path, mtime_ns: int) -> frozenset[str]:
    """The string constants of a file that are not only the module of a `-m` (`"-m", "ui"`
    names the package; the `ui` after it names the command)."""
    after_m: Counter[str] = Counter()
    for node in ast.walk(_tree(path, mtime_ns)):
        items = node.elts if isinstance(node, ast.List | ast.Tuple) else None
        if items is None and isinstance(node, ast.Call):
            items = node.args
        for flag, value in pairwise(items or ()):
            named = isinstance(value, ast.Constant) and isinstance(value.value, str)
            if named and isinstance(flag, ast.Constant) and flag.value == "-m":
                after_m[str(value.value)] += 1
    return frozenset(w for w, n in _strings(path, mtime_ns).items() if n > after_m[w])


def imports_of(root: Path, module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules `module` reaches directly (see the module's docstring)."""
    imports, strings = _parsed(path, path.stat().st_mtime_ns)
    here = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    named: set[str] = set()
    for level, name in imports:
        if level:
            anchor = here[: len(here) - level + 1]
            name = ".".join([*anchor, name] if name else anchor)
        named.add(name)
    for text in strings:
        if text.endswith(".py") and (beside := _file_near(root, path, text)) is not None:
            named.add(module_name(root, beside))
        elif f"{text}.__main__" in modules:
            named.add(f"{text}.__main__")
        elif "." in text and text.split(".")[0] in PACKAGES:
            named.add(text)
    reached = {r for r in (_resolve(n, modules) for n in named if n) if r is not None}
    for name in list(reached):  # importing a.b.c runs a/__init__ and a/b/__init__ too
        parts = name.split(".")
        reached.update(
            parent for i in range(1, len(parts)) if (parent := ".".join(parts[:i])) in modules
        )
    reached.discard(module)
    return reached


def _conftests_above(root: Path, path: Path, modules: dict[str, Path]) -> set[str]:
    found = set()
    for folder in path.relative_to(root).parents:
        name = module_name(root, root / folder / "conftest.py")
        if name in modules:
            found.add(name)
    return found


@cache
def _fixture_facts(path: Path, mtime_ns: int) -> tuple[frozenset[str], frozenset[str], bool]:
    """A module's fixtures (names), the names its code uses (arguments, names, strings: the
    fixtures it may request) and whether it applies to every test (a `pytest_*` hook or an
    autouse fixture)."""
    tree = _tree(path, mtime_ns)
    fixtures: set[str] = set()
    used: set[str] = set()
    everywhere = False
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            marks = " ".join(ast.unparse(d) for d in node.decorator_list)
            if "fixture" in marks:
                fixtures.add(node.name)
                everywhere |= "autouse=True" in marks
            everywhere |= node.name.startswith("pytest_")
        elif isinstance(node, ast.arg):
            used.add(node.arg)
        elif isinstance(node, ast.Name):
            used.add(node.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            used.add(node.value)
    return frozenset(fixtures), frozenset(used), everywhere


def _facts(path: Path) -> tuple[frozenset[str], frozenset[str], bool]:
    return _fixture_facts(path, path.stat().st_mtime_ns)


def _plugins_of(path: Path, modules: dict[str, Path]) -> list[str]:
    """The project modules a conftest loads through `pytest_plugins`."""
    for node in _tree(path, path.stat().st_mtime_ns).body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "pytest_plugins" for t in node.targets)
            and isinstance(node.value, ast.List | ast.Tuple)
        ):
            names = (e.value for e in node.value.elts if isinstance(e, ast.Constant))
            return [n for n in names if isinstance(n, str) and n in modules]
    return []


def _plugins_needed(used: frozenset[str], plugins: list[str], modules: dict[str, Path]) -> set[str]:
    """The plugin modules a test needs: those that apply to every test, and those whose
    fixtures it (or a fixture it needs, through any plugin) may request by name."""
    needed = {p for p in plugins if _facts(modules[p])[2]}
    names = set(used)
    grew = True
    while grew:
        grew = False
        for p in plugins:
            if p not in needed and _facts(modules[p])[0] & names:
                needed.add(p)
                grew = True
        for p in needed:
            if not _facts(modules[p])[1] <= names:
                names |= _facts(modules[p])[1]
                grew = True
    return needed


def dependents(modules: dict[str, Path], root: Path) -> dict[str, set[str]]:
    """For each module, the modules that reach it directly (the reversed graph); a module in
    `modules` whose file is gone (a deletion) is a name others may still import. A conftest's
    `pytest_plugins` count for a test only where it needs them (`_plugins_needed`): a plugin's
    fixtures serve the tests that ask for them."""
    reverse: dict[str, set[str]] = defaultdict(set)
    plugins_of = {
        name: _plugins_of(path, modules)
        for name, path in modules.items()
        if path.name == "conftest.py" and path.exists()
    }
    for name, path in modules.items():
        if not path.exists():
            continue
        reached = imports_of(root, name, path, modules) - set(plugins_of.get(name, ()))
        if path.name.startswith("test_"):
            above = _conftests_above(root, path, modules)
            reached |= above
            used = _facts(path)[1].union(*(_facts(modules[c])[1] for c in above))
            plugins = [p for c in sorted(above) for p in plugins_of.get(c, ())]
            reached |= _plugins_needed(used, plugins, modules)
        for target in reached:
            reverse[target].add(name)
    return reverse


def changed_modules(root: Path, files: Iterable[str], modules: dict[str, Path]) -> set[str] | None:
    """The modules a set of changed files stands for (the files' own, every module beside a
    changed data file, every test module that names a changed data file); None when one of
    them can change anything."""
    touched: set[str] = set()
    tests = {n: p for n, p in modules.items() if p.name.startswith("test_")}
    for rel in files:
        path = root / rel
        top = Path(rel).parts[0]
        if rel.endswith(".py") and top in PACKAGES:
            touched.add(module_name(root, path))  # kept even when deleted: its importers remain
            continue
        if top not in PACKAGES and not rel.endswith(PROSE):
            return None
        if top in PACKAGES:  # the modules of the nearest folder up that has any
            folder = path.parent
            while not (beside := {n for n, p in modules.items() if p.parent == folder}):
                folder = folder.parent
            touched.update(beside)
        touched.update(n for n, p in tests.items() if path.name in p.read_text(encoding="utf-8"))
    return touched


CLI = "ui.cli"  # the module whose COMMANDS table names each command's module by string


def command_table(root: Path) -> dict[str, frozenset[str]]:
    """Each command module of ui/cli.py's `COMMANDS` and the command names that load it."""
    path = root / "ui" / "cli.py"
    if not path.is_file():
        return {}
    names: dict[str, set[str]] = defaultdict(set)
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        value = getattr(node, "value", None)
        if not (isinstance(target, ast.Name) and target.id == "COMMANDS"):
            continue
        if isinstance(value, ast.Dict):
            for key, entry in zip(value.keys, value.values, strict=True):
                first = entry.elts[0] if isinstance(entry, ast.Tuple) and entry.elts else None
                if isinstance(key, ast.Constant) and isinstance(first, ast.Constant):
                    names[str(first.value)].add(str(key.value))
    return {module: frozenset(cmds) for module, cmds in names.items()}


def _names_command(path: Path, commands: frozenset[str]) -> bool:
    """Whether a module names one of `commands` as a string, or imports the table itself."""
    mtime = path.stat().st_mtime_ns
    imports = _parsed(path, mtime)[0]
    return bool(_words(path, mtime) & commands) or (0, f"{CLI}.COMMANDS") in imports


def affected_tests(root: Path, files: Iterable[str]) -> list[str] | None:
    """The test files (relative paths, sorted) that reach a changed file; None: every test."""
    files = list(files)
    modules = project_modules(root)
    start = changed_modules(root, files, modules)
    if start is None:
        return None
    gone = {m: root / f for f in files if f.endswith(".py") and (m := module_name(root, root / f))}
    modules.update({m: p for m, p in gone.items() if m not in modules and m in start})
    reverse = dependents(modules, root)
    table = command_table(root)
    direct = set()  # what ui/cli.py imports outright (not through its table)
    if CLI in modules and modules[CLI].exists():
        direct = {
            r
            for _, name in _parsed(modules[CLI], modules[CLI].stat().st_mtime_ns)[0]
            if (r := _resolve(name, modules)) is not None
        }
    # (module, the commands a path up from it still needs named; None: none)
    State = tuple[str, frozenset[str] | None]
    seen: set[State] = {(name, None) for name in start}
    todo = list(seen)
    while todo:
        name, needs = todo.pop()
        for importer in reverse.get(name, ()):
            wanted = needs
            if importer == CLI and name in table and name not in direct:
                wanted = table[name] if needs is None else needs
            path = modules.get(importer)
            # (the table itself names every command: that is not asking for one)
            if wanted is not None and importer != CLI and path is not None and path.exists():
                wanted = None if _names_command(path, wanted) else wanted
            state = (importer, wanted)
            if state not in seen:
                seen.add(state)
                todo.append(state)
    tests = {
        str(modules[name].relative_to(root))
        for name, needs in seen
        if needs is None
        and name in modules
        and modules[name].name.startswith("test_")
        and modules[name].exists()
    }
    house = root / HOUSE_TEST
    if house.exists() and any(f.endswith(".py") and f.split("/")[0] in PRODUCT for f in files):
        tests.add(HOUSE_TEST)  # it reads every module of the product, importing none
    return sorted(tests)


def _git(root: Path, *args: str) -> list[str] | None:
    proc = subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=False
    )
    return proc.stdout.splitlines() if proc.returncode == 0 else None


def changed_files(root: Path, since: str | None = None) -> tuple[list[str] | None, str]:
    """The files a change is made of, and what it was measured against: with `since`, every
    file that differs from that revision (committed or not) plus untracked ones; without, the
    working tree's changes against HEAD, or HEAD's own commit when the tree is clean. None
    when git cannot tell (not a checkout, no parent commit): then every test counts. An
    unknown `since` is a ValueError naming it."""
    untracked = _git(root, "ls-files", "--others", "--exclude-standard")
    if untracked is None:
        return None, "not a git checkout"
    if since is not None:
        diff = _git(root, "diff", "--name-only", since)
        if diff is None:
            raise ValueError(f"--since {since!r} is not a revision git knows here")
        return sorted(set(diff) | set(untracked)), f"changes since {since}"
    dirty = _git(root, "diff", "--name-only", "HEAD") or []
    if dirty or untracked:
        return sorted(set(dirty) | set(untracked)), "uncommitted changes"
    last = _git(root, "diff", "--name-only", "HEAD~1", "HEAD")
    return (None, "the first commit") if last is None else (last, "the last commit")
