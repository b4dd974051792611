from __future__ import annotations

from pathlib import Path

import pytest

from loaderbench.errors import ConfigError, UsageError
from loaderbench.model import ComputeSpec
from loaderbench.orchestration.config import build_config, parse_flag


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "c.toml"
    p.write_text(text)
    return p


def test_defaults_leave_machine_choices_open():
    cfg = build_config()
    assert cfg.grid["num_workers"] is None and cfg.grid["batch_size"] is None and cfg.compute is None
    assert cfg.dataset.kind == "synthetic"
    assert cfg.grid["pin_memory"] == (False, True)


def test_flags_override_toml_which_overrides_defaults(tmp_path):
    p = write(tmp_path, """
label = "mine"
[dataset]
kind = "tensor"
io_ms = 2
sample_shape = [3, 8, 8]
[compute]
step = "sleep:12"
[grid]
num_workers = "0,1,2"
batch_size = [16]
[measure]
batches = 7
""")
    cfg = build_config(p, {"grid": {"num_workers": (4,)}, "measure": {"min_time_s": 0.5}})
    assert cfg.label == "mine"
    assert cfg.dataset.kind == "tensor" and cfg.dataset.io_ms == 2.0
    assert cfg.dataset.sample_shape == (3, 8, 8)
    assert cfg.compute == ComputeSpec(kind="sleep", ms=12.0)
    assert cfg.grid["num_workers"] == (4,)
    assert cfg.grid["batch_size"] == (16,)
    assert cfg.measure.batches == 7 and cfg.measure.min_time_s == 0.5


@pytest.mark.parametrize(
    "text, message",
    [
        ("[grid]\nnum_worker = [1]\n", "unknown key 'grid.num_worker' (did you mean 'num_workers'?)"),
        ("[gird]\nnum_workers = [1]\n", "unknown key 'gird' (did you mean 'grid'?)"),
        ("[grid]\nnum_workers = [-1]\n", "grid.num_workers: expected an integer from 0 to 1024, got -1"),
        ("[grid]\nnum_workers = []\n", "grid.num_workers: expected a non-empty comma list"),
        ("[grid]\npin_memory = ['maybe']\n", "grid.pin_memory: expected on/off"),
        ("[measure]\nbatches = 'ten'\n", "measure.batches: expected an integer"),
        ("[measure]\nbatches = 1e12\n", "measure.batches: expected an integer from 1 to 1000000"),
        ("[compute]\nstep = 'gpu:5'\n", "compute.step: expected none, sleep:MS, spin:MS, model:NAME or step:MODULE:FACTORY"),
        ("[dataset]\nkind = 'folder'\n", "dataset 'folder' needs a path: --data PATH"),
        ("[grid\n", "not valid TOML"),
    ],
)
def test_bad_configs_name_file_key_and_allowed_values(tmp_path, text, message):
    p = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        build_config(p)
    assert str(p) in str(err.value)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        build_config(tmp_path / "nope.toml")


def test_flag_errors_name_the_flag():
    with pytest.raises(UsageError, match=r"^--num-workers: expected an integer from 0 to 1024, got 'x'"):
        parse_flag("grid", "num_workers", "0,x", "--num-workers")
    assert parse_flag("grid", "pin_memory", "off,on", "--pin-memory") == (False, True)
    assert parse_flag("measure", "tolerance", "5%", "--tolerance") == pytest.approx(0.05)


def test_data_path_implies_folder_and_import_kind(tmp_path):
    cfg = build_config(None, {"dataset": {"data": "/some/where"}})
    assert cfg.dataset.kind == "folder" and cfg.dataset.data_path == "/some/where"
    cfg = build_config(None, {"dataset": {"kind": "mymod:make"}})
    assert cfg.dataset.kind == "import" and cfg.dataset.factory == "mymod:make"
    with pytest.raises(ConfigError, match=r"--data \(dataset.data\) is for --dataset folder"):
        build_config(None, {"dataset": {"kind": "tensor", "data": "/x"}})


def test_shipped_configs_parse():
    root = Path(__file__).resolve().parents[1] / "configs"
    files = sorted(root.glob("*.toml"))
    assert {"quick.toml", "imagenet-resnet50.toml"} <= {f.name for f in files}
    for f in files:
        build_config(f)


def test_baseline_settings_flag():
    assert parse_flag("", "baseline_settings", "num_workers=4,pin_memory=off", "--baseline-settings") == {
        "num_workers": 4, "pin_memory": False}
    # A name that is not a grid axis may be a loader argument: the config checks it against them.
    wanted = parse_flag("", "baseline_settings", "workers=4", "--baseline-settings")
    with pytest.raises(ConfigError, match="--baseline-settings: unknown setting 'workers'"):
        build_config(None, {"": {"baseline_settings": wanted}})
    with pytest.raises(UsageError, match="--baseline-settings: unknown setting 'num-workers'"):
        parse_flag("", "baseline_settings", "num-workers=4", "--baseline-settings")


def test_max_batches_below_batches_is_refused():
    with pytest.raises(ConfigError, match="--max-batches 2 is below --batches 20"):
        build_config(None, {"measure": {"max_batches": 2, "batches": 20}})
