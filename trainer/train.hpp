// The training run: flags, the model, data, parallelism applied in one documented order,
// the loop, step reports to the agent and the progress line.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lockstep::trainer {

struct Options {
  std::string model = "tiny";        // tiny | gpt2-124m | gpt2-1558m | mlp
  int64_t n_layer = -1, n_head = -1, n_embd = -1, seq_len = -1, vocab_size = -1;  // -1: the preset's
  std::string data = "synthetic";    // synthetic | path to a uint16 .bin token file
  int64_t examples = 1 << 16;        // synthetic examples per epoch
  int64_t batch_size = 8;            // per rank, per micro-step
  int grad_accum = 1;
  int64_t steps = 200;
  double lr = 1e-3, min_lr = 1e-4, weight_decay = 0.1, clip = 1.0;
  int64_t warmup_steps = 10;
  uint64_t seed = 1337;
  std::string strategy = "Auto";     // DDP | FSDP | Auto; default from LOCKSTEP_STRATEGY
  std::string backend = "auto";      // auto | gloo | nccl
  int64_t bucket_mb = 25;
  bool overlap = true;               // false: all-reduce only after backward (bench baseline)
  int log_every = 10;
  std::string dump_params;           // write the final parameters here (tests)
  std::string collective_log;        // write the order of collectives here (tests)
  std::string loss_log;              // write each step's loss here (tests)
  std::string memory_report;         // FSDP: write this rank's state bytes here (tests)
  std::string checkpoint_dir;        // default LOCKSTEP_CHECKPOINT_PATH
  int64_t checkpoint_every = 0;      // default LOCKSTEP_CHECKPOINT_EVERY
  int64_t checkpoint_keep = 3;       // default LOCKSTEP_CHECKPOINT_KEEP; 0 keeps all
  std::string resume_from;           // default LOCKSTEP_CHECKPOINT_RESUME_FROM (Note [Checkpoint owner])
  std::string job_uid;               // LOCKSTEP_JOB_UID: recorded in and checked against each MANIFEST
  int64_t attempt = -1;              // LOCKSTEP_RESTART_ATTEMPT: the checkpoint fence (Note [Checkpoint fencing])
  int64_t exit_after_step = 0;       // tests: die (exit 137) right after this step
  double memory_per_rank_gb = 0;     // Auto's budget; 0: the GPU's memory, or RAM / local ranks
  bool activation_checkpointing = false;
  std::string precision = "bf16";    // bf16 autocast on CUDA; CPU runs fp32 regardless
  std::string stats_file;            // rank 0: median step time and comm totals (bench)
  std::string device = "auto";       // auto | cpu | cuda | cuda:N
  // Speed (Note [Step speed]; bench/trainer/gpu.sh measures each against the old way)
  int64_t vocab_multiple = 1;        // the embedding and head padded to a multiple of this
  std::string attention = "auto";    // auto | flash | cudnn | efficient | math
  bool ddp_at_one_rank = false;      // DDP's buckets and all-reduce even at world size 1
  bool sync_every_step = false;      // the old loop: loss read and batch made inside the step
  bool cuda_graph = false;           // capture the step as a CUDA graph (Note [CUDA graph step])
  int64_t profile_step = 0;          // profile this step (1-based; 0: none), Note [Step profile]
  std::string profile_out;           // its Chrome trace here
};

// Parses argv; throws std::invalid_argument naming the flag and what is valid.
Options parse_options(const std::vector<std::string>& args);
int run(const Options& options);  // the process's exit code

extern const char* kUsage;

}  // namespace lockstep::trainer
