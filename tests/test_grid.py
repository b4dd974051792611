from __future__ import annotations

from loaderbench.model import GRID_AXES
from loaderbench.orchestration.grid import default_num_workers, expand_grid


def GridAxes(**given):
    """Every axis at its default, the given ones replaced (batch 64, the CPU default)."""
    axes = {a.name: a.default for a in GRID_AXES}
    axes["batch_size"] = (64,)
    axes.update(given)
    return axes


def test_default_num_workers():
    assert default_num_workers(2) == [0, 1, 2]
    assert default_num_workers(16) == [0, 1, 2, 4, 8, 16]
    assert default_num_workers(6) == [0, 1, 2, 4, 6]
    assert default_num_workers(1) == [0, 1]


def test_zero_workers_drop_prefetch_factor_and_persistence_once():
    # num_workers {0,2,4} x prefetch_factor {1,2,8} x persistent {F,T}.
    axes = GridAxes(num_workers=[0, 2, 4], pin_memory=[False], prefetch=[False],
                    prefetch_factor=[1, 2, 8], persistent_workers=[False, True], batch_size=[32])
    points = expand_grid(axes, cuda=True)
    zero = [p for p in points if p.settings.num_workers == 0]
    assert len(zero) == 1
    assert zero[0].settings.prefetch_factor is None and zero[0].settings.persistent_workers is False
    assert len(zero[0].normalized_from) == 6  # all six requested combinations merged into one
    assert len(points) == 1 + 2 * 3 * 2
    assert len({p.settings for p in points}) == len(points)


def test_no_cuda_makes_pin_and_prefetch_na():
    axes = GridAxes(num_workers=[0, 2], batch_size=[64])  # pin off,on x prefetch off,on
    points = expand_grid(axes, cuda=False)
    assert [p.settings.num_workers for p in points] == [0, 2]
    assert all(not p.settings.pin_memory and not p.settings.prefetch for p in points)
    assert len(points[1].normalized_from) == 3


def test_with_cuda_every_combination_is_kept_in_grid_order():
    axes = GridAxes(num_workers=[0, 4], batch_size=[64])
    keys = [p.settings.key() for p in expand_grid(axes, cuda=True)]
    assert keys == [
        "w0-nopin-nopf-f--once-b64", "w0-nopin-pf-f--once-b64",
        "w0-pin-nopf-f--once-b64", "w0-pin-pf-f--once-b64",
        "w4-nopin-nopf-f2-once-b64", "w4-nopin-pf-f2-once-b64",
        "w4-pin-nopf-f2-once-b64", "w4-pin-pf-f2-once-b64",
    ]


def test_dataloader_kwargs_never_pass_rejected_keywords():
    axes = GridAxes(num_workers=[0, 2], mp_context=["spawn"], batch_size=[8])
    p0, p2 = expand_grid(axes, cuda=False)
    assert p0.settings.dataloader_kwargs() == {"batch_size": 8, "num_workers": 0, "pin_memory": False}
    assert p2.settings.dataloader_kwargs() == {
        "batch_size": 8, "num_workers": 2, "pin_memory": False, "prefetch_factor": 2,
        "persistent_workers": False, "multiprocessing_context": "spawn",
    }


def test_thread_axes_multiply_the_grid_and_vanish_without_workers():
    axes = GridAxes(num_workers=[0, 2], pin_memory=[False], prefetch=[False], batch_size=[8],
                    worker_threads=[1, 2], main_threads=[1, 4])
    points = expand_grid(axes, cuda=False)
    keys = [p.settings.key() for p in points]
    assert keys == [
        "w0-nopin-nopf-f--once-b8-mt1", "w0-nopin-nopf-f--once-b8-mt4",
        "w2-nopin-nopf-f2-once-b8-wt1-mt1", "w2-nopin-nopf-f2-once-b8-wt1-mt4",
        "w2-nopin-nopf-f2-once-b8-wt2-mt1", "w2-nopin-nopf-f2-once-b8-wt2-mt4",
    ]
