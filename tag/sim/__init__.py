"""The event-driven simulator of one training iteration.

Three parts: the builder (`tag.sim.build`) turns (GroupGraph, Cluster, CostModel, Strategy, TrainingConfig,
options) into a task graph (`tag.sim.taskgraph`: compute tasks, transfers, sync units, memory inputs, per-device
programs); the event loop (`tag.sim.events`) runs a task graph on the links; the critical-path estimate
(`tag.sim.critical_path`) reads the same task graph. `simulate` (`tag.sim.engine`) is build + run + memory + trace.
A new strategy kind adds builder code and leaves the event loop alone.

Model (what the search, SFB and fidelity work can rely on):

Tasks. For every group g and every device d with rows r = strategy.decisions[g].rows[d] > 0 there is a
forward task (cost.group_fwd_ms(g, type(d), r)) and a backward task (cost.group_bwd_ms). Each device that
holds parameters has one optimizer-step task (as ``optimizer.step()`` after backward and sync), lasting the
sum of cost.update_ms over its groups, that waits for every sync covering the device. Each device has one
compute stream that runs its tasks in a fixed program order: forwards in group (topological) order, then
backwards in reverse order, then the optimizer step. A task starts when the stream is free and all its
remote inputs have arrived; same-device dependencies are satisfied by the program order.

Transfers. For a group edge src -> dst, the row slices that move are exactly
`tag.strategy.slices(rows[src], rows[dst])`, each ``rows x bytes_per_row`` bytes, merged per device pair;
unbatched tensors (bytes_fixed) go whole from the first producer device (topology order) to every
consumer device that does not compute the producer. A transfer starts when the producer's forward ends
and its delivery unblocks the consumer's forward. In backward the same pairs carry the gradients the
other way, from the consumer's backward to the producer's backward. A device pair on an edge with no
bytes still gets a latency-only message (a control dependency).

Gradient sync. A replicated group's own gradients (of the parameters only it reads; those several groups read, per
``GroupGraph.shared_params`` {name: group ids}, sync once over the union of their devices) go
into a gradient bucket (`tag.sim.buckets`: DDP's rule, reverse backward order, one replica set and sync per
bucket, Strategy.bucket_mb the cap; 0 = one bucket per group). A bucket syncs when the backward of all its groups
has finished on all its replicas, while other backwards continue; with ``simulate(..., overlap_sync=False)``, as
the `tag deploy` runtime runs them, a sync also waits until each of its devices has finished its whole backward.
Syncs over the same device set run one at a time in the order they become ready (one communicator per device
set); syncs over different sets run concurrently. A bucket's algorithm is its groups' Decision.sync (None ->
ring; "auto" -> the cheapest of ring, tree and hierarchical by `tag.sim.algorithms.choose_algorithm`): see
`tag.sim.collectives` for the flows each algorithm puts on the network. `tag.sim.gradsync.group_sfb_syncs` is the
one place of the per-op sufficient-factor (SFB) path (`tag.sim.sfb`, as `tag.deploy.sfb` runs it): each
op in Decision.sfb of a replicated group takes its weight out of the group's bucket and adds two ring
all-gathers (X and dY over the group's rows) on the same communicator, before the group's bucket; its backward skips the local dW product and each replica's optimizer step first forms dW over all
rows (a roofline matmul). A cost model may offer ``sync_copy_ms(device_type, nbytes) -> (in, out)``: a
sync (not an SFB all-gather) then starts its flows ``in`` ms after it begins (the ranks' memory work on the bucket)
and releases its optimizer steps and communicator ``out`` ms after its last phase (copying it back, if any),
the slowest of its devices each time; cost models without it (the roofline) charge 0.

Memory and precision decisions (docs/plan.md § memory and precision). ZeRO (`tag.sim.zero`): a bucket of groups at
stage 1 or 2 reduce-scatters instead of all-reducing, each replica's optimizer step updates its 1/n share, and an
all-gather of the updated weights after the step ends the iteration (a zero-length "wait" task per replica); at
stage 3 the group's weights are also all-gathered before its forward and again before its backward (prefetched:
issued when the task before starts), with no all-gather after the step; a pipelined stage-3 group gathers once
per step. The reduce-scatter and all-gather are the two halves of the ring (or hierarchical) all-reduce
(`tag.sim.collectives`); buckets hold one ZeRO stage. Recompute: a group's backward lasts its backward plus its
forward (the re-run). Precision (`tag.sim.precision`): under fp16 / bf16 the float32 activations, their gradients
and SFB factors that cross devices move 2 bytes per element; gradient syncs and ZeRO's collectives stay fp32.

Shards (`Decision.shard`, `tag.sim.shards`, `tag.sim.shard_build`). Device j of a sharded group's replica computes
the replica's rows at share_j of the sharded ops' time plus the other ops whole; after a pass, the replica's
collectives (forward: all-reduce of row halves' partial outputs, padded all-gather of split outputs a consumer
needs whole; backward: all-reduce of column halves' input gradients) run as one sync unit between the pass and a
zero-length tail task; edges move row x feature pieces (`tag.strategy.pieces`); weight gradients sync per
position over `Shard.peers`; memory holds the device's weight slices.

Network. Communication never uses a compute stream. Every flow follows the cluster's routes over
directed links (full duplex: opposite directions never interact). Flows that share a directed link share
its bandwidth max-min fairly (weighted progressive filling, recomputed at each flow start and finish;
`tag.sim.network`). A flow's latency (route latency; ring: steps x largest hop latency) is added after
its bytes drain. Alone on its route a flow therefore takes exactly the `tag.cost.comm` formula.

Result. iteration_ms is when the last task ends; samples_per_s = global batch / iteration seconds;
busy_ms is compute-stream time per device; link_bytes the bytes per directed link. Memory (see
`tag.sim.memory`) is a per-device peak in program order, independent of timing; a device whose peak
exceeds DeviceType.usable_memory_bytes is OOM, and then iteration_ms = inf and samples_per_s = 0
(fit_iteration_ms keeps the time ignoring memory). Gradient contributions are weighted by rows, which
changes no time.
"""

from tag.sim.critical_path import Estimate, estimate
from tag.sim.engine import simulate
from tag.sim.result import SimResult
from tag.sim.trace import write_chrome_trace

__all__ = ["simulate", "SimResult", "write_chrome_trace", "estimate", "Estimate"]
