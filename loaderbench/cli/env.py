"""`loaderbench env`: the machine facts a sweep depends on."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from loaderbench.cli import common


def env_command(
    format: Annotated[str, typer.Option("--format", help="table | json.")] = "table",
    no_bandwidth: Annotated[bool, typer.Option("--no-bandwidth", help="Skip the pageable vs pinned copy test.")] = False,
) -> None:
    """Print the machine facts a sweep depends on: CPUs and affinity, /dev/shm, fd limit,
    versions, CUDA, GPU and NVML status."""
    import json

    from loaderbench.machine.env import capture_environment, preflight_warnings

    def body() -> None:
        common.check_format(format, ("table", "json"))
        import torch

        facts = capture_environment(device_index=0 if torch.cuda.is_available() else None)
        if torch.cuda.is_available() and not no_bandwidth:
            from loaderbench.machine.bandwidth import measure_h2d_bandwidth, pcie_expected_gb_per_s

            gpu = facts.get("gpu") or {}
            facts["h2d_bandwidth"] = {
                **measure_h2d_bandwidth(),
                "pcie": pcie_expected_gb_per_s(gpu.get("pcie_gen_current"), gpu.get("pcie_width_current")),
            }
        warnings = preflight_warnings(facts)
        if format == "json":
            sys.stdout.write(json.dumps({**facts, "warnings": warnings}, indent=1) + "\n")
            return
        from loaderbench.render.env import render_env

        render_env(facts, [], common.stdout())
        for w in warnings:
            common.stderr().print(f"loaderbench: warning: {w}", highlight=False, markup=False, soft_wrap=True)

    common.guard(body)


