"""What runs in the isolated measuring process, and the isolation around it.

- `isolation`: one trial in a fresh process (`python -m loaderbench.measure.child`) under a
  watchdog that kills its whole process tree; the parent side;
- `child`: the measuring process's entry point;
- `trial`: the DataLoader, the step and the measured `Trial` of one config, or the compute
  ceiling;
- `timing`: the one timing engine, shared with `loaderbench.watch`: the markers (host clock,
  synchronised, CUDA events), recorded instants split into data-wait, compute and step time,
  the warm-up's end (NOTE [timing model], NOTE [backlog drain]);
- `assembly`: the one Trial assembly, shared with `loaderbench.watch`;
- `loop`: the sweep's timed loop and the probes after its window;
- `meter`: CPU, memory, storage reads and GPU utilisation over the window;
- `sampling`: the indices a trial draws, and what drawing them costs;
- `threads`: worker threads that cannot deadlock after fork;
- `introspect`: what the DataLoader and CUDA show of a running trial;
- `ranks`: a distributed trial's process group and shards.
"""
