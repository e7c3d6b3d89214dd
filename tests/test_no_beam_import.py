"""`accounting` must work without Apache Beam: import every module with Beam blocked."""
import importlib
import pkgutil
import subprocess
import sys


def test_accounting_imports_without_beam():
    code = (
        "import sys, importlib, pkgutil\n"
        "sys.modules['apache_beam'] = None\n"
        "import accounting\n"
        "for m in pkgutil.walk_packages(accounting.__path__, 'accounting.'):\n"
        "    importlib.import_module(m.name)\n"
        "print('ok')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
