"""Checks a worker's environment against torchrun's rules (torch 2.11).

Run as the worker command: python3 torchrun_env_check.py NNODES NODE_RANK NPROC MASTER_ADDR
MASTER_PORT RUN_ID. The expected values are computed here from the documentation of
torch.distributed.run ("Environment variables" and "Definitions"), independently of the
agent's code, and compared with what the process actually sees. Exit 0 when they agree;
exit 1 listing the differences. The list of variables is the one torch 2.11's
LocalElasticAgent._start_workers and DefaultLogsSpecs.reify set for each worker.
"""
import os
import sys


def torchrun_expected(nnodes, node_rank, nproc, master_addr, master_port, run_id, restart_count):
    # Definitions (torch.distributed.run): LOCAL_WORLD_SIZE is --nproc-per-node; WORLD_SIZE is
    # the total number of workers; with one worker group per node GROUP_RANK is the node's rank,
    # and a worker's RANK is GROUP_RANK * LOCAL_WORLD_SIZE + LOCAL_RANK (homogeneous groups).
    local_rank = int(os.environ["LOCAL_RANK"])  # the one value that picks which worker this is
    world = nnodes * nproc
    rank = node_rank * nproc + local_rank
    return {
        "LOCAL_RANK": str(local_rank),
        "RANK": str(rank),
        "GROUP_RANK": str(node_rank),
        "ROLE_RANK": str(rank),  # a single role: its rank equals the global rank
        "ROLE_NAME": "default",
        "LOCAL_WORLD_SIZE": str(nproc),
        "WORLD_SIZE": str(world),
        "ROLE_WORLD_SIZE": str(world),
        # one worker group per node: the number of nodes
        "GROUP_WORLD_SIZE": str(nnodes),
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port),
        "TORCHELASTIC_RESTART_COUNT": str(restart_count),
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_RUN_ID": run_id,
        # str(use_agent_store): False when the workers' rank 0 hosts the store (env://)
        "TORCHELASTIC_USE_AGENT_STORE": "False",
        # the launcher's own value, else "1" (the tests start the agent without one)
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
    }


def main():
    nnodes, node_rank, nproc = (int(a) for a in sys.argv[1:4])
    master_addr, master_port, run_id = sys.argv[4], int(sys.argv[5]), sys.argv[6]
    restart_count = int(sys.argv[7]) if len(sys.argv) > 7 else 0
    expected = torchrun_expected(nnodes, node_rank, nproc, master_addr, master_port, run_id, restart_count)
    if not 0 <= int(os.environ["LOCAL_RANK"]) < nproc:
        print(f"LOCAL_RANK {os.environ['LOCAL_RANK']} is outside 0..{nproc - 1}")
        return 1
    diffs = [f"{k}: expected {v!r}, got {os.environ.get(k)!r}" for k, v in expected.items() if os.environ.get(k) != v]
    # torchrun sets OMP_NUM_THREADS=1 for more than one process per node unless it is set
    # (the tests start the agent without one).
    omp = os.environ.get("OMP_NUM_THREADS")
    if nproc > 1 and omp != "1":
        diffs.append(f"OMP_NUM_THREADS: expected '1' for nproc > 1, got {omp!r}")
    if nproc == 1 and omp is not None:
        diffs.append(f"OMP_NUM_THREADS: expected none for nproc 1, got {omp!r}")
    # Always set: a per-rank file for @record's exception report, or "" without log files.
    err = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if err is None:
        diffs.append("TORCHELASTIC_ERROR_FILE: expected it to be set")
    elif err and not os.path.isdir(os.path.dirname(err)):
        diffs.append(f"TORCHELASTIC_ERROR_FILE: {err!r} is not in an existing directory")
    # Only with TORCHELASTIC_ENABLE_FILE_TIMER, whose watchdog server we do not run.
    if "TORCHELASTIC_TIMER_FILE" in os.environ and "TORCHELASTIC_ENABLE_FILE_TIMER" not in os.environ:
        diffs.append("TORCHELASTIC_TIMER_FILE: set without TORCHELASTIC_ENABLE_FILE_TIMER")
    for d in diffs:
        print(d)
    print(f"rank {expected['RANK']}: {'MISMATCH' if diffs else 'matches torchrun'}")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
