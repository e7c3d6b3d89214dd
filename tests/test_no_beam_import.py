"""`accounting` and the numpy mechanisms must work without Apache Beam: import them with Beam blocked."""
import subprocess
import sys


def _run_without_beam(imports: str) -> None:
    code = "import sys, importlib, pkgutil\nsys.modules['apache_beam'] = None\n" + imports + "print('ok')\n"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_accounting_imports_without_beam():
    _run_without_beam(
        "import accounting\n"
        "for m in pkgutil.walk_packages(accounting.__path__, 'accounting.'):\n"
        "    importlib.import_module(m.name)\n"
    )


def test_numpy_mechanisms_import_without_beam():
    """The mechanisms, their noise and the exact fixed-point arithmetic are usable from a notebook without Beam."""
    _run_without_beam("import pipelines.mechanisms, pipelines.noise, pipelines.fixedpoint\n")
