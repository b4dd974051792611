"""Inside the user's own training loop: `loaderbench.watch` (`watcher.Watch`), timed with the same
engine (measure/timing.py) and Trial assembly (measure/assembly.py) as the sweep's measuring
process.

- `watcher`: `Watch`, the loop's protocol (iteration, callbacks, the measured window);
- `loader`: what the watched loader is (its DataLoader settings, the samples in a batch);
- `usage`: the window meter's readings summed over the window's segments;
- `ranges`: profiler ranges around the data-wait, the H2D copy and the step;
- `result`: the trial gathered from every rank, the one-config `ResultSet` (analysed: the
  prediction of what more workers would give is the analysis's) and the settings to try next.
"""
