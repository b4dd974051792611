"""NUMA placement from sysfs: which NUMA nodes a set of CPUs lies on, and a PCI device's (a GPU's)
node. A DataLoader's workers inherit their rank's CPU mask; when it lies on another NUMA node
than the rank's GPU, every pinned batch crosses the socket link on its way to the device."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

NODE_ROOT = "/sys/devices/system/node"
PCI_ROOT = "/sys/bus/pci/devices"


def parse_cpulist(text: str) -> set[int]:
    """A kernel CPU list (`0-3,8,10-11`) -> the CPU ids. Raises ValueError for a malformed one.

    >>> sorted(parse_cpulist("0-2,8,10-11\\n"))
    [0, 1, 2, 8, 10, 11]
    """
    out: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        out.update(range(int(lo), int(hi) + 1) if sep else {int(lo)})
    return out


def cpu_numa_nodes(cpus: Iterable[int], root: str = NODE_ROOT) -> list[int] | None:
    """The NUMA nodes that `cpus` lie on, sorted; None where sysfs shows no NUMA nodes."""
    wanted = set(cpus)
    nodes = []
    try:
        entries = sorted(Path(root).glob("node[0-9]*"))
    except OSError:
        return None
    for entry in entries:
        try:
            mine = parse_cpulist((entry / "cpulist").read_text())
        except (OSError, ValueError):
            continue
        if mine & wanted:
            nodes.append(int(entry.name[4:]))
    return sorted(nodes) if entries else None


def pci_numa_node(bus_id: str, root: str = PCI_ROOT) -> int | None:
    """The NUMA node of the PCI device `bus_id` (`0000:3b:00.0`); None when sysfs does not say
    (no such device, or -1: a single-node machine)."""
    try:
        node = int(Path(root, bus_id.lower(), "numa_node").read_text().strip())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None


def numa_placement(cpus: Iterable[int], gpu_bus_id: str | None, *, node_root: str = NODE_ROOT,
                   pci_root: str = PCI_ROOT) -> dict[str, Any]:
    """Where a rank's workers run against its GPU: `cpu_numa_nodes` (the nodes of its CPU mask),
    `gpu_numa_node` and `workers_on_gpu_numa_node` (True when the mask lies on the GPU's node
    alone; None when either side is not visible)."""
    nodes = cpu_numa_nodes(cpus, node_root)
    gpu = None if gpu_bus_id is None else pci_numa_node(gpu_bus_id, pci_root)
    return {
        "cpu_numa_nodes": nodes,
        "gpu_numa_node": gpu,
        "workers_on_gpu_numa_node": None if nodes is None or gpu is None else nodes == [gpu],
    }
