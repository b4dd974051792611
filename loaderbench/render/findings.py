"""The recommendation's findings as sentences: the only place they are worded (analysis/advice.py
draws them as data).
"""

from __future__ import annotations

from typing import Any

from loaderbench.model import Finding, FindingKind, ResultSet, WaitPart

OTHER_CORES_SHOWN = 0.5  # other processes' cores named beside a CPU cause (half a core or more)


def _setting(v: Any) -> str:
    return {True: "on", False: "off", None: "default"}.get(v, str(v)) if isinstance(v, (bool, type(None))) else str(v)


def _rate(x: float) -> str:
    return f"{x:,.0f} samples/s"


def _ms(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 1e3:.1f} ms"


_REMEDY_WORDS = {
    "prefetch": "the CUDA-stream prefetcher hides the copy behind the step",
    "pin_memory": "pin_memory=True (a pinned copy is asynchronous, and the pin thread takes batches "
                  "from the workers off the step's thread)",
    "persistent_workers": "persistent_workers=True starts the workers once, not every epoch",
    "more_workers": "more workers",
    "larger_batch": "a larger batch pays the per-batch cost over more samples",
    "pack_tensors": "pack the batch's many small tensors into a few (concatenate each field across "
                    "the batch, with offsets): each tensor crosses from the worker on its own",
    "numpy_to_tensors": "return torch tensors from the collate (torch.from_numpy): numpy arrays cross "
                        "from the worker through the pickler and a pipe, tensors through shared memory",
    "lazy_sampler": "draw indices lazily, in O(indices used) (a full permutation of a huge dataset "
                    "costs seconds every epoch)",
}


def _remedy_text(r: dict[str, Any]) -> str:
    """One remedy of a REMAINING_WAIT finding (see NOTE [advice the measurements support])."""
    what = _REMEDY_WORDS[r["remedy"]]
    if not r.get("measured"):
        return what + (f" (not measured: add {r['flag']})" if r.get("flag") else "")
    share = ""
    if r.get("ceiling_share") is not None and r.get("knee_ceiling_share") is not None:
        share = f", {r['ceiling_share']:.0%} of the compute ceiling vs {r['knee_ceiling_share']:.0%}"
    return f"{what}: measured {r['config']} {_rate(r['samples_per_s'])} ({r['gain']:+.1%}{share})"


_PART_WORDS = {
    WaitPart.H2D.value: "the host-to-device copy on the step's path",
    WaitPart.SAMPLER.value: "the sampler drawing indices in the main process",
    WaitPart.EPOCH_START.value: "workers starting again at each epoch start",
    WaitPart.RECEIVE.value: "the main process taking each finished batch from a worker",
    WaitPart.LOADER.value: "batches not built in time (fetch and prep)",
}


def finding_sentences(findings: list[Finding], rs: ResultSet | None = None) -> list[str]:
    """The recommendation's findings as sentences (the only place they are worded)."""
    out: list[str] = []
    for f in findings:
        d = f.data
        k = f.kind
        if k == FindingKind.NONE_MEASURED.value:
            out.append("none (no config was measured successfully).")
        elif k == FindingKind.KNEE.value:
            out.append(
                f"num_workers={d['num_workers']}, pin_memory={d['pin_memory']}, "
                f"prefetch={'on' if d['prefetch'] else 'off'}"
                + "".join(f", {name}={v}" for name, v in (d.get("swept") or {}).items())
                + f": {_rate(d['samples_per_s'])}, "
                f"stall {d['stall_fraction']:.1%} ({d['band']})."
            )
        elif k == FindingKind.BEST_WITHIN_TOLERANCE.value:
            differs = d.get("differs") or {}
            what = ", ".join(f"{name} {_setting(a)} instead of {_setting(b)}" for name, (a, b) in differs.items())
            text = (f"The best config ({f.config}) reaches {_rate(d['samples_per_s'])}, within "
                    f"{max(d['tolerance'], 0):.0%} or noise of it: "
                    + (f"{what} buy{'s' if len(differs) == 1 else ''} nothing measurable" if what
                       else "no setting buys anything measurable"))
            out.append(text + ("; the loader still binds." if d["loader_still_binds"] else "."))
        elif k == FindingKind.ALSO_FASTEST.value:
            out.append(
                "It is also the fastest config ranked (configs that replay the IterableDataset in every "
                "worker count duplicate samples and are not ranked)." if d.get("replicated_excluded")
                else "It is also the fastest config measured."
            )
        elif k == FindingKind.LOADER_ALONE.value:
            out.append(
                f"With --compute none this is the loader alone: its ceiling here is {_rate(d['samples_per_s'])}. "
                f"Any step slower than {d['step_s'] * 1e3:.1f} ms per batch of this size will not wait for this loader."
            )
        elif k == FindingKind.REMAINING_WAIT.value:
            out.append(_remaining_wait_text(d, f.config))
        elif k == FindingKind.NOT_CLEARED.value:
            cause = ""
            if d["cause"] == "cpu":
                others = d.get("other_cores")
                busy = (f" and other processes {others:.1f} more" if others is not None and others >= OTHER_CORES_SHOWN
                        else "")
                used = f" The process tree used {d['cpu_cores']:.1f} of {d['usable_cpus']} usable CPUs{busy}: "
                if busy and others >= d["cpu_cores"]:  # the other load took more of them than the sweep
                    cause = (used + "the CPUs are saturated, mostly by other load on the machine; these rows "
                             "understate what this loader does on CPUs of its own (measure again on a quiet "
                             "machine).")
                else:
                    cause = used + "CPU (decode/augment) saturation binds."
            elif d["cause"] == "cores_slower":
                used = ("" if d.get("cpu_cores") is None or not d.get("usable_cpus") else
                        f", using {d['cpu_cores']:.1f} of {d['usable_cpus']} usable CPUs")
                others = d.get("other_cores")
                seen = ("" if others is None or others < OTHER_CORES_SHOWN else
                        f"; other processes took {others:.1f} cores of them during its window")
                cause = (f" More workers bought nothing: {d['hi_config']} measured {_rate(d['hi_samples_per_s'])}"
                         f"{used}, its workers spending {d['hi_ms']:.1f} ms of CPU per sample against "
                         f"{d['lo_ms']:.1f} ms at {d['w_lo']} worker{'s' if d['w_lo'] != 1 else ''}{seen}. The "
                         "CPUs delivered less per core as workers were added (other load on the machine, "
                         "logical CPUs that share physical cores, or memory bandwidth): more workers are not the "
                         "cure here; cheaper samples (decode/augment) or a machine with more cores to itself are.")
            elif d["cause"] == "replicated":
                cause = (" Configs with more workers replay the IterableDataset in every worker and are not "
                         "ranked: split its stream with torch.utils.data.get_worker_info(), then sweep again.")
            elif d["cause"] == "not_build_rate":
                cause = (f" Building batches does not explain it: the loader alone delivers "
                         f"{_rate(d['loader_alone'])}, {d['loader_alone'] / d['compute_ceiling']:.1f}x the compute "
                         f"ceiling, which accounts for a stall of {d['explained_stall']:.1%} at most; more workers "
                         "are not the cure. "
                         + ("The wait sits in its tail" if d["wait_p95_s"] > 1.5 * d["wait_p50_s"] else
                            "The wait is steady, a fixed cost per batch")
                         + f" ({d['wait_p50_s'] * 1e3:.1f} ms median, {d['wait_p95_s'] * 1e3:.1f} ms p95): "
                         "contention for the CPUs or the main process's own work between steps.")
            elif d["cause"] == "storage":
                lo, hi = d["device_mb_per_s"]
                rate = f"{lo:,.1f}" if hi - lo < 0.05 else f"{lo:,.1f}-{hi:,.1f}"
                counts = ", ".join(str(w) for w in d["device_workers"])
                cause = (f" The storage device binds: the configs with {counts} workers read {rate} MB/s from it "
                         "alike, so more workers read no faster; faster storage or a cache would help "
                         "(`--what-if disk=MBPS` predicts another device).")
            elif d["cause"] == "more_workers_failed":
                tried = "; ".join(f"{f['config']} {f['status']}" + (f" ({f['error']})" if f.get("error") else "")
                                  for f in d["failed"][:3])
                cause = (" The configs with more workers did not run: " + tried
                         + ". Fix what stopped them (their rows say why); more workers may then help.")
            elif d["cause"] == "grid_edge":
                cause = (f" {'The fastest config' if d.get('subject', 'best') == 'best' else 'The recommended config'} "
                         "has the most workers of those measured: try more workers.")
                n = d.get("workers_needed")
                if n:
                    cause += (f" Estimate (a prediction): about {n} worker{'s' if n != 1 else ''}"
                              f"{' per rank' if d.get('per_rank') else ''} (batch build time / step time), "
                              "if the CPUs can run them.")
            who = "Even the best config" if d.get("subject", "best") == "best" else "The recommended config"
            out.append(f"{who} is {d['band']} (stall {d['stall_fraction']:.1%}) and loader-bound: no measured "
                       "setting clears the loader bottleneck." + cause)
        elif k == FindingKind.LOWEST_STALL.value:
            out.append(f"Lowest stall measured: {d['stall_fraction']:.1%} (receiving a batch always costs a "
                       "little; this floor is not worth chasing).")
        elif k == FindingKind.STEP_SLOWER.value:
            text = (f"The knee reaches {d['share']:.0%} of the compute ceiling ({d['ceiling']:,.0f} samples/s) "
                    f"because the step itself runs slower beside the loader: {d['compute_mean_s'] * 1e3:.1f} ms per "
                    f"batch on average (median {d['compute_p50_s'] * 1e3:.1f} ms) vs {d['alone_s'] * 1e3:.1f} ms alone.")
            if d.get("cpu_saturated"):
                text += (f" The process tree used {d['cpu_cores']:.1f} of {d['usable_cpus']} usable CPUs: the "
                         "main process (kernel launches, the pin thread) competes with the workers for CPU, so "
                         "the binding resource is the CPU; cheaper decoding (or GPU decoding) or more CPUs would "
                         "lift it.")
            out.append(text)
        elif k == FindingKind.STEP_BINDS.value:
            out.append(f"Past the knee the step itself binds: the knee runs at {d['share']:.0%} of the compute "
                       f"ceiling ({d['ceiling']:,.0f} samples/s).")
        elif k == FindingKind.TRANSFER.value:
            text = (f"The worker->main transfer is a large part of the wait: {d['mb_per_s']:,.0f} MB/s of "
                    f"batches ({(d['batch_bytes'] or 0) / 1e6:,.1f} MB each), {d['receive_s'] * 1e3:.1f} ms to "
                    "receive one.")
            if d.get("numpy_leaves"):
                text += (f" {d['numpy_leaves']} numpy array{'s' if d['numpy_leaves'] != 1 else ''} per batch "
                         "cross from the worker through the pickler and a pipe, not shared memory: "
                         + _REMEDY_WORDS["numpy_to_tensors"].split(": ")[0] + ".")
            elif (d.get("tensor_leaves") or 0) >= 16:
                text += f" The batch crosses as {d['tensor_leaves']} tensors, each on its own: pack them into a few."
            out.append(text)
        elif k == FindingKind.MORE_NOT_BETTER.value:
            out.append(f"More is not better: {f.config} uses {d['extra_cores']:+.1f} CPU cores over the knee "
                       f"for {d['gain']:+.1%} throughput.")
        elif k == FindingKind.STARTUP.value:
            start_s = d.get("start_s", d["first_batch_s"])
            text = (f"Worker start-up ({start_s:.2f} s of the {d['first_batch_s']:.2f} s first batch"
                    + (f"; the sampler drew for {d['sampler_s']:.2f} s of it, which every epoch pays"
                       if d.get("sampler_s", 0.0) >= 0.01 else "")
                    + f") is {d['share']:.0%} of an epoch of {d['epoch_batches']} batches (predicted from the "
                    "first batch; the measured window did not span an epoch)")
            if d.get("measured"):
                gaps = ""
                if d.get("gap_s") is not None and d.get("persistent_gap_s") is not None:
                    gaps = (f"; epoch-start gaps measured {d['gap_s']:.2f} s without and "
                            f"{d['persistent_gap_s']:.2f} s with persistent workers")
                if d.get("advised"):
                    text += (f": use persistent_workers=True to pay it once (measured {d['config']}: "
                             f"{_rate(d['samples_per_s'])}, the same steady state within the tolerance{gaps}).")
                elif d.get("slower"):
                    text += (f"; persistent_workers=True measured slower here ({d['config']}: "
                             f"{_rate(d['samples_per_s'])} vs {_rate(d['knee_samples_per_s'])}{gaps}): not advised.")
                else:
                    text += (f"; persistent_workers=True does not remove it here ({d['config']}{gaps}): "
                             "the gap is not worker start-up.")
            else:
                text += ": persistent_workers=True would pay it once (not measured: add --persistent-workers off,on)."
            out.append(text)
        elif k == FindingKind.EPOCH_FASTER.value:
            out.append(f"Counting start-up in every epoch of {d['epoch_batches']} batches, {f.config} is predicted "
                       f"faster per epoch ({d['epoch_samples_per_s']:,.0f} samples/s) than the steady-state knee.")
        elif k == FindingKind.THREADS.value:
            parts = [
                ("1 intra-op thread in each worker (torch's own setting there: no worker_init_fn needed)"
                 if d.get("worker_threads") == 1 else
                 f"torch.set_num_threads({d['worker_threads']}) in each worker (worker_init_fn)")
                if d.get("worker_threads") is not None else "",
                f"torch.set_num_threads({d['main_threads']}) in the main process"
                if d.get("main_threads") is not None else "",
            ]
            out.append("Threads: " + ", ".join(p for p in parts if p) + ".")
        elif k == FindingKind.OVERSUBSCRIBED.value:
            out.append(f"Note: {d['message']}.")
        elif k == FindingKind.OTHER_LOAD.value:
            of = f" of the {d['usable_cpus']} usable CPUs" if d.get("usable_cpus") else ""
            steal = (f", {d['steal_cores']:.1f} of them the hypervisor's steal"
                     if d.get("steal_cores", 0.0) >= 0.05 else "")
            out.append(f"Other processes used the CPUs this sweep ran on: up to {d['max_cores']:.1f} cores{of} "
                       f"during a measured window ({f.config}{steal}), median {d['median_cores']:.1f} over "
                       f"{d['configs']} config{'s' if d['configs'] != 1 else ''}. These rows measure a shared "
                       "machine: compare them only with runs under the same load.")
    return out


def _remaining_wait_text(d: dict[str, Any], config: str | None) -> str:
    part = d["part"]
    who = "Its remaining stall" if d.get("subject", "knee") == "knee" else f"With workers ({config}) the stall"
    words = _PART_WORDS[part]
    if part == WaitPart.EPOCH_START.value and not d.get("workers_restart", True):
        # Persistent workers, or none: nothing starts again; the epoch's first batch is built
        # while nothing else is in flight.
        words = "each epoch's first batch, built with nothing in flight (no worker starts: the pipeline refills)"
    text = (f"{who} ({d['stall_fraction']:.1%}, {d['wait_p50_s'] * 1e3:.1f} ms median wait per batch) "
            f"is mostly {words}: {d['part_s'] * 1e3:.1f} ms per batch")
    if part == WaitPart.RECEIVE.value and d.get("receive_s") is not None:
        what = []
        if d.get("tensor_leaves"):
            n = d["tensor_leaves"]
            what.append(f"{n} tensor{'s' if n != 1 else ''}")
        if d.get("numpy_leaves"):
            n = d["numpy_leaves"]
            what.append(f"{n} numpy array{'s' if n != 1 else ''}")
        if d.get("batch_bytes"):
            what.append(f"{d['batch_bytes'] / 1e6:,.1f} MB")
        text += (f" (taking a batch that was already built costs {d['receive_s'] * 1e3:.1f} ms, measured after "
                 f"the window{'; the batch is ' + ', '.join(what) if what else ''}); more workers cannot remove it")
    elif part == WaitPart.EPOCH_START.value and not d.get("workers_restart", True):
        text += " (paid once per epoch: longer epochs spread it; no DataLoader setting removes it)"
    elif part == WaitPart.H2D.value:
        hidden = d.get("h2d_hidden_fraction")
        text += f" (copy {_ms(d.get('h2d_s'))}{'' if hidden is None else f', {hidden:.0%} hidden'})"
    others = {p: v for p, v in (d.get("parts_share") or {}).items() if p != part}
    if others:
        text += "; also " + ", ".join(f"{p} {v:.0%} of the step" for p, v in others.items())
    text += "."
    remedies = d.get("remedies") or []
    if remedies:
        text += " What acts on it: " + "; ".join(_remedy_text(r) for r in remedies) + "."
    for r in d.get("measured_no_gain") or []:
        text += (f" Measured without gain: {r['config']} ({r['remedy'].replace('_', ' ')}) "
                 f"{_rate(r['samples_per_s'])} ({r['gain']:+.1%}).")
    return text
