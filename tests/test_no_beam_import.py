"""Import directions: `accounting` and the numpy mechanisms never import Beam; connectors never import pipelines;
every module imports through the one root, `dpstream`."""
import ast
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
LAYERS = ("accounting", "connectors", "pipelines")


def _run_without_beam(imports: str) -> None:
    code = "import sys, importlib, pkgutil\nsys.modules['apache_beam'] = None\n" + imports + "print('ok')\n"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_accounting_imports_without_beam():
    _run_without_beam(
        "import dpstream.accounting as accounting\n"
        "for m in pkgutil.walk_packages(accounting.__path__, 'dpstream.accounting.'):\n"
        "    importlib.import_module(m.name)\n"
    )


def test_numpy_mechanisms_import_without_beam():
    """The mechanisms, their noise and the exact fixed-point arithmetic are usable from a notebook without Beam."""
    _run_without_beam(
        "import dpstream.pipelines.mechanisms as mechanisms\n"
        "for m in pkgutil.walk_packages(mechanisms.__path__, 'dpstream.pipelines.mechanisms.'):\n"
        "    importlib.import_module(m.name)\n"
    )


def _imports(path: pathlib.Path) -> list[str]:
    """Every module a source file imports (absolute names)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def _sources(*folders: str) -> list[pathlib.Path]:
    return [path for folder in folders for path in sorted((ROOT / folder).rglob("*.py"))]


def test_connectors_never_import_pipelines():
    offenders = {str(p.relative_to(ROOT)): name for p in _sources("connectors") for name in _imports(p)
                 if name.startswith("dpstream.pipelines")}
    assert offenders == {}


def test_accounting_imports_neither_connectors_nor_pipelines():
    offenders = {str(p.relative_to(ROOT)): name for p in _sources("accounting") for name in _imports(p)
                 if name.startswith(("dpstream.pipelines", "dpstream.connectors"))}
    assert offenders == {}


def test_every_module_imports_through_the_dpstream_root():
    """No bare `import accounting` (or pipelines, connectors): those names belong to other projects on PyPI."""
    folders = LAYERS + ("tests", "benchmarks", "examples", "deploy")
    offenders = [(str(p.relative_to(ROOT)), name) for p in _sources(*folders) for name in _imports(p)
                 if name.split(".")[0] in LAYERS]
    assert offenders == []
