"""Every threshold the analysis decides with, in one place, each with where its value comes from:
a published figure, a measurement (where it is recorded), or a choice and why.

Values only: no functions and no imports. tests/test_analysis_pipeline.py checks that every
constant here says its source and that no other analysis module keeps a threshold of its own.
"""

# -- Input-bound bands and verdicts -----------------------------------------------------------

# published: the input-bound bands of the stall fraction used in data-stall analyses (Mohan et al.,
# "Analyzing and Mitigating Data Stalls in DNN Training", VLDB 2021): under 5% not input-bound,
# 5-20% moderately, over 20% highly. A config under 5% stall is compute-bound.
NOT_INPUT_BOUND_MAX = 0.05
# published: the upper edge of "moderately input-bound" (Mohan et al., VLDB 2021, as above).
MODERATELY_INPUT_BOUND_MAX = 0.20
# published: the stall from which a verdict names what the step waits for (the first band's edge).
LOADER_BOUND_STALL = NOT_INPUT_BOUND_MAX
# choice: a p95 wait of half a median step starves the step now and then even at a low stall; half
# a step is where one late batch in twenty costs as much as the band's 5% edge.
TAIL_WAIT_OF_STEP = 0.5
# choice: the tail alone names a verdict only with at least 2% stall (under it a few slow batches
# are noise of the window, not a pattern worth a remedy).
TAIL_MIN_STALL = 0.02
# choice: the CPUs count as saturated when the process tree and the other load on them used 85%
# of the usable CPUs (a busy machine never reads 100%: the meter's window edges and the main
# process's idle moments between steps keep it lower).
CPU_SATURATED = 0.85
# measured: workers count as short of CPU on saturated CPUs when runnable without a CPU for 20% of
# their window or more (their run-queue delay, /proc/PID/schedstat). On the 2-core machine, 4
# workers sleeping 40 ms a sample waited 0.001 of their window alone and 0.003 beside 2 busy
# loops; 4 busy workers 0.51 alone and 0.67 beside the loops; a latency-bound sweep beside 1.3-2.0
# cores of other load read 0.001-0.024 (docs/benchmarks.md section 31). 0.2 sits far from both.
WORKERS_QUEUED = 0.2

# -- Periodic stalls (analysis/wait.py, stall_period) ------------------------------------------

# choice: a period needs at least 12 measured batches (four periods of the shortest, 3).
PERIOD_MIN_BATCHES = 12
# choice: the longest wait must be at least a quarter of the median step (and 0.5 ms) to stand out.
PERIOD_MIN_WAIT_OF_STEP = 0.25
# choice: a wait of 0.5 ms is below what a stall that matters looks like on any step we measure.
PERIOD_MIN_WAIT_S = 0.0005
# choice: Pearson's r of 0.5 at the lag: a moderate correlation, reached by sawtooths of 2-16
# workers in the tests' synthetic loaders and by none of their steady ones.
PERIOD_MIN_AUTOCORRELATION = 0.5
# choice: a later lag beats an earlier one only by 0.1 of r (its multiples correlate as well).
PERIOD_BETTER_BY = 0.1
# choice: the stalls (the upper class of Otsu's split) average at least twice the other waits.
PERIOD_STALL_OVER_REST = 2.0
# choice: the stalls number at least half of what a period over the whole window makes.
PERIOD_MIN_STALL_SHARE = 0.5
# choice: workers that finish 2 batches or more together hand a window its batches in runs
# between a block's builds: its rate is taken over whole cycles (NOTE [whole blocks in the
# window] in analysis/statistics.py).
BLOCK_UNIT_BATCHES = 2.0

# -- Noise and the knee (analysis/knee.py) ------------------------------------------------------

# choice: the default tolerance of the knee (--tolerance): 5% of throughput, the edge of the first
# input-bound band, below which a faster config buys nothing a training run notices.
DEFAULT_TOLERANCE = 0.05
# choice: repeats that spread over 10% of their median are flagged noisy; the README's table of
# verdicts says so. A row's uncertainty (± half that spread, or its windows' two standard errors)
# past half of it is flagged so too.
NOISY_SPREAD = 0.10
# choice: a window's standard error is estimated from whole rounds of num_workers batches (an
# in-order loader's waits repeat each round), and needs at least 4 of them: with 4 or more, twice
# the estimate covered the long-run rate in 93-96% of 300 simulated 1-s windows of in-order
# loaders whose builds vary (2-16 workers; benchmarks/window_uncertainty_sim.py, docs/benchmarks.md
# section 32); with fewer it is too rough to state.
WINDOW_SE_ROUNDS = 4
# published: two standard errors, the half-width of an approximate 95% interval (normal theory).
WINDOW_SE_Z = 2.0
# choice: a config within noise of the best is at most twice the tolerance below its median, so a
# clearly slower config never counts as equal however spread out the best's repeats are.
NOISE_CAP = 2.0
# choice: the knee's cost filters (NOTE [cost order]): within 10% plus an absolute margin of the
# cheapest on memory (32 MiB), start-up (50 ms) and CPU (10% of a core, as the percent it is read in).
COST_RELATIVE = 0.10
COST_MEMORY_MARGIN_BYTES = 32 * 2**20
COST_STARTUP_MARGIN_S = 0.05
COST_CPU_MARGIN_PCT = 10.0

# -- Findings (analysis/advice.py) --------------------------------------------------------------

# choice: a batch of 16 tensors or more is worth packing (each tensor crosses from a worker on its
# own; below that the per-tensor cost is small against the batch's).
SMALL_TENSORS = 16
# choice: a wait part is reported when it is at least 5% of the step (the first band's edge).
PART_REPORTED = 0.05
# choice: below 10 MB/s, what the worker->main hand-off costs is not its bytes.
TRANSFER_MIN_MB_PER_S = 10.0
# choice: the hand-off is a large part of the wait when receiving a batch takes a quarter of the
# mean wait (and at least 1 ms).
TRANSFER_RECEIVE_OF_WAIT = 0.25
TRANSFER_MIN_RECEIVE_S = 0.001
# choice, informed by a measurement: on saturated CPUs, fewer workers receiving the same batch in
# two thirds of the time or less means contention swells the receive (on the 2-core machine a
# 0.8 MB batch took 6.7 ms at 2 workers on 1.9 busy cores, 1.5 ms where the CPUs had room).
RECEIVE_CONTENDED = 0.67
# choice: a row with more workers whose median wait is at least half the receive part still
# waits on it; below half, more workers took part of what was read as the receive.
RECEIVE_REMAINS = 0.5
# choice: a remedy measured inside the tolerance acts on the wait when its row waited at most half
# the config's stall (the prefetcher that hid a copy: 0% against 8%); persistent workers at +0.5%
# with the stall unchanged (35% against 35%) did not act on an epoch start.
REMEDY_REMOVED_WAIT = 0.5
# choice: two ceilings within 10% of each other are "matched": neither has the margin that
# absorbs the other's jitter.
MATCHED = 0.10
# choice, informed by a measurement: workers that spend 1.25x the CPU per sample of the fewer-worker
# rows mean the cores slowed; on the H200 run that motivated it they spent 3.7 ms against 2.1 ms
# (1.76x; docs/benchmarks.md, "Run 3 of call 1").
CORES_SLOWER = 1.25
# choice: other processes' load is worth a finding from one whole core and 10% of the usable CPUs,
# or from a quarter of the usable CPUs on a machine with fewer than four (0.99 of a core on 2 CPUs
# slowed a 0-worker row by 37% against a quiet run and went unsaid).
OTHER_LOAD_CORES = 1.0
OTHER_LOAD_SHARE = 0.1
OTHER_LOAD_SMALL_SHARE = 0.25
# choice: a row whose own windows ran beside other load (other processes and the hypervisor's
# steal) of a tenth of the usable CPUs and twice the median over the sweep's rows had a burst of
# its own: on 2 CPUs, rows at 51, 53 and 56 workers measured under 0.22-0.32 cores of steal (the
# rows' median 0.05) read 16-19% under plain loops and their neighbours, with nothing to mark them
# (docs/benchmarks.md section 34f).
DISTURBED_SHARE = 0.1
DISTURBED_OVER_MEDIAN = 2.0
# choice: other processes' cores are named beside a CPU cause from half a core.
OTHER_CORES_NAMED = 0.5
# choice: the hypervisor's steal is named from 0.05 of a core (what the sentence rounds to 0.1).
STEAL_CORES_NAMED = 0.05
# choice: rows whose device MB/s agree within 15% read at the device's rate (the H200 and loop
# device runs read 2-8% apart at one rate, docs/benchmarks.md, "storage").
DEVICE_FLAT = 0.15
# choice: batches holding under 90% of batch_size on average are named "partial batches".
PARTIAL = 0.9
# choice: a setting multiplies memory per worker at twice the PSS per worker of a config that
# differs in it alone, and at least 64 MiB more (below that, page-sharing noise).
MEMORY_PER_WORKER_FACTOR = 2.0
MEMORY_PER_WORKER_MIN_BYTES = 64 * 2**20
# choice: ...and only when the rows' PSS, as the table's column shows it, differs by a quarter or
# more: per-worker figures 86 vs 10 MiB on rows whose PSS differed by 12% (a row's workers young or
# gone when sampled) are no setting that multiplies memory.
MEMORY_TOTAL_FACTOR = 1.25
# choice: worker start-up is worth a finding when it is over 5% of an epoch (the first band's edge).
STARTUP_SHARE = 0.05
# choice: persistent workers are advised when their epoch-start gaps are under half the knee's.
PERSISTENT_GAP_OF_KNEE = 0.5
# choice: the sampler's draw before the first batch is named from 10 ms (what the sentence rounds
# to 0.01 s).
SAMPLER_NAMED_S = 0.01
# choice: the knee's step runs slower beside the loader when the knee is under 95% of the compute
# ceiling and its mean compute over 5% above the step alone (the timing's own noise is under that).
STEP_SLOWER_SHARE = 0.95
STEP_SLOWER_COMPUTE = 1.05
# choice: ...and only where the slower step explains at least half of the knee's shortfall from the
# ceiling (its slowdown at least half of ceiling / knee - 1): a receive-floor knee at 57% of the
# ceiling with its step 5% slower was said to fall short "because the step itself runs slower",
# where its 39% stall was the cause; the H200 knees it names fall 13-20% short with steps 12-20% slower.
STEP_SLOWER_EXPLAINS = 0.5
# choice: a row whose median step (the compute column) ran over 10% slower beside the loader than
# the step alone is named as such, not compute-bound: the training process was short of CPU or the
# host was disturbed. Twice STEP_SLOWER_COMPUTE's margin (the timing's own noise is under 5%); a
# slowed row of a default H200 sweep ran 67.9 ms against 55.0 ms in every other row (+23%).
STEP_SLOWED = 0.10
# choice: ...and by at least 1 ms: a sleep step oversleeps by 0.1-0.4 ms on a busy 2-CPU machine, a
# few percent of a short step, which is the timer's, not a slowed step.
STEP_SLOWED_MIN_S = 0.001
# choice: "leave N CPUs free for the training process" only where its main process needs half a
# core or more at the step's own pace; under that the step waited to be scheduled, not for a core
# of its own, and a CPU taken from the workers costs the loader more than it gives (on 2 CPUs a
# main process of 0.06 cores was told to leave 1 free; the 4-worker row, at 1.46 cores, measured
# 25% below the 8-worker row the same output recommended).
LEAVE_FREE_MIN_CORES = 0.5
# choice: a worker that delivered under a quarter of an equal share of a window's batches (batches
# / num_workers) takes no real part in it: with the DataLoader's in-order round robin every working
# worker delivers its equal share to within one batch, so a quarter is far from any working one.
IDLE_WORKER_SHARE = 0.25
# choice: ...judged only in a window of at least 2 batches per worker: a window shorter than a round
# of the workers (10 batches from 16 workers) leaves working workers without a batch in it.
IDLE_MIN_BATCHES_PER_WORKER = 2
# choice: a loader-bound row whose workers use under 30% of a core each on average waits on
# latency (storage, the network), not CPU: a sample's CPU time under 30% of its wall time in the
# worker, where more requests in flight help past the core count.
LATENCY_WORKER_CORES = 0.30
# choice: with persistent workers, an epoch's first batch that waits 4 or more times a steady
# batch's build (and at least 50 ms) is not the pipeline refilling (one build): work the dataset
# (or sampler) does in its own __iter__ at every epoch start.
EPOCH_ITER_FACTOR = 4.0
EPOCH_ITER_MIN_S = 0.05
# choice: one worker building a batch 3 or more times slower than the main process does at 0
# workers is "several times" slower (the motivating tokenizer case ran about 8x: a library that
# turns its threads off in forked children); contention between 2-3 processes on 2 CPUs stays
# under 2x.
WORKER_BUILD_SLOWER = 3.0
# choice: a receive floor is contradicted when the same config with more workers ran this much
# faster (more workers cannot lower the cost of receiving a batch). A batch of 113 tensors, a true
# floor, read 2 and 4 workers within 3% on a quiet 2-core machine and over 10% apart in one trial
# under other load; the GIL-held sends this catches ran 19-37% faster with more workers.
RECEIVE_CONTRADICTED = 0.15
# choice, informed by a measurement: a receive floor (a wait no num_workers removes) is named only
# where the receive is at least half the wait; where it is less, more of the wait is parts settings
# act on (on 2 CPUs, 4 workers of a sleep-bound dataset read a floor from 2.9 ms of receive in a
# 7.8-ms mean wait, beside 2.7 ms of batches not built in time, with rows still rising 489 to 610
# samples/s from 3 to 4 workers).
RECEIVE_FLOOR_SHARE = 0.5
# definition: a part is "most" of the wait at half of it or more; under half it is named as the
# largest part, with the mean wait beside it.
PART_MOST = 0.5
# choice: a worker's build includes handing the batch over (pickling it into shared memory,
# about what the main process's receive costs), which the main process at 0 workers never pays;
# the extra time per batch must exceed WORKER_SLOWER_HANDOFF receives, and WORKER_SLOWER_MIN_S,
# to be work running slower (a tensor dataset of 5 us samples at batch 32 built 7.9x "slower"
# in a worker: 0.2 ms of work and about 1 ms of hand-off).
WORKER_SLOWER_HANDOFF = 4.0
WORKER_SLOWER_MIN_S = 0.001
# choice: a worker slower because its work runs slower (a library's threads turned off in a
# fork, a slower path taken there) is busy on a CPU while it builds; one slower because handing
# the batch over blocks it is not. The fewest-workers row's workers must have used at least
# WORKER_SLOWER_BUSY of a core each ((tree CPU - main process CPU) / num_workers): a thread
# pool serialised after fork read 0.99 (4.4x slower), a tensor dataset of 1.6-MB batches 0.53
# (9.1 ms a batch in one worker against 0.3 ms in the main process, its time in the hand-off).
WORKER_SLOWER_BUSY = 0.75
# choice: configs past the knee are "more, not better" when they use over half a core more.
MORE_NOT_BETTER_CORES = 0.5
# choice: building batches does not explain the wait when the stall its rate explains is under
# half the measured one.
BUILD_RATE_EXPLAINS = 0.5
# choice: a wait whose p95 is over 1.5x its median sits in its tail; under, it is a steady cost.
TAIL_OVER_MEDIAN = 1.5

# -- Predictions (analysis/predict.py) ----------------------------------------------------------

# choice: the softmin's sharpness k when no measured config calibrates it (a corner about as sharp
# as the calibrated ones of the recorded CPU runs).
DEFAULT_SHARPNESS = 6.0
# choice: the softmin's sharpness is calibrated by bisection within [1.5, 30]: 1.5 is a corner so
# soft that both rates always bind a little, 30 one that is a hard minimum to within 2.5%.
SHARPNESS_MIN = 1.5
SHARPNESS_MAX = 30.0
# choice: a config that ran within 1% of the lower of its two rates ran at it (the calibration's
# own noise); when the two rates are within 1.25x of each other it counts as a hard corner.
AT_THE_LOWER_RATE = 0.99
HARD_CORNER_RATIO = 1.25
# choice: where the main process's receive takes at least a quarter of its time per sample (the
# receive and the step in turn), the receive is named as what binds, not the step alone (a
# pageable copy inside next() of 32 ms beside a 55 ms step held a series to 2,900 samples/s, a
# ceiling of 4,650).
RECEIVE_BINDS_SHARE = 0.25
# choice: where the host-to-device copy is at least half of the main thread's time besides the
# step, a prediction where the main thread binds names the copy, as a measured row's verdict
# names its largest wait part (on 8 CPUs of the H200 host the what-if said "the step binds" where
# the measured run read `H2D-bound (pageable copy)`: 6.9 ms of copy beside a 54.5-ms step).
H2D_BINDS_SHARE = 0.5
# choice: configs with at most half the usable CPUs in workers give the uncontended per-worker rate.
UNCONTENDED_SHARE = 0.5
# measured: a loader-bound window that waited a quarter of its time or more ran at the loader's
# rate; replaying the recorded H200 searches with it took the median prediction error from 13.8%
# to 8.9% (NOTE [which rate stands for the loader], docs/benchmarks.md, "Time to the answer").
BOUND_STALL = 0.25
# choice: a predicted stall under 10% "clears" the loader (the middle of the moderate band);
# above it more workers only give the most they can.
CLEARS_STALL = 0.10

# -- Compare and check (analysis/compare.py, NOTE [ The decision rule ]) -----------------------

# choice: a change is worth a red CI run from 10% of throughput (--threshold); the CI gate's
# benchmark flagged 20 of 20 runs slowed by 1.25x and none of 20 unchanged (docs/benchmarks.md).
DEFAULT_THRESHOLD = 0.10
# published: the conventional significance level of 5% (--alpha), as asv's compare uses.
DEFAULT_ALPHA = 0.05
# choice: three fresh-process trials a side make the trial the unit (3 vs 3 is the smallest
# design whose bootstrap interval can exclude no change at 5%).
MIN_REPEATS = 3
# published: 2,000 bootstrap resamples for a percentile interval (Efron & Tibshirani, "An
# Introduction to the Bootstrap", 1993, ch. 13, advise 1,000 or more for intervals).
BOOTSTRAP_RESAMPLES = 2000

# -- Storage (render of part-cached rows) ------------------------------------------------------

# choice: a row that read between 10% and 90% of its bytes from the device was part cached (the
# accounting's own edges for "storage" and "cache", storage/accounting.py).
PART_CACHED_MIN = 0.1
PART_CACHED_MAX = 0.9

# -- The stage profile (analysis/stages.py) ---------------------------------------------------

# choice: a stage is waiting (blocked on I/O, a lock, a sleep) when more than half of its wall time
# less the time it was queued for a CPU (what it would take on a quiet machine) was spent neither
# on a CPU nor queued for one: the judgement holds on a busy machine too...
STAGE_BLOCKED_FRACTION = 0.5
# choice: ...and that time is at least 0.05 ms per sample (below it, timer noise).
STAGE_WAITING_MIN_MS = 0.05
# choice: a stage that spent a quarter of its wall time queued for a CPU ran beside other load.
STAGE_QUEUED_THAT_COUNTS = 0.25
# choice: stages of at least 5% of a sample's time (the first band's edge) are the ones the profile
# is checked on (docs/benchmarks.md); below it a stage's ms is shown but not worth acting on.
STAGE_SHARE_THAT_COUNTS = 0.05
# choice: a profiling thread queued for a CPU 5% of its samples' time ran beside other load: its
# wall times are longer than a quiet machine's.
STAGE_QUEUED_SHARE_THAT_COUNTS = 0.05
# choice: an IterableDataset whose slowest item holds a quarter or more of its run's time finishes
# items in blocks: two runs of the profile's items then differ by where the blocks fall, and the
# profile's own cost is not read from them.
STAGE_BLOCK_ITEM_SHARE = 0.25
# choice, informed by a measurement: a per-sample tail is long when the slowest samples (the
# larger of the p99 and the mean of the slowest 1%, NOTE [the tail of a sample's build time] in
# analysis/stages.py) take 4x the median: in order, a sample that slow holds its batch for several
# batches' time of the others. On the 2-core machine the long-tail case (1% of samples 20x slower,
# tests/fixture_datasets.py LongTail) read 10-19x in three profiles (2-6 slow samples of 400), the same
# samples without the tail 1.0-1.3x, the embedded JPEGs (less the time queued for a CPU) 1.3x.
TAIL_SAMPLE_OVER_MEDIAN = 4.0
# choice: ...and at least two samples are that slow: one sample held up once (a page fault, a
# collection, a hiccup of a shared machine: 128 ms for one JPEG of 2 ms in one profile on the 2-core
# machine) is no tail; 400 samples hold two of a 1% tail in 91% of draws.
TAIL_MIN_SAMPLES = 2
# choice, informed by a measurement: ...and the slowest take at least this many milliseconds: the
# samples of a tensor dataset (a few microseconds each) read 12x in the slowest 1% on scheduler
# noise of a shared 2-core machine, where no batch waits on them.
TAIL_MIN_MS = 1.0
# choice: a dataset without __getitems__ is named when its fixed cost per call is a quarter of a
# sample's build time or more (a column store's query, 8 ms fixed against 0.05 ms per row, is 99%):
# paid once per batch instead, one worker then builds at least 1.3x faster at a batch of 16.
BATCHED_FETCH_FIXED_SHARE = 0.25

# choice, informed by a measurement: a GPU decode whose calling thread's CPU time is at least this
# share of its GPU time holds the main thread for the whole decode (torchvision's batched nvJPEG
# waits for its result): a side stream cannot overlap it with the step, and its overlapped case is
# the serialised one. On the H200 case: 68.6 ms of CPU for 68.6 ms on the GPU per batch of 256,
# and the prefetcher's row ran at 2,099 samples/s where serialised predicted 2,058 and
# overlapped 3,531 (NOTE [what-ifs beyond the knobs] in analysis/predict.py).
HOST_WAITS_SHARE = 0.8
