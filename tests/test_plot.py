from __future__ import annotations

import struct

from typer.testing import CliRunner

from loaderbench.analysis import analyze
from loaderbench.cli import app
from loaderbench.model import Ceiling
from loaderbench.render.plot import plot_results
from loaderbench.results import ResultSet, save_results
from tests.helpers import result, settings, trial


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def sample_set():
    rs = ResultSet(
        config={"compute": {"kind": "sleep", "ms": 12}, "measure": {}},
        environment={"cuda_available": False, "usable_cpus": 2},
        results=[result(settings(nw), trial(max(0.0005, 0.032 / max(nw, 1) - 0.012) if nw else 0.032, 0.012))
                 for nw in (0, 1, 2, 4, 8)],
        ceilings={16: Ceiling(16, 1333.3, 0.012)},
        label="test",
    )
    analyze(rs)
    return rs


def test_plot_is_a_valid_png_of_the_expected_size(tmp_path):
    out = plot_results(sample_set(), tmp_path / "p.png")
    assert png_size(out) == (1000, 700)
    assert plot_results(sample_set(), tmp_path / "q.png", width_in=6, height_in=4, dpi=50) and png_size(
        tmp_path / "q.png") == (300, 200)


def test_plot_command(tmp_path):
    res_path = tmp_path / "r.json"
    rs = sample_set()
    rs.tool_version = "test"
    save_results(rs, res_path)
    r = CliRunner().invoke(app, ["plot", str(res_path)])
    assert r.exit_code == 0, r.output
    assert png_size(tmp_path / "r.png") == (1000, 700)
    bad = CliRunner().invoke(app, ["plot", str(res_path), "--output", str(tmp_path / "x.jpg")])
    assert bad.exit_code == 2 and "ending in .png" in bad.output
