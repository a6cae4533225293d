// How one reconcile creates a job's missing pods: in batches that grow, stopping at the first
// refusal, and no more than a cap per pass.
//
// Note [Slow start]
// A 4,096-pod job once created every missing pod in one reconcile, and a refused create (a
// ResourceQuota, an admission webhook, a namespace being deleted) failed the reconcile, whose
// retry sent all of them again: thousands of doomed requests a minute from one job, while
// every other job waited behind it. As the Kubernetes Job controller does, a pass now sends
// batches of 1, 2, 4, ... (each at most --create-parallelism, the requests in flight at once)
// and stops at the first batch with a refusal: against a quota that refuses pods, a pass costs
// one request, and the retry's backoff (5 ms doubling to 60 s) spaces the passes. A pass also
// creates at most --max-pod-creates-per-pass pods; the rest wait for the next pass, which the
// created pods' own watch events queue at the back of the work queue (first in, first out),
// behind every job already waiting. So jobs take turns, each a pass's worth of creates at a
// time, and a small job queued behind a huge one waits for one pass, not for all of it.
#pragma once

#include <vector>

namespace lockstep::controller {

// The sizes of the batches that create up to `missing` pods in one pass: 1, 2, 4, ... each at
// most `max_batch`, together at most `per_pass` (values below 1 count as 1).
std::vector<int> slow_start_batches(int missing, int max_batch, int per_pass);

}  // namespace lockstep::controller
