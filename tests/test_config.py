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


# --- sweep-level options: one declaration each -----------------------------------------------

# Each sweep-level option, a value other than its default as a flag and a TOML would give it,
# and that value parsed (hand-written: the test's own expectation, not read from the registry).
SWEEP_LEVEL = {
    "repeats": ("--repeats", "5", 5, 5),
    "search": ("--search", "grid", "grid", "grid"),
    "isolation": ("--isolation", "process", "process", "process"),
    "time_budget_s": ("--time-budget", "30", 30, 30.0),
    "config_timeout_s": ("--config-timeout", "15", 15, 15.0),
    "tolerance": ("--tolerance", "10%", "10%", 0.10),
    "cache": ("--cache", "cold", "cold", "cold"),
    "drop_caches": ("--drop-caches", None, True, True),
    "profile": ("--no-profile", None, False, False),
}
# The defaults as `loaderbench sweep --help` states them, and as SweepConfig holds them.
SWEEP_DEFAULTS = {"repeats": 3, "search": "auto", "isolation": "warm", "time_budget_s": 120.0,
                  "config_timeout_s": 600.0, "tolerance": 0.05, "cache": "as-is", "drop_caches": False, "profile": True}
HELP_DEFAULTS = {"repeats": "(default 3)", "search": "auto: measure where", "isolation": "warm: one measuring",
                 "time_budget_s": "(default 120)", "config_timeout_s": "(default 600)", "tolerance": "(default 5%)",
                 "cache": "(default as-is)", "drop_caches": "drop all caches", "profile": "(taken by default"}
PACKAGE = Path(__file__).resolve().parents[1] / "loaderbench"


def test_every_sweep_level_option_comes_from_its_one_declaration(tmp_path):
    import dataclasses

    import typer.main

    from loaderbench.cli import app
    from loaderbench.orchestration import api
    from loaderbench.orchestration.config import SWEEP_OPTIONS, SweepConfig, option

    assert [o.key for o in SWEEP_OPTIONS] == list(SWEEP_LEVEL)
    fields = {f.name: f for f in dataclasses.fields(SweepConfig)}
    flags = {p.name: p.opts for p in typer.main.get_command(app).commands["sweep"].params}
    api_options = api._options()
    default = build_config()
    toml = "[measure]\n" + "".join(f"{k} = {v[2]!r}\n".replace("True", "true").replace("False", "false")
                                    for k, v in SWEEP_LEVEL.items())
    from_file = build_config(write(tmp_path, toml))
    for o in SWEEP_OPTIONS:
        flag, raw, toml_value, parsed = SWEEP_LEVEL[o.key]
        assert option("measure", o.key) is o  # the TOML key [measure] <key>
        assert o.default == SWEEP_DEFAULTS[o.key] and type(o.default) is type(SWEEP_DEFAULTS[o.key])
        # the SweepConfig field: same name, the declaration's default and type
        assert fields[o.key].default == o.default and fields[o.key].type == type(o.default).__name__
        assert getattr(default, o.key) == o.default and default.to_dict()["measure"][o.key] == o.default
        # the flag, its help with the default in it
        assert flag in flags[o.flag_name[2:].replace("-", "_")] and o.flag_name == flag
        assert HELP_DEFAULTS[o.key] in o.help
        # the TOML key, the flag's parser, the Python keyword
        assert getattr(from_file, o.key) == pytest.approx(parsed)
        # a bare flag: on, or off for one that turns its option off (--no-profile)
        bare = "off" if o.negates else "on"
        assert parse_flag("measure", o.key, raw if raw is not None else bare, flag) == pytest.approx(parsed)
        assert api_options[o.key] is o
        cfg, _ = api.build_api_config("synthetic", {o.key: toml_value})
        assert getattr(cfg, o.key) == pytest.approx(parsed)
        # to_dict / from_dict: the value round-trips; a file written before the key existed reads the default
        saved = from_file.to_dict()
        assert saved["measure"][o.key] == pytest.approx(parsed)
        assert getattr(SweepConfig.from_dict(saved), o.key) == pytest.approx(parsed)
        del saved["measure"][o.key]
        assert getattr(SweepConfig.from_dict(saved), o.key) == o.default


def test_every_sweep_level_flag_reaches_the_sweep(monkeypatch):
    """`loaderbench sweep --flag value` for every sweep-level option lands in the SweepConfig the
    sweep runs."""
    from typer.testing import CliRunner

    from loaderbench.cli import app
    from loaderbench.orchestration import execute

    seen = []

    class Stop(Exception):
        pass

    def fake_execute(cfg, **kw):
        seen.append(cfg)
        raise Stop

    monkeypatch.setattr(execute, "execute_sweep", fake_execute)
    args = [a for flag, raw, _, _ in SWEEP_LEVEL.values() for a in (flag, raw) if a is not None]
    res = CliRunner().invoke(app, ["sweep", *args, "--no-progress"])
    assert isinstance(res.exception, Stop), res.output
    (cfg,) = seen
    assert {k: getattr(cfg, k) for k in SWEEP_LEVEL} == pytest.approx({k: v[3] for k, v in SWEEP_LEVEL.items()})


def test_sweep_level_defaults_are_written_once():
    """No module of the layers that hold a sweep's config (orchestration/, cli/, inloop/, the
    model layer at the root) binds a sweep-level key to its default literal
    (`time_budget_s: float = 120.0`, `"repeats": 3`, `cache="as-is"`): the declaration in config.py
    is the only place a default is written, and the command and the Python API name no
    sweep-level key themselves. (storage/ functions take `drop_caches` as their own opt-in
    keyword, off unless asked.)"""
    import ast
    import io
    import re
    import tokenize

    from loaderbench.orchestration.config import SWEEP_OPTIONS

    sources = {p: p.read_text() for p in sorted(PACKAGE.rglob("*.py"))
               if p.parent == PACKAGE or p.parent.name in ("orchestration", "cli", "inloop")}
    # Another meaning of the same word: a row's page-cache state (ConfigResult.cache, "as-is" in a
    # file written before it existed), and the one state of a row the search adds (it runs only then).
    other_meaning = {"cache": {"model.py", "orchestration/run.py"}}
    for o in SWEEP_OPTIONS:
        literal = (rf"[\"']{re.escape(o.default)}[\"']" if isinstance(o.default, str)
                   else re.escape(repr(o.default)).replace(r"\.0", r"(\.0)?"))
        binds = re.compile(rf"\b{o.key}\b[\"']?\s*(:\s*\w+\s*)?[:=]\s*{literal}(?![\w.])")
        hits = [f"{p.relative_to(PACKAGE)}:{n}" for p, text in sources.items()
                for n, line in enumerate(text.splitlines(), 1) if binds.search(line)
                and str(p.relative_to(PACKAGE)) not in other_meaning.get(o.key, ())]
        assert hits == [], f"{o.key} bound to its default {o.default!r} outside its declaration: {hits}"
    config_py = sources[PACKAGE / "orchestration" / "config.py"]
    calls = [n for n in ast.walk(ast.parse(config_py))
             if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "_sweep_option"]
    assert sorted(ast.literal_eval(c.args[0]) for c in calls) == sorted(SWEEP_LEVEL)
    numbers = [float(t.string.replace("_", "")) for t in tokenize.generate_tokens(io.StringIO(config_py).readline)
               if t.type == tokenize.NUMBER]
    for value in (120.0, 600.0, 0.05):  # --time-budget's, --config-timeout's and --tolerance's defaults
        assert numbers.count(value) == 1
    for name in ("cli/sweep.py", "orchestration/api.py"):
        strings = {n.value for n in ast.walk(ast.parse(sources[PACKAGE / name])) if isinstance(n, ast.Constant)}
        assert not strings & set(SWEEP_LEVEL), name
