"""What follows the table: the recommendation and its ready-to-paste call right under it, then a
short block (what stopped the sweep early, the what-ifs, the notes on configs folded by kind with
the configs they apply to), and what `--verbose` adds (the search and its drift check, the
headroom, the loader ceiling, every note in full).

Configs are named as the table's columns do (`namer`). Formats only what analysis/ concluded.
"""

from __future__ import annotations

from collections.abc import Callable

from loaderbench.conclusions import (
    Baseline,
    BestWithinTolerance,
    CacheFix,
    CeilingBinds,
    DisturbedRows,
    EpochIter,
    EqualCheaper,
    FetchPrep,
    IdleWorkers,
    Knee,
    LoaderCeiling,
    MemoryPerWorker,
    Noisy,
    PartialBatches,
    ServedFromCache,
    StepSlowed,
    WhatIfAnswer,
    WhyNoPrediction,
    WorkerSlower,
)
from loaderbench.model import (
    GRID_AXES,
    CeilingBound,
    ConfigResult,
    LoaderSettings,
    Note,
    ServedFrom,
    WarningKind,
)
from loaderbench.render.columns import LOADER_ARG, analysis_of, cuda_used, visible_columns
from loaderbench.render.findings import (
    Name,
    describe,
    finding_sentence,
    finding_sentences,
    instead,
    loader_arg_words,
    spread_sentence,
    sustained_sentence,
)
from loaderbench.render.nodes import node_lines, what_if_ranks_lines
from loaderbench.render.pipeline import (
    beyond_knobs_lines,
    binds_clause,
    profile_lines,
    profile_summary_line,
    series_sentence,
    what_if_build_lines,
)
from loaderbench.results import ResultSet

GPU_UTIL_LABEL = (
    "GPU util % = share of NVML sample windows in which any kernel ran (a cross-check, not capacity "
    "used; SM = share of SMs busy, from NVML GPM where the GPU supports it)"
)


def _mb(x: float | None) -> str:
    return "?" if x is None else f"{x / 1e6:,.1f} MB"


def served_from_cache_lines(f: ServedFromCache, name: Name = describe, *, verbose: bool = True,
                            grouped: Callable[[list[tuple[LoaderSettings, str]]], str] | None = None) -> list[str]:
    """The ServedFromCache finding in words: the rows and which cache served them (`grouped`
    names several configs at once; with `verbose`, per row what the device gave against what
    the samples needed), the cache states whose rows were served unalike, and what would
    measure the device when every row was."""
    out = []
    if not verbose:
        by: dict[ServedFrom, list[tuple[LoaderSettings, str]]] = {}
        for row in f.rows:
            by.setdefault(row.served_from, []).append((row.settings, row.cache))
        group = grouped or (lambda cs: _configs([name(s) + ("" if c == "as-is" else f" ({c})") for s, c in cs]))
        out.append("Served from a cache, not the device (their throughput is the cache's): " + "; ".join(
            f"{group(configs)} ({kind.value})" for kind, configs in by.items()) + ".")
    why = {
        ServedFrom.MIXED: "part came from a cache (read() returned {chars})",
        ServedFrom.PAGE_CACHE: "read() returned {chars}: the OS page cache served them",
        ServedFrom.MEMORY_FS: "the files live on an in-memory filesystem (tmpfs): there is no device to read",
        ServedFrom.DATASET_CACHE: ("read() returned {chars} and {resident} of the files were in the page "
                                   "cache: a cache inside the dataset or its workers served them"),
        ServedFrom.CACHE: ("read() returned {chars} with {resident} of the files in the page cache: "
                           "memory-mapped files or a cache inside the dataset served them"),
    }
    for row in f.rows if verbose else []:
        resident = "?" if row.resident_fraction is None else f"{row.resident_fraction:.0%}"
        how = "estimated: files under --data / dataset length" if row.needed_rule == "estimated" else "their files"
        cache = "" if row.cache in (None, "as-is") else f" ({row.cache})"
        chars = _mb(row.read_chars)
        if row.later_epochs:
            chars = _mb(row.later_epoch_read_chars)
            read = (f"its first epoch read {_mb(row.first_epoch_read_bytes)} from the device, every later epoch "
                    f"at most {_mb(row.later_epoch_read_bytes)}; over the window {_mb(row.read_bytes)} of "
                    f"{_mb(row.needed_bytes)} the samples needed ({how}); after the first epoch ")
        else:
            read = (f"{_mb(row.read_bytes)} read from the device of {_mb(row.needed_bytes)} the samples "
                    f"needed ({how}); ")
        out.append(
            f"Served from a cache ({name(row.settings)}{cache}): {read}"
            + why.get(row.served_from, "a cache served them").format(chars=chars, resident=resident) + "."
        )
    for state in f.uneven:
        label = "" if state in (None, "as-is") else f" ({state})"
        if f.uneven_fix is CacheFix.REREAD:
            # Evicted before every config, yet part cached: the window read its own pages again.
            because = ("the rows above from a cache the window filled itself: it read past the end of an epoch "
                   "and read again what it had just loaded (a dataset shorter than the window): ranking them "
                   "compares the device with a cache; use a longer dataset, or fewer batches (--max-batches).")
        else:
            because = ("the rows above from a cache (the configs before them, or their own repeats, warmed it): "
                   "ranking them compares the device with a cache; run with --cache cold, or a dataset that "
                   "keeps nothing it read.")
        out.append(f"The rows{label} were not served alike: {_configs([name(s) for s in f.storage_rows])} from the "
                   f"device, {because}")
    if f.all_rows and f.fix is not None:
        fix = {
            CacheFix.DATASET_CACHE: "the dataset (or its workers) keeps what it read: turn that cache off to measure "
                                    "the device",
            CacheFix.MEMORY_FS: "put a copy of the files on the device to measure it",
            CacheFix.REREAD: ("the window read the files again after the page cache held them (a dataset smaller "
                              "than the window): use more files, or fewer batches (--max-batches)"),
            CacheFix.COLD: "run with --cache cold (or a dataset larger than RAM) to measure the device",
        }[f.fix]
        out.append(f"Every row was served from a cache: these throughputs are the cache's, not the storage's; {fix}.")
    return out


def loader_ceiling_line(rs: ResultSet) -> str:
    """The loader ceiling against the compute ceiling (`Analysis.loader_ceiling`); '' when no
    ranked config was probed."""
    lc = analysis_of(rs).loader_ceiling
    if lc is None:
        return ""
    return _loader_ceiling_text(lc, namer(rs))


def _loader_ceiling_text(lc: LoaderCeiling, name: Name) -> str:
    if lc.bound_only:
        text = (f"Loader ceiling (the loader alone, H2D included): at least {lc.samples_per_s:,.0f} samples/s "
                f"({name(lc.settings)}; a bound on {'every one' if lc.bounded == lc.ranked else lc.bounded} of the "
                f"{lc.ranked} configs, no sustained rate)")
        if lc.compute_ceiling and lc.binds is CeilingBinds.COMPUTE:
            return text + (f"; compute ceiling {lc.compute_ceiling:,.0f} samples/s: the compute step binds (the loop "
                           "itself ran at it).")
        if lc.compute_ceiling:
            return text + (f"; compute ceiling {lc.compute_ceiling:,.0f} samples/s: which one binds is not known "
                           "(the loader alone delivers at least that much, how much more was not measured).")
        return text + "."
    text = (f"Loader ceiling (the loader alone, H2D included): {lc.samples_per_s:,.0f} samples/s at best "
            f"({name(lc.settings)})")
    if lc.probed < lc.ranked:
        text += f", a sustained rate on {lc.probed} of {lc.ranked} configs"
        if lc.bounded:
            text += f" ({lc.bounded} only a bound: at least their own samples/s)"
    lower = lc.lower_bound
    if lower is not None:
        text += f", at least {lower.samples_per_s:,.0f} measured with the step ({name(lower.settings)})"
    if lc.compute_ceiling and lc.binds is None:
        return text + (f"; compute ceiling {lc.compute_ceiling:,.0f} samples/s: which one binds is not known "
                       "(the loader alone delivers at least that much, how much more was not measured).")
    if lc.compute_ceiling and lc.binds is not None:
        within = f"within {lc.matched_within:.0%} of each other"
        binds = {
            CeilingBinds.LOADER: "the loader binds.",
            CeilingBinds.COMPUTE: "the compute step binds.",
            CeilingBinds.MATCHED: (f"{within}: with 0 workers the main process loads a batch, then steps, so "
                                   "the two add up." if lc.settings.num_workers == 0 else
                                   f"{within}: with no margin, the loader's jitter stalls the step."),
        }[lc.binds]
        rb = lc.receive_bound
        if rb is not None:
            # The fastest row waits on the receive: the two ceilings add up, neither binds alone.
            binds = (f"neither binds alone: the main process takes each finished batch ({rb.receive_s * 1e3:.1f} ms, "
                     "the receive floor) and then runs the step, one after the other, so together they hold the "
                     f"loop to at most about {rb.bound_samples_per_s:,.0f} samples/s; {name(rb.settings)} reached "
                     f"{rb.samples_per_s:,.0f} (receive floor)")
            if rb.window_receive_s is not None:
                binds += f", its window's takes {rb.window_receive_s * 1e3:.1f} ms a batch, slower than the floor"
            binds += "."
        text += f"; compute ceiling {lc.compute_ceiling:,.0f} samples/s: {binds}"
        if lc.start_bound is not None:
            text += (f" Both are steady rates, between epoch starts: each epoch's start holds "
                     f"{name(lc.start_bound.settings)} at {lc.start_bound.samples_per_s:,.0f} samples/s "
                     "(epoch-start-bound).")
        return text
    return text + "."


def search_lines(rs: ResultSet, name: Name | None = None) -> list[str]:
    """How a model-guided search chose what to measure, how well its model predicted the
    configs it then measured, and the drift check of a warm measuring process."""
    name = name or namer(rs)

    def called(key: str) -> str:
        return _named_key(rs, name, key)

    sw = rs.sweep
    log = sw.search
    measured = sum(1 for r in rs.results if r.status != "skipped")
    drift = sw.drift
    wall = sw.sweep_wall_s or 0.0
    # A drift check that tripped added one warm trial to the knee: a repeat, but not the search's.
    added = (drift.config if drift is not None and len(drift.warm_trials_samples_per_s) >= 2 and not drift.confirmed
             and len(drift.fresh_trials_samples_per_s) == 2 else None)
    repeated = [f"{name(r.settings)} ({n} trials)" for r in rs.results
                if (n := len(r.trials) - (1 if r.settings.key() == added else 0)) > 1]
    span = [] if log is None else log.workers_searched
    if not any(r.status == "ok" and r.summary is not None for r in rs.results):
        return [f"Search (model-guided, --search auto): {measured} configs tried in {wall:.0f} s; "
                "none finished, so nothing was ranked (each row says why)."]
    over = f"; worker counts searched: {span[0]}-{span[1]}" if len(span) == 2 else ""
    widened = None if log is None else log.widened
    if widened is not None:
        over += (f"; widened past the usable CPUs to {widened.workers} workers"
                 + (f", not further ({widened.refused})" if widened.refused else ""))
    took = f"{wall:.0f} s"
    budget = ((rs.config or {}).get("measure") or {}).get("time_budget_s")
    if sw.since_start_s is not None and budget:
        past = sw.since_start_s > budget
        took += (f" ({sw.since_start_s:.0f} s since the command started, "
                 f"{'past' if past else 'within'} --time-budget {budget:.0f} s)")
    disputed = list(dict.fromkeys(called(st.config) for st in (log.steps if log else []) if st.repeat))
    why = (f"; {', '.join(disputed)} repeated because its first trial read far below the model's prediction, "
           "which would make it the knee" if disputed else "")
    rec = analysis_of(rs).recommendation.findings
    close = any(isinstance(f, (EqualCheaper, BestWithinTolerance)) for f in rec)
    stopped = (log.stopped if log else None) or "done"
    clear = close and not repeated and stopped.startswith("the ranking is clear")
    text = (f"Search (model-guided, --search auto): {_measured_of_grid(rs, name)}{over}) in {took}: the predicted "
            "knee, its neighbours and the variants there; "
            + (f"repeats where they decide: {'; '.join(repeated)}{why}" if repeated
               else "no repeats: the configs measured within the tolerance of the pick count as equal to it, and "
                    "none sat near the tolerance's edge, where a repeat could change the pick" if clear
               else "no repeats, though configs measured within the tolerance of the pick competed with it"
               if close else "no config competed closely enough to need repeats")
            + ("." if clear else f" ({stopped})."))
    out = [text]
    check = sw.prediction_check
    before, loo = (None, None) if check is None else (check.before_measured, check.errors)
    parts = []
    if before:
        parts.append(f"before measuring them, median error {before.median_abs:.0%} (p90 {before.p90_abs:.0%}) "
                     f"over {before.n} config{'s' if before.n != 1 else ''}")
    if loo:
        parts.append(f"leaving each measured config out, median {loo.median_abs:.0%} (p90 {loo.p90_abs:.0%})")
    if sw.predictions:
        out.append("Rows marked ~ are predicted by the pipeline model (loader rate per worker, CPU per sample, "
                   "receive floor, compute ceiling), never ranked or recommended"
                   + (f"; its error: {'; '.join(parts)}." if parts else "."))
    return out + drift_lines(rs, name)


def _measured_of_grid(rs: ResultSet, name: Name) -> str:
    """How many configs a search measured against its grid, the configs off the grid named
    (`Analysis.off_grid`): "measured 7 configs (5 of a grid of 12, and 2 worker counts the grid
    does not list: 3 and 6 workers" (left open for what follows)."""
    log = rs.sweep.search
    measured = sum(1 for r in rs.results if r.status != "skipped")
    off = analysis_of(rs).off_grid
    grid = None if log is None else log.grid_configs
    text = f"measured {measured} config{'s' if measured != 1 else ''} ("
    if not off:
        return text + f"of a grid of {grid}"
    n = len(off)
    return (text + f"{measured - n} of a grid of {grid}, and {n} with a worker count the grid does not list: "
            + _grouped(rs, [(s, "") for s in off]))


def drift_lines(rs: ResultSet, name: Name) -> list[str]:
    """The drift check of a warm measuring process (`SweepRecord.drift`) in words; [] without
    one."""
    drift = rs.sweep.drift
    out: list[str] = []

    def called(key: str) -> str:
        return _named_key(rs, name, key)

    if drift is not None and drift.fresh_samples_per_s is None:
        # The first form of the check: the first config measured again in the warm process.
        out.append(f"Drift: {called(drift.config)} moved {drift.change:+.1%} between its first and last trial in "
                   "the warm measuring process" + (f"; measured again, each in a fresh process: "
                                                   f"{_named_keys(rs, drift.remeasured)}."
                                                   if drift.remeasured else "."))
    elif drift is not None:
        moved = f"{drift.change:+.1%}"
        fresh = drift.fresh_trials_samples_per_s
        warm = drift.warm_samples_per_s or 0.0
        limit = drift.threshold
        within = (f"within the drift threshold, {limit:.0%}" if limit is not None else "within twice the tolerance")
        if drift.unconfirmed_for_budget and len(drift.warm_trials_samples_per_s) >= 2:
            warms = drift.warm_trials_samples_per_s
            out.append(f"Drift check: the knee when the search ended ({called(drift.config)}) measured "
                       f"{fresh[0] / warms[0] - 1.0:+.1%} in a fresh process against its warm trial, past the drift "
                       f"threshold ({limit or 0:.0%}); --time-budget left no time to confirm it with a second fresh "
                       f"trial, only for one more warm trial (a repeat it keeps): warm "
                       f"{' / '.join(f'{w:,.0f}' for w in warms)}, fresh {fresh[0]:,.0f} samples/s; the rows are the "
                       "warm process's: give a larger --time-budget, or --isolation process.")
        elif drift.unconfirmed_for_budget:
            out.append(f"Drift check: the knee ({called(drift.config)}) measured {moved} in a fresh process against the "
                       f"warm measuring process, past the drift threshold ({limit or 0:.0%}); --time-budget left no "
                       "time to confirm it with one more trial of each kind, so the rows are the warm process's: "
                       "give a larger --time-budget, or --isolation process.")
        elif drift.not_remeasured:
            out.append(f"Drift: the knee ({called(drift.config)}) measured {moved} in two fresh processes against "
                       f"the warm measuring process, past the drift threshold ({limit or 0:.0%}); --time-budget left "
                       f"no time to measure the configs competing with it again ({_named_keys(rs, drift.not_remeasured)}"
                       "), so every row keeps its warm trials and may read that much apart from a fresh process: "
                       "give a larger --time-budget, or --isolation process.")
        elif drift.remeasured:
            out.append(f"Drift: the knee ({called(drift.config)}) measured {moved} in "
                       f"{'two fresh processes' if len(fresh) == 2 else 'a fresh process'} against the warm "
                       f"measuring process; measured again, each in a fresh process: "
                       f"{_named_keys(rs, drift.remeasured)}.")
        elif len(fresh) == 2 and warm > 0 and not drift.warm_trials_samples_per_s:
            # The form of the check with a second fresh trial only.
            first, second = (f / warm - 1.0 for f in fresh)
            out.append(f"Drift check: the knee ({called(drift.config)}) measured again at the end in a fresh process: "
                       f"{first:+.1%} against the warm process, past the drift threshold ({limit or 0:.0%}); a second "
                       f"fresh trial read {second:+.1%}, so it was not confirmed (checks, not counted as repeats).")
        elif len(fresh) == 2 and warm > 0:
            warms = drift.warm_trials_samples_per_s
            rec = rs.recommendation
            now = None if rec is None or rec.settings is None else rec.settings
            moved_to = (f"; with its new warm trial the pick is now {name(now)}"
                        if now is not None and now.key() != drift.config else "")
            out.append(f"Drift check: the knee when the search ended ({called(drift.config)}) measured again in a fresh "
                       f"process past the drift threshold ({limit or 0:.0%}); with one more trial of each kind, fresh "
                       f"{' / '.join(f'{f:,.0f}' for f in fresh)} and warm {' / '.join(f'{w:,.0f}' for w in warms)} "
                       f"samples/s overlap: not confirmed (the fresh trials are checks, the warm one a repeat{moved_to}).")
        else:
            out.append(f"Drift check: the knee ({called(drift.config)}) measured again at the end in a fresh process: "
                       f"{moved} against the warm process ({within}; a check, not counted as a repeat).")
    return out


def namer(rs: ResultSet) -> Name:
    """How this result's sentences name a config: as the table's columns do, by the settings
    that vary between its rows (and mean something for the config: no workers-only setting
    without workers, no CUDA setting without CUDA), e.g. "4 workers, pin_memory on"; by its
    worker count alone when nothing else varies."""
    parts = name_parts(rs)
    return lambda settings: ", ".join(parts(settings))


def name_parts(rs: ResultSet) -> Callable[[LoaderSettings], list[str]]:
    """`namer`'s words for a config, one per setting, the worker count first."""
    shown = {k for k, _ in visible_columns(rs)}
    cuda = cuda_used(rs)

    def parts(settings: LoaderSettings) -> list[str]:
        return ([a.words(getattr(settings, a.name)) for a in GRID_AXES
                 if (a.name == "num_workers" or a.name in shown)
                 and not (a.workers_only and settings.num_workers == 0) and not (a.cuda_only and not cuda)]
                + [loader_arg_words(k, v) for k, v in settings.loader_args if LOADER_ARG + k in shown])

    return parts


def _grouped(rs: ResultSet, configs: list[tuple[LoaderSettings, str]]) -> str:
    """Configs (settings, cache state) named in one sentence, those that differ only in their
    worker count together: "0, 1 and 2 workers"; "17 and 23 workers, pin_memory on"."""
    parts = name_parts(rs)
    groups: dict[tuple[str, ...], list[int]] = {}
    for settings, cache in configs:
        rest = tuple(parts(settings)[1:]) + (() if cache in ("", "as-is") else (cache,))
        groups.setdefault(rest, [])
        if settings.num_workers not in groups[rest]:
            groups[rest].append(settings.num_workers)
    out = []
    for rest, counts in groups.items():
        counts.sort()
        listed = str(counts[0]) if len(counts) == 1 else f"{', '.join(map(str, counts[:-1]))} and {counts[-1]}"
        out.append(", ".join([f"{listed} worker{'' if counts == [1] else 's'}", *rest]))
    return "; ".join(out)


def _named_key(rs: ResultSet, name: Name, key: str) -> str:
    """A config recorded by its key (the search's and the drift check's records), named."""
    r = next((r for r in rs.results if r.settings.key() == key), None)
    return key if r is None else name(r.settings)


def _named_keys(rs: ResultSet, keys: list[str]) -> str:
    """Configs recorded by their keys, named together (`_grouped`); a key no row has, as it is."""
    by_key = {r.settings.key(): r.settings for r in rs.results}
    known = [(by_key[k], "") for k in keys if k in by_key]
    return "; ".join([*([_grouped(rs, known)] if known else []), *(k for k in keys if k not in by_key)])


def _configs(names: list[str]) -> str:
    """Configs named in one sentence: "1 worker; 2 workers"."""
    return "; ".join(dict.fromkeys(names))


def recommendation_lines(rs: ResultSet, name: Name) -> list[str]:
    """The recommendation: its headline, the ready-to-paste code (one line each, never folded:
    `render_table` prints lines that start with four spaces as they are), then why; for a
    distributed sweep each rank's figures, and on several nodes the per-node view."""
    rec = analysis_of(rs).recommendation
    if rec.settings is None:
        return ["Recommendation: none (no config was measured successfully)."]
    knee = [f for f in rec.findings if isinstance(f, Knee)]
    rest = [f for f in rec.findings if not isinstance(f, Knee)]
    out = ["Recommendation: " + " ".join(finding_sentences(knee, name))]
    out.extend(f"    {line}" for line in rec.imports)
    out.extend(f"    {line}" for line in rec.decoder_lines)
    if rec.worker_init_def:
        out.append(f"    {rec.worker_init_def}  # at module level: spawn pickles it")
    out.append(f"    loader = {rec.dataloader_call}")
    if rec.use_prefetcher:
        out.append(f"    loader = {rec.prefetcher_call or 'loaderbench.CUDAPrefetcher(loader)'}  # copy batch N+1 on a side stream")
    why = " ".join([t for k in knee for t in (sustained_sentence(k), spread_sentence(k)) if t]
                   + finding_sentences(rest, name))
    if why:
        out.append(why)
    beyond = analysis_of(rs).beyond_knobs
    if beyond is not None:
        out.extend(beyond_knobs_lines(beyond, name))
    per_gpu = per_rank_line(rs)
    if per_gpu:
        out.append(per_gpu)
    out.extend(node_lines(analysis_of(rs).per_node, name))
    return out


def footer_lines(rs: ResultSet, *, verbose: bool = False) -> list[str]:
    """What follows the table: the recommendation and its call right under it, then a short
    block: what stopped the sweep early, the what-ifs or a watched loop's prediction, the notes on
    configs folded by kind with the configs they apply to, and a line naming what `verbose`
    adds (the search, the drift check, the headroom, the loader ceiling, each note in full)."""
    a = analysis_of(rs)
    name = namer(rs)
    out = recommendation_lines(rs, name)
    if a.partial is not None:
        p = a.partial
        if p.searched:
            out.append(f"PARTIAL: the search was stopped after {p.finished} config{'s' if p.finished != 1 else ''}; "
                       "the recommendation covers only these, and what more configs would give is not known.")
        else:
            fewer = f", {p.short} of them with fewer than {p.repeats} repeats" if p.short else ""
            out.append(
                f"PARTIAL: {p.finished} of {p.planned} planned configs finished (the sweep was stopped){fewer}; "
                "the recommendation covers only these."
            )
    if a.cold_ranked:
        out.append("The recommendation ranks the cold runs (a first epoch, or a dataset larger than RAM).")
    over = budget_line(rs)
    if over:
        out.append(over)
    if a.more_workers is not None:
        from loaderbench.render.watch import prediction_lines

        out.extend(prediction_lines(a.more_workers))
    if a.what_if is not None:
        out.extend(what_if_lines(a.what_if, name))
    if a.what_if_ranks is not None:
        out.extend(what_if_ranks_lines(a.what_if_ranks, name))
    if a.profile is not None and a.profile.loader_binds and not verbose:
        out.append(profile_summary_line(a.profile, name))
    out.extend(note_lines(rs, name, verbose=verbose))
    if verbose:
        out.extend(detail_lines(rs, name))
    else:
        more = _more(rs)
        if more:
            out.append(f"More with --verbose (or --format json): {more}.")
    return out


BUDGET_PAST_SHARE = 0.10
"""A sweep that ends more than this share past --time-budget says so in the short block."""


def budget_line(rs: ResultSet) -> str | None:
    """One line where the sweep ended more than BUDGET_PAST_SHARE past `--time-budget` (counted
    from the command's start), with why: a grid (`--search grid`, or an auto sweep of at most two
    configs, measured as one) runs every config whatever the budget; a search always measures the
    compute ceiling and one config, and a drift check that trips ends past it by its own time.
    None otherwise, or for a result without those figures (a watched loop, an older file)."""
    budget = ((rs.config or {}).get("measure") or {}).get("time_budget_s")
    since = rs.sweep.since_start_s
    if not budget or since is None or since <= (1.0 + BUDGET_PAST_SHARE) * budget:
        return None
    head = f"It answered {since:.0f} s after the command started, past --time-budget {budget:.0f} s"
    if rs.sweep.search is None:
        n = sum(1 for r in rs.results if r.trials)
        return (f"{head}: the budget bounds a search, and {'these' if n != 1 else 'this'} {n} config"
                f"{'s were' if n != 1 else ' was'} measured as a grid, every one in full (--search grid; an auto "
                "sweep of two configs or fewer, of a cold cache, or of a dataset whose workers replay one stream).")
    return (f"{head}: a search always measures the compute ceiling and one config, and a drift check that "
            "trips ends past the budget by its own time (--verbose: the search and the check).")


def detail_lines(rs: ResultSet, name: Name) -> list[str]:
    """What `--verbose` adds under the short block: the search and the drift check, the headroom,
    the loader ceiling, the fetch/prep splits, what the GPU util column measures, and why a
    loader ceiling was not probed."""
    a = analysis_of(rs)
    out: list[str] = []
    out.extend(search_lines(rs, name) if rs.sweep.search is not None else drift_lines(rs, name))
    h = a.headroom
    if h is not None:
        which = "your current settings" if h.which is Baseline.CURRENT else "the first config measured"
        text = (
            f"Headroom from {which} ({name(h.settings)}): stall {h.stall_fraction:.0%}, "
            f"so removing all data-wait makes it at most {h.max_speedup_from_stall:.2f}x faster"
        )
        if h.max_speedup_to_ceiling is not None:
            text += f"; the compute ceiling is {h.max_speedup_to_ceiling:.2f}x its throughput"
        text += f" ({h.binds.value} binds)."
        out.append(text)
    if a.loader_ceiling is not None:
        out.append(_loader_ceiling_text(a.loader_ceiling, name))
    for fp in a.fetch_prep:
        out.append(_fetch_prep_text(fp, rs, name))
    if cuda_used(rs):
        out.append(GPU_UTIL_LABEL + ".")
    out.extend(bound_lines(rs, name))
    for note in a.unprobed:
        out.append(f"loader alone /s n/a: {note}.")
    if a.profile is not None:
        out.extend(profile_lines(a.profile, name))
    elif rs.sweep.profile is not None and rs.sweep.profile.error:
        out.append(f"Stage profile of the pick: not taken ({rs.sweep.profile.error}).")
    return out


_BOUND_WORDS = {
    CeilingBound.TIME_CAP: "a worker could not build its batches within the probe's time",
    CeilingBound.EPOCH_END: "the epoch ended before every worker built its batches in the probe",
    CeilingBound.BELOW_STEP_RATE: "the probe read below the row's own samples/s with the step",
    CeilingBound.LEGACY_PROBE: ("probed by an older version that timed half a second of draws, not the workers' "
                                "sustained rate (a drained backlog reads low, items held finished read high): only "
                                "the row's own samples/s is known"),
    CeilingBound.OTHER: "the probe gave no sustained rate",
}


def bound_lines(rs: ResultSet, name: Name) -> list[str]:
    """The rows whose loader ceiling is a bound (`Summary.loader_ceiling_bound`), by why: the
    cell's "≥X" in words."""
    by: dict[CeilingBound, list[tuple[LoaderSettings, str]]] = {}
    noisy: set[CeilingBound] = set()
    for r in rs.results:
        m = r.summary
        if m is not None and m.loader_ceiling_bound is not None and m.loader_ceiling_bound_samples_per_s is not None:
            by.setdefault(m.loader_ceiling_bound, []).append((r.settings, r.cache))
            if m.noisy and m.loader_ceiling_bound_samples_per_s < m.samples_per_s:
                noisy.add(m.loader_ceiling_bound)
    return [f"loader alone /s ≥ ({_grouped(rs, configs)}): not a sustained rate, only a bound: the loader alone "
            "delivers at least that many samples/s (at least the row's own"
            + (", or the low end of its ± where its windows are noisy" if why in noisy else "")
            + f"); {_BOUND_WORDS[why]}."
            for why, configs in by.items()]


def _more(rs: ResultSet) -> str:
    """What `--verbose` would add, named ('' when nothing)."""
    a = analysis_of(rs)
    parts = []
    search = rs.sweep.search
    if search is not None:
        measured = sum(1 for r in rs.results if r.status != "skipped")
        off = len(a.off_grid)
        # Configs beside the grid's that are not worker counts (the pick with in_order=False).
        beside = max(0, measured - off - search.grid_configs)
        listed = measured - off - beside
        kinds = [f"{listed} of the grid's {search.grid_configs}",
                 *([f"{off} with worker counts it does not list"] if off else []),
                 *([f"{beside} tried beside it (in_order=False)"] if beside else [])]
        count = (f"{measured} of {search.grid_configs} configs measured" if len(kinds) == 1 else
                 f"{measured} configs measured: " + ", ".join(kinds[:-1]) + " and " + kinds[-1])
        parts.append(f"the search ({count})" + (" and its predictions" if rs.sweep.predictions else ""))
    if rs.sweep.drift is not None:
        parts.append("the drift check")
    if a.headroom is not None:
        parts.append("the headroom")
    if a.loader_ceiling is not None:
        parts.append("the loader ceiling")
    if a.fetch_prep:
        parts.append("the fetch/prep split")
    memory = sum(1 for f in a.notes if isinstance(f, MemoryPerWorker))
    if memory:
        parts.append(f"{memory} note{'s' if memory != 1 else ''} on memory per worker")
    served = next((f for f in a.notes if isinstance(f, ServedFromCache)), None)
    if served is not None:
        parts.append("the bytes each row read")
    warned = sum(1 for r in rs.results for w in r.warnings if _in_short_block(r, w))
    if warned:
        parts.append(f"{'each' if warned > 1 else 'the'} warning's message")
    if any(not _in_short_block(r, w) for r in rs.results for w in r.warnings):
        parts.append("the preflight's warning of more workers than CPUs, which the measured CPU use did not bear out")
    if cuda_used(rs):
        parts.append("what GPU util measures")
    if any(r.summary is not None and r.summary.loader_ceiling_bound is not None for r in rs.results):
        parts.append("why loader alone is a bound (≥)")
    if a.unprobed:
        parts.append("why loader alone is n/a")
    if a.profile is not None:
        parts.append("the stage profile of the pick")
    return ", ".join(parts)


_WARNING_LABELS = {
    WarningKind.REPLICATED: "counts duplicate samples (not ranked)",
    WarningKind.OVERSUBSCRIBED: "could oversubscribe, before measuring (more workers or threads than usable CPUs)",
    WarningKind.SHARED_MEMORY: "batches in flight close to the free /dev/shm",
    WarningKind.PINNING_INEFFECTIVE: "pin_memory on, but no tensor came back pinned",
    WarningKind.CACHE_NOT_ACHIEVED: "the --cache state asked for was not reached",
    WarningKind.LOADER_ENDED: "the loader ended before the window was full",
    WarningKind.FEW_BATCHES: "fewer batches measured than --batches",
    WarningKind.SAMPLE_COUNT: "the samples per batch may be miscounted",
    WarningKind.RANKS_SHARE_STREAM: "an IterableDataset on several ranks",
}


def _in_short_block(r: ConfigResult, w: Note) -> bool:
    """Whether warning `w` on `r` is named without --verbose. The preflight's "could
    oversubscribe" is said before measuring: not for a row whose measurement contradicts it (its
    process tree's CPU demand short of the usable CPUs, or its workers not waiting for a CPU on
    CPUs that other load filled, `Summary.worker_queue_share`: workers that wait on I/O)."""
    s = r.summary
    if w.kind is not WarningKind.OVERSUBSCRIBED or s is None:
        return True
    return bool(s.cpu_saturated) and s.workers_short_of_cpu is not False


def note_lines(rs: ResultSet, name: Name, *, verbose: bool = False) -> list[str]:
    """The notes on configs, each kind once with the configs it applies to: noise, batches that
    held fewer samples than batch_size, rows served from a cache, rows whose step slowed beside
    the loader, idle workers, epoch starts that point at `__iter__`, a worker slower than the
    main process, and the configs' warnings (by
    kind; with `verbose`, each message once with its configs, every row served from a cache
    and the notes on memory per worker)."""
    a = analysis_of(rs)
    out: list[str] = []

    def who(settings: LoaderSettings, cache: str | None = None) -> str:
        return name(settings) + ("" if cache in (None, "as-is") else f" ({cache})")

    noisy = [f for f in a.notes if isinstance(f, Noisy)]
    if noisy:
        out.append(
            f"Noisy (figures uncertain by more than ±{noisy[0].threshold / 2:.0%}): "
            + _configs([f"{who(f.settings, f.cache)}, " + (
                f"{f.spread:.0%} over {f.repeats} repeats" if f.repeats > 1 and f.uncertainty <= f.spread / 2
                else f"±{f.uncertainty:.0%} from its windows") for f in noisy])
            + ": measure longer (--batches, --min-time) or more often (--repeats) before trusting small differences."
        )
    for f in a.notes:
        if isinstance(f, PartialBatches) and f.last_only and f.epoch_samples and f.epoch_batches and f.last_batch:
            out.append(
                f"Partial batches (batch_size {f.batch_size}): each epoch of {f.epoch_samples:,} samples ends in a batch "
                f"of {f.last_batch:,} ({f.epoch_batches - 1} full batches and that one: {f.samples_per_batch:,.1f} samples on "
                "average), as in training: samples/s and the ceiling count it (drop_last=True leaves it out)."
            )
        elif isinstance(f, PartialBatches):
            spread = "" if f.min == f.max else f" ({f.min:,.1f}-{f.max:,.1f} across configs)"
            out.append(
                f"Partial batches (batch_size {f.batch_size}): batches held {f.samples_per_batch:,.1f} "
                f"samples on average{spread}: the epoch ends before a batch fills (a sampler with fewer indices, "
                "or a short stream split across workers), so samples/s and the ceiling are of these batches, "
                f"and batch_size={f.batch_size} in the DataLoader line names fuller batches than were measured."
            )
        elif isinstance(f, ServedFromCache):
            out.extend(served_from_cache_lines(f, name, verbose=verbose, grouped=lambda c: _grouped(rs, c)))
        elif isinstance(f, MemoryPerWorker) and verbose:
            out.append(_memory_text(f, name))
        elif isinstance(f, (StepSlowed, IdleWorkers, EpochIter, WorkerSlower, DisturbedRows)):
            out.append(finding_sentence(f, name))
    kinds: dict[WarningKind, dict[str, list[tuple[LoaderSettings, str]]]] = {}
    for r in rs.results:
        for w in r.warnings:
            if not verbose and not _in_short_block(r, w):
                continue
            kinds.setdefault(w.kind, {}).setdefault(w.message, []).append((r.settings, r.cache))
    if kinds and not verbose:
        # A kind of its own is labelled with the configs it applies to; a note of no kind
        # (OTHER) has only its message to say what it is.
        parts = []
        for kind, by in kinds.items():
            if kind is WarningKind.OTHER:
                parts += [f"{message} ({_grouped(rs, configs)})" for message, configs in by.items()]
            else:
                parts.append(f"{_WARNING_LABELS.get(kind, kind.value)}: {_grouped(rs, [c for cs in by.values() for c in cs])}")
        out.append("Warnings: " + "; ".join(parts) + ".")
    elif kinds:
        for by in kinds.values():
            for message, configs in by.items():
                out.append(f"Warning ({_grouped(rs, configs)}): {message}")
    return out


def _memory_text(f: MemoryPerWorker, name: Name) -> str:
    differs = ", ".join(instead(d.axis, d.value, d.other) for d in f.differs)
    setting = f.differs[0].axis if f.differs else ""
    why = {
        "mp_context": "spawn and forkserver start every worker as a fresh interpreter that imports torch "
                      "and unpickles the dataset, where fork shares the parent's pages",
        "pin_memory": "pinned (page-locked) copies of the batches in flight, held by the main process",
        "prefetch": "the CUDA prefetcher holds one more batch, on the device and pinned on the host",
    }.get(setting, "this setting multiplies memory per worker")
    rows = ""
    if f.pss_mib is not None and f.ref_pss_mib:
        rows = f"; the rows' PSS {f.pss_mib:,.0f} vs {f.ref_pss_mib:,.0f} MiB ({f.pss_mib / f.ref_pss_mib - 1:+.0%})"
    return (f"Memory per worker ({name(f.settings)}): {f.mib_per_worker:,.0f} MiB (PSS) vs "
            f"{f.ref_mib_per_worker:,.0f} MiB with {name(f.ref)} ({differs}{rows}): {why}.")


def _fetch_prep_text(fp: FetchPrep, rs: ResultSet, name: Name) -> str:
    text = (
        f"Fetch/prep ({_named_key(rs, name, fp.key)}): mean wait per batch cold {fp.cold_wait_s * 1e3:.1f} ms, warm "
        f"{fp.warm_wait_s * 1e3:.1f} ms: fetch (storage, cold - warm) {fp.fetch_s * 1e3:.1f} ms, "
        f"prep (decode, augment; warm) {fp.prep_s * 1e3:.1f} ms: bound by {fp.bound.value}."
    )
    if fp.warm_slower_s is not None:
        text += (f" (the warm run waited longer than the cold one by {fp.warm_slower_s:.3g} s: fetch is within "
                 "noise (measure longer or repeat))")
    return text


def per_rank_line(rs: ResultSet) -> str:
    """Distributed sweeps: how close each rank of the recommended config comes to its own
    compute ceiling ('' when not distributed or unknown)."""
    rec = rs.recommendation
    if rec is None or rec.settings is None:
        return ""
    row = next((r for r in rs.results if r.settings.key() == rec.settings.key() and r.summary), None)
    if row is None or not row.summary or not row.summary.rank_samples_per_s:
        return ""
    shares = row.summary.rank_ceiling_shares
    rates = ", ".join(f"r{r} {x:,.0f}" for r, x in enumerate(row.summary.rank_samples_per_s))
    text = f"Per rank (samples/s): {rates}"
    if shares:
        worst = min(range(len(shares)), key=shares.__getitem__)
        text += (
            f"; every rank at least {shares[worst]:.1%} of its own compute ceiling "
            f"(lowest: rank {worst})"
        )
    return text + "."


_NO_PREDICTION = {
    WhyNoPrediction.NOTHING_MEASURED: "no config was measured",
    WhyNoPrediction.NO_WORKERS_MEASURED: "no config with workers was measured",
    WhyNoPrediction.BYTES_UNKNOWN: ("the bytes per sample are not known (give the files the dataset reads with "
                                    "--data, for a dataset with a length)"),
    WhyNoPrediction.NO_CACHED_ROWS: ("no row was served from a cache, so the work per sample cannot be told from "
                                     "this device's reads: sweep with --cache both (or warm)"),
    WhyNoPrediction.NO_LOADER_RATE: "the rows served from a cache give no loader rate for this series",
}


def what_if_lines(what: WhatIfAnswer, name: Name = describe) -> list[str]:
    """The what-if prediction (`Analysis.what_if`) in words, labelled a prediction, with what
    binds where its curve flattens."""
    if what.question.changes_build:
        return what_if_build_lines(what, name)
    if what.question.disk_mb_per_s is not None:
        return _what_if_disk_lines(what, name)
    cpus = what.question.cpus
    if what.knee is None:
        return [f"What if {cpus} usable CPU{'s' if cpus != 1 else ''}: no prediction (no config with workers was measured)."]
    return [
        f"What if {cpus} usable CPU{'s' if cpus != 1 else ''} (a prediction from the pipeline model fitted on this run's measured configs, "
        f"not a measurement): {_knee_and_curve(what, name)}{series_sentence(what, name)}"
    ]


def _knee_and_curve(what: WhatIfAnswer, name: Name) -> str:
    """A what-if's predicted knee (workers, samples/s, stall, config) and its curve, in words."""
    assert what.knee is not None
    stall = what.knee_stall_fraction
    shown = set(what.shown_workers)
    curve = ", ".join(f"{w}: ~{x:,.0f}" for w, x in what.curve if w in shown)
    w = what.knee_workers
    return (f"knee ~{w} worker{'' if w == 1 else 's'}, ~{what.knee_samples_per_s or 0.0:,.0f} samples/s"
            + ("" if stall is None else f", stall ~{stall:.0%}")
            + f" ({name(what.knee)}). Predicted samples/s by num_workers: {curve}{binds_clause(what.binds, what.binds_near)}.")


def _what_if_disk_lines(what: WhatIfAnswer, name: Name) -> list[str]:
    """The storage what-if (analysis.predict.what_if_disk) in words, labelled a prediction."""
    q = what.question
    device = f"{q.disk_mb_per_s:g} MB/s" + ("" if not q.disk_iops else f", {q.disk_iops:g} reads/s") + (
        "" if q.cpus is None else f", with {q.cpus} usable CPU{'s' if q.cpus != 1 else ''}")
    if what.knee is None:
        why = _NO_PREDICTION.get(what.why, "nothing to fit") if what.why is not None else "nothing to fit"
        return [f"What if the files were on a device of {device}: no prediction ({why})."]
    files = what.files_per_sample or 1.0
    return [
        f"What if the files were on a device of {device} (a prediction from the pipeline model fitted on the rows "
        f"served from a cache, {_configs([name(s) for s in what.from_rows])}, plus {(what.bytes_per_sample or 0) / 1e3:,.1f} kB and "
        f"{files:.2g} file read{'' if files == 1 else 's'} per sample from "
        f"the device; not a measurement): the device feeds at most ~{what.device_samples_per_s or 0.0:,.0f} "
        f"samples/s; {_knee_and_curve(what, name)}"
    ]

