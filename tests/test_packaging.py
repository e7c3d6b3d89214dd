"""dpstream as a wheel: it installs beside the PyPI projects named accounting, pipelines and connectors (it owns only
the `dpstream` import root), all four import, and `dpstream demo` runs from the wheel in an empty directory (its
job file is package data). Builds the wheel and a fresh virtual environment: about two minutes, most of it pip."""
from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PEERS = ("accounting==1.0.0", "pipelines==0.0.14", "connectors==4.1")  # `pip install pipelines` fails on its pins


def _run(*command: str, cwd: Path) -> str:
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, f"{' '.join(command)}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


def test_wheel_installs_beside_the_name_clashing_projects_and_runs_the_demo(tmp_path):
    _run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(tmp_path / "dist"),
         str(ROOT), cwd=tmp_path)
    (wheel,) = (tmp_path / "dist").glob("dpstream-*.whl")
    venv.create(tmp_path / "env", with_pip=True)
    python = str(tmp_path / "env" / "bin" / "python")
    _run(python, "-m", "pip", "install", "--quiet", f"{wheel}[demo]", cwd=tmp_path)
    _run(python, "-m", "pip", "install", "--quiet", "--no-deps", *PEERS, cwd=tmp_path)

    empty = tmp_path / "empty"
    empty.mkdir()
    imports = ("import accounting, pipelines, connectors, dpstream.accounting, dpstream.pipelines, "
               "dpstream.connectors\nprint(accounting.__file__, pipelines.__file__, dpstream.pipelines.__file__)")
    owners = _run(python, "-c", imports, cwd=empty).split()
    site = str(tmp_path / "env")
    assert all(path.startswith(site) for path in owners)  # every module from the venv, none from the repository
    assert "/dpstream/" not in owners[0] and "/dpstream/" not in owners[1] and "/dpstream/pipelines/" in owners[2]

    printed = _run(str(tmp_path / "env" / "bin" / "dpstream"), "demo", cwd=empty)
    assert "admitted: release" in printed and "report: " in printed
    demo = empty / "dpstream-demo"
    assert sorted(p.name for p in demo.glob("*.parquet")) == [
        "busiest_day.parquet", "daily_departures.parquet", "daily_top5.parquet", "delay_alerts.parquet"]
    assert (demo / "report.md").is_file() and (demo / "chart.png").stat().st_size > 0
