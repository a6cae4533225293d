#include "train.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <stdexcept>

#ifdef LOCKSTEP_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

#include <ATen/SDPBackend.h>
#include <ATen/autocast_mode.h>
#include <c10/core/Event.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <array>

#include "checkpoint.hpp"
#include "lockstep/contract.hpp"
#include "recompute.hpp"
#include "data.hpp"
#include "ddp.hpp"
#include "dist.hpp"
#include "fsdp.hpp"
#include "optim.hpp"
#include "memory_plan.hpp"
#include "model.hpp"
#include "profile.hpp"

namespace lockstep::trainer {

const char* kUsage = R"(usage: lockstep-trainer [flags]
Trains a GPT-style decoder (or a small MLP) with DDP over the ranks that lockstep-agent (or
torchrun) started: RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT come from the environment.
  --model NAME          tiny | gpt2-124m | gpt2-1558m | mlp (default tiny)
  --n-layer, --n-head, --n-embd, --seq-len, --vocab-size N   override the preset
  --data SRC            synthetic (default) or a file of uint16 token ids (nanoGPT .bin)
  --examples N          synthetic examples per epoch (default 65536)
  --batch-size B        sequences per rank per micro-step (default 8)
  --grad-accum K        micro-steps per optimizer step (default 1)
  --steps N             optimizer steps (default 200)
  --lr, --min-lr X      peak and final learning rate, cosine decay after warm-up (1e-3, 1e-4)
  --warmup-steps N      linear warm-up (default 10)
  --weight-decay X      AdamW weight decay (default 0.1)
  --clip X              global gradient-norm clipping, 0 to disable (default 1.0)
  --seed N              initialisation and data order (default 1337)
  --strategy S          DDP | FSDP | Auto (default: LOCKSTEP_STRATEGY, else Auto)
  --memory-per-rank-gb X  memory Auto plans with (default: the GPU's, or RAM / local ranks)
  --device D            auto | cpu | cuda | cuda:N (default auto: GPU LOCAL_RANK if CUDA is
                        available, else the CPU)
  --backend B           auto | gloo | nccl (default auto: NCCL on CUDA, else Gloo). Named
                        explicitly, the process group is made even for one rank
  --bucket-mb N         DDP bucket size (default 25; the first bucket is 1 MB)
  --no-overlap          all-reduce after backward instead of during it (for comparison)
  --activation-checkpointing  recompute each block's forward in backward (less memory)
  --precision P         bf16 (autocast on CUDA; the default) or fp32; CPU always runs fp32
  --log-every N         rank 0's progress line every N steps (default 10)
  --checkpoint-dir DIR  checkpoints here, resumed from at start (default: LOCKSTEP_CHECKPOINT_PATH)
  --checkpoint-every N  steps between checkpoints, and the last step (default:
                        LOCKSTEP_CHECKPOINT_EVERY, else none)
  --checkpoint-keep N   complete checkpoints kept, older ones removed after each save; 0 keeps
                        all (default: LOCKSTEP_CHECKPOINT_KEEP, else 3). The directory must be
                        storage every rank shares; the ranks check that at start
  --resume-from DIR     with no checkpoint of this job (LOCKSTEP_JOB_UID) in --checkpoint-dir,
                        start from the newest one in DIR, whoever wrote it (default:
                        LOCKSTEP_CHECKPOINT_RESUME_FROM); without it another job's checkpoints
                        are never used
  --dump-params FILE    save the final parameters (torch::save) for comparison
Speed (each measured by bench/trainer/gpu.sh against the way it replaced):
  --vocab-multiple N    pad the vocabulary (embedding and head) to a multiple of N; padded
                        ids never occur in the data (default 1: no padding; 64 for tensor cores)
  --attention A         auto | flash | cudnn | efficient | math: the attention kernels allowed
                        (default auto: PyTorch's choice); the one used is printed at start
  --ddp-at-one-rank     keep DDP's buckets and all-reduce at world size 1 (default: none there)
  --sync-every-step     read the loss and make the next batch inside the step (the old loop)
  --profile-step N      profile step N with Kineto and print where its time went
  --profile-out FILE    with --profile-step: the step's trace (Chrome trace format) here
)";

namespace {

// Step phases on the device's own clock: CUDA events on a GPU (kernels run asynchronously,
// so host time would mis-attribute them), the wall clock on CPU. Marks: 0 step start,
// 1 backward done, 2 gradient communication done, 3 optimizer step done.
class StepTimer {
 public:
  explicit StepTimer(const torch::Device& device) : device_(device) {
    if (device_.is_cuda())
      for (auto& e : events_) e = std::make_unique<c10::Event>(c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT);
  }
  void mark(int i) {
    if (device_.is_cuda()) events_[i]->record(c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(device_));
    else wall_[i] = std::chrono::steady_clock::now();
  }
  double seconds(int from, int to) const {
    if (!device_.is_cuda()) return std::chrono::duration<double>(wall_[to] - wall_[from]).count();
    events_[to]->synchronize();
    return events_[from]->elapsedTime(*events_[to]) / 1000.0;  // milliseconds
  }

 private:
  torch::Device device_;
  std::array<std::unique_ptr<c10::Event>, 4> events_;
  std::array<std::chrono::steady_clock::time_point, 4> wall_;
};

// "0.001", "1e-08", "2": the shortest form that reads back.
std::string shortest(double x) {
  std::ostringstream s;
  s << x;
  return s.str();
}

double number(const std::string& flag, const std::string& v, double min) {
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end || !std::isfinite(x) || x < min)
    throw std::invalid_argument(flag + ": expected a number >= " + shortest(min) + ", got '" + v + "'");
  return x;
}

int64_t integer(const std::string& flag, const std::string& v, int64_t min) {
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end || !std::isfinite(x) || x < static_cast<double>(min) || x != std::floor(x))
    throw std::invalid_argument(flag + ": expected an integer >= " + std::to_string(min) + ", got '" + v + "'");
  return static_cast<int64_t>(x);
}

// One datagram per step to the agent (docs/metrics.md); silently nothing without an agent.
class Reporter {
 public:
  Reporter() {
    const char* path = std::getenv(contract::kMetricsSocket);
    if (!path || std::strlen(path) >= sizeof addr_.sun_path) return;
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    addr_.sun_family = AF_UNIX;
    std::strncpy(addr_.sun_path, path, sizeof addr_.sun_path - 1);
  }
  ~Reporter() {
    if (fd_ >= 0) ::close(fd_);
  }
  void send(const std::string& line) {
    if (fd_ >= 0) ::sendto(fd_, line.data(), line.size(), 0, reinterpret_cast<sockaddr*>(&addr_), sizeof addr_);
  }

 private:
  int fd_ = -1;
  sockaddr_un addr_{};
};

// Note [Step speed]
// What the step does for speed, each measured on an H200 by bench/trainer/gpu.sh against the
// way it replaced (bench/trainer/RESULTS.md, 2026-11-27, gpt2-124m, batch 16 x 1024, bf16):
//   * --vocab-multiple 64 pads the token table and tied head from 50,257 to 50,304 rows, a
//     multiple of the tensor cores' tile: 83.5 -> 59.0 ms a step. Padded ids never occur
//     in the data, which is made with the real vocabulary, so the loss and uniform baseline
//     are the real vocabulary's; MFU does not count the padding rows.
//   * At one rank there is nothing to average, so there is no DDP (no bucket copies, no
//     all-reduce): 59.0 -> 55.4 ms. --ddp-at-one-rank keeps it (the GPU tier checks NCCL's
//     figures that way).
//   * Nothing inside the step waits for the GPU: the loss is summed on the device and read
//     once the step's end event is reached, and the next step's batches are made on the host,
//     pinned and copied without blocking while the device still runs this step:
//     55.4 -> 53.7 ms. --sync-every-step restores the old loop (loss.item() per micro-step,
//     the batch made and copied inside the step).
//   * Attention: PyTorch's choice for this shape on Hopper is cuDNN's (53.6 ms); flash is
//     slower (55.1 ms). --attention restricts the choice; the start line says what was chosen.
// Not done, and why: the loss on bf16 logits without their fp32 copy (PyTorch 2.11's fused
// half-to-float log-softmax takes fp16 only; 6.5 ms of the step is the vocabulary softmax
// in fp32, a fused kernel's work), and a CUDA graph of the step (next).

// --attention: which kernels scaled_dot_product_attention may use; "auto" leaves PyTorch's own
// choice (every backend allowed, its priority order).
void allow_attention(const std::string& a) {
  if (a == "auto") return;
  auto& ctx = at::globalContext();
  ctx.setSDPUseFlash(a == "flash");
  ctx.setSDPUseMemEfficient(a == "efficient");
  ctx.setSDPUseMath(a == "math");
  ctx.setSDPUseCuDNN(a == "cudnn");
}

// The kernel scaled_dot_product_attention picks for the model's causal attention, asked of
// PyTorch with tensors of the model's shape and dtype (one sequence) on the training device.
std::string attention_backend(const GptConfig& gc, const torch::Device& device, bool bf16) {
  auto q = torch::zeros({1, gc.n_head, gc.block_size, gc.n_embd / gc.n_head},
                        torch::TensorOptions().device(device).dtype(bf16 ? torch::kBFloat16 : torch::kFloat32));
  try {
    switch (static_cast<at::SDPBackend>(at::_fused_sdp_choice(q, q, q, {}, 0.0, /*is_causal=*/true))) {
      case at::SDPBackend::math: return "math (unfused)";
      case at::SDPBackend::flash_attention: return "flash";
      case at::SDPBackend::efficient_attention: return "efficient (memory-efficient)";
      case at::SDPBackend::cudnn_attention: return "cudnn";
      case at::SDPBackend::overrideable: return "overrideable";
      default: return "none available";
    }
  } catch (const c10::Error& e) {
    return std::string("none available: ") + e.what_without_backtrace();
  }
}

double lr_at(const Options& o, int64_t step) {
  if (step < o.warmup_steps) return o.lr * static_cast<double>(step + 1) / static_cast<double>(o.warmup_steps);
  double progress = static_cast<double>(step - o.warmup_steps) / std::max<int64_t>(1, o.steps - o.warmup_steps);
  return o.min_lr + 0.5 * (o.lr - o.min_lr) * (1 + std::cos(M_PI * std::min(1.0, progress)));
}

}  // namespace

Options parse_options(const std::vector<std::string>& args) {
  Options o;
  if (const char* s = std::getenv(contract::kStrategy); s && *s) o.strategy = s;
  if (const char* s = std::getenv(contract::kCheckpointPath); s && *s) o.checkpoint_dir = s;
  if (const char* s = std::getenv(contract::kCheckpointEvery); s && *s) o.checkpoint_every = integer(contract::kCheckpointEvery, s, 1);
  if (const char* s = std::getenv(contract::kCheckpointKeep); s && *s) o.checkpoint_keep = integer(contract::kCheckpointKeep, s, 0);
  if (const char* s = std::getenv(contract::kCheckpointResumeFrom); s && *s) o.resume_from = s;
  if (const char* s = std::getenv(contract::kJobUid); s && *s) o.job_uid = s;
  if (const char* s = std::getenv(lockstep::contract::kRestartAttempt); s && *s)
    o.attempt = integer(lockstep::contract::kRestartAttempt, s, 0);
  for (size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i], v;
    auto eq = a.find('=');
    bool has_value = eq != std::string::npos;
    if (has_value) { v = a.substr(eq + 1); a = a.substr(0, eq); }
    auto value = [&]() -> std::string {
      if (has_value) return v;
      if (i + 1 >= args.size()) throw std::invalid_argument(a + " needs a value");
      return args[++i];
    };
    if (a == "--model") o.model = value();
    else if (a == "--n-layer") o.n_layer = integer(a, value(), 1);
    else if (a == "--n-head") o.n_head = integer(a, value(), 1);
    else if (a == "--n-embd") o.n_embd = integer(a, value(), 1);
    else if (a == "--seq-len") o.seq_len = integer(a, value(), 1);
    else if (a == "--vocab-size") o.vocab_size = integer(a, value(), 2);
    else if (a == "--data") o.data = value();
    else if (a == "--examples") o.examples = integer(a, value(), 1);
    else if (a == "--batch-size") o.batch_size = integer(a, value(), 1);
    else if (a == "--grad-accum") o.grad_accum = static_cast<int>(integer(a, value(), 1));
    else if (a == "--steps") o.steps = integer(a, value(), 1);
    else if (a == "--lr") o.lr = number(a, value(), 0);
    else if (a == "--min-lr") o.min_lr = number(a, value(), 0);
    else if (a == "--warmup-steps") o.warmup_steps = integer(a, value(), 0);
    else if (a == "--weight-decay") o.weight_decay = number(a, value(), 0);
    else if (a == "--clip") o.clip = number(a, value(), 0);
    else if (a == "--seed") o.seed = static_cast<uint64_t>(integer(a, value(), 0));
    else if (a == "--strategy") o.strategy = value();
    else if (a == "--backend") o.backend = value();
    else if (a == "--device") o.device = value();
    else if (a == "--bucket-mb") o.bucket_mb = integer(a, value(), 1);
    else if (a == "--no-overlap") o.overlap = false;
    else if (a == "--log-every") o.log_every = static_cast<int>(integer(a, value(), 1));
    else if (a == "--dump-params") o.dump_params = value();
    else if (a == "--collective-log") o.collective_log = value();
    else if (a == "--loss-log") o.loss_log = value();
    else if (a == "--memory-report") o.memory_report = value();
    else if (a == "--checkpoint-dir") o.checkpoint_dir = value();
    else if (a == "--memory-per-rank-gb") o.memory_per_rank_gb = number(a, value(), 0);
    else if (a == "--stats-file") o.stats_file = value();
    else if (a == "--activation-checkpointing") o.activation_checkpointing = true;
    else if (a == "--precision") o.precision = value();
    else if (a == "--checkpoint-every") o.checkpoint_every = integer(a, value(), 1);
    else if (a == "--checkpoint-keep") o.checkpoint_keep = integer(a, value(), 0);
    else if (a == "--resume-from") o.resume_from = value();
    else if (a == "--exit-after-step") o.exit_after_step = integer(a, value(), 1);
    else if (a == "--vocab-multiple") o.vocab_multiple = integer(a, value(), 1);
    else if (a == "--attention") o.attention = value();
    else if (a == "--ddp-at-one-rank") o.ddp_at_one_rank = true;
    else if (a == "--sync-every-step") o.sync_every_step = true;
    else if (a == "--profile-step") o.profile_step = integer(a, value(), 1);
    else if (a == "--profile-out") o.profile_out = value();
    else throw std::invalid_argument("unknown flag '" + args[i] + "' (see --help)");
  }
  if (o.strategy != "DDP" && o.strategy != "FSDP" && o.strategy != "Auto")
    throw std::invalid_argument("--strategy (or LOCKSTEP_STRATEGY): expected DDP, FSDP or Auto, got '" + o.strategy + "'");
  if (o.attention != "auto" && o.attention != "flash" && o.attention != "cudnn" && o.attention != "efficient" &&
      o.attention != "math")
    throw std::invalid_argument("--attention: expected auto, flash, cudnn, efficient or math, got '" + o.attention + "'");
  if (!o.profile_out.empty() && o.profile_step == 0)
    throw std::invalid_argument("--profile-out: needs --profile-step N (the step to profile)");
  return o;
}

int run(const Options& o) {
  const torch::Device device = choose_device(o.device);
  Dist dist = init_distributed(o.backend, device);
  const bool chief = dist.rank == 0;
  if (o.strategy == "FSDP" && o.model == "mlp")
    throw std::invalid_argument("--strategy FSDP shards transformer blocks; use --strategy DDP for --model mlp");

  allow_attention(o.attention);
  // 1. The model: plain code, no parallelism in it.
  torch::manual_seed(o.seed);
  std::shared_ptr<torch::nn::Module> module;
  Gpt gpt_model{nullptr};
  std::function<torch::Tensor(const torch::Tensor&)> forward;
  GptConfig gc = GptConfig::preset(o.model == "mlp" ? "tiny" : o.model);
  if (o.n_layer > 0) gc.n_layer = o.n_layer;
  if (o.n_head > 0) gc.n_head = o.n_head;
  if (o.n_embd > 0) gc.n_embd = o.n_embd;
  if (o.seq_len > 0) gc.block_size = o.seq_len;
  if (o.vocab_size > 0) gc.vocab_size = o.vocab_size;
  // Padded ids never occur in the data: it is made with the real vocabulary (Note [Step speed]).
  const int64_t data_vocab = gc.vocab_size;
  gc.vocab_size = (gc.vocab_size + o.vocab_multiple - 1) / o.vocab_multiple * o.vocab_multiple;
  if (gc.n_embd % gc.n_head != 0)
    throw std::invalid_argument("--n-embd " + std::to_string(gc.n_embd) + " must be a multiple of --n-head " +
                                std::to_string(gc.n_head));
  if (o.model == "mlp") {
    Mlp mlp(gc.vocab_size, gc.n_embd);
    module = mlp.ptr();
    forward = [mlp](const torch::Tensor& x) mutable { return mlp->forward(x); };
  } else {
    Gpt gpt(gc);
    gpt_model = gpt;
    module = gpt.ptr();
    forward = [gpt](const torch::Tensor& x) mutable { return gpt->forward(x); };
  }
  module->to(device);
  if (o.activation_checkpointing && gpt_model && o.strategy != "FSDP")  // FSDP always recomputes
    gpt_model->run_block = [g = gpt_model.get()](size_t i, const torch::Tensor& x) {  // no self-owning cycle
      return CheckpointedBlock::apply(x, g->blocks[i]->as<Block>());
    };
  const bool bf16 = device.is_cuda() && o.precision == "bf16";
  if (o.precision != "bf16" && o.precision != "fp32")
    throw std::invalid_argument("--precision: expected bf16 or fp32, got '" + o.precision + "'");
  int64_t n_params = 0;
  for (const auto& p : module->parameters()) n_params += p.numel();

  // 2. The data.
  std::unique_ptr<Dataset> data = o.data == "synthetic" ? make_synthetic(data_vocab, gc.block_size, o.examples, o.seed)
                                                        : make_token_file(o.data, data_vocab, gc.block_size);
  DistributedSampler sampler(data->size(), o.batch_size * o.grad_accum, dist.rank, dist.world, o.seed);

  // 3. Parallelism, applied from outside the model: FSDP or DDP; Auto decides from the
  // memory plan (memory_plan.hpp) whether DDP's full replicas fit each rank.
  bool want_fsdp = o.strategy == "FSDP";
  std::string auto_why;
  if (o.strategy == "Auto" && o.model != "mlp") {
    double memory = o.memory_per_rank_gb > 0 ? o.memory_per_rank_gb * 1e9 : 0;
#ifdef LOCKSTEP_WITH_CUDA
    if (memory == 0 && device.is_cuda()) memory = static_cast<double>(at::cuda::getDeviceProperties(device.index())->totalGlobalMem);
#endif
    if (memory == 0) {  // CPU: this machine's memory, shared by the ranks on it
      int local = 1;
      if (const char* l = std::getenv("LOCAL_WORLD_SIZE")) local = std::max(1, std::atoi(l));
      memory = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE)) / local;
    }
    plan::TransformerShape shape{static_cast<double>(gc.n_layer), static_cast<double>(gc.n_embd),
                                 static_cast<double>(gc.n_head), static_cast<double>(gc.block_size),
                                 static_cast<double>(o.batch_size)};
    auto choice = plan::choose(static_cast<double>(n_params), dist.world,
                               plan::activation_bytes(shape, false, device.is_cuda() ? 2 : 4), memory);
    want_fsdp = choice.fsdp && dist.world > 1;
    auto_why = choice.why;
  }
  const bool use_fsdp = want_fsdp && dist.pg;
  std::unique_ptr<Fsdp> fsdp;
  std::unique_ptr<Ddp> ddp;
  if (use_fsdp) {
    fsdp = std::make_unique<Fsdp>(gpt_model, dist.pg);
  } else if (dist.pg && (dist.world > 1 || o.ddp_at_one_rank)) {  // one rank: nothing to average
    ddp = std::make_unique<Ddp>(*module, dist.pg, o.bucket_mb << 20, std::min<int64_t>(1, o.bucket_mb) << 20, o.overlap);
    ddp->broadcast_parameters();
  }
  if (chief)
    std::cout << "lockstep-trainer: " << o.model << " (" << n_params << " parameters), " << dist.world << " rank(s), "
              << "backend " << dist.backend << ", strategy " << (use_fsdp ? "FSDP" : "DDP")
              << (auto_why.empty() ? "" : " (Auto, " + auto_why + ")")
              << (ddp ? ", " + std::to_string(ddp->buckets()) + " bucket(s)" +
                            (o.overlap ? " overlapped with backward" : " after backward")
                      : "")
              << (!ddp && !use_fsdp && dist.world == 1 ? " (one rank: no gradient all-reduce)" : "")
              << ", global batch " << o.batch_size * o.grad_accum * dist.world << " x " << gc.block_size << " tokens"
              << (gc.vocab_size != data_vocab ? ", vocabulary " + std::to_string(data_vocab) + " padded to " + std::to_string(gc.vocab_size) : "")
              << std::endl;
  if (gpt_model) {
    const std::string attention = attention_backend(gc, device, bf16);
    if (attention.rfind("none available", 0) == 0)
      throw std::invalid_argument("--attention " + o.attention + ": no attention kernel allowed by it runs this model on " +
                                  device.str() + " (" + attention + "); valid: auto, flash, cudnn, efficient, math");
    if (chief) std::cout << "lockstep-trainer: attention " << attention << " (--attention " << o.attention << ")" << std::endl;
  }
  if (chief)  // what the step times below are measured with (the GPU tests check it)
    std::cout << "lockstep-trainer: step phases timed with " << (device.is_cuda() ? "CUDA events" : "the host clock")
              << std::endl;

  // 4. The optimizer.
  FusedAdamW opt(fsdp ? fsdp->shards() : module->parameters(),
                          torch::optim::AdamWOptions(o.lr).weight_decay(o.weight_decay));
  Reporter reporter;
  std::ofstream loss_log;
  if (!o.loss_log.empty() && chief) loss_log.open(o.loss_log);
  // 5. Resume from the latest checkpoint, if there is one.
  CheckpointTarget ckpt{o.checkpoint_dir, dist.rank, dist.world, use_fsdp ? "FSDP" : "DDP", use_fsdp, o.checkpoint_keep,
                        o.job_uid, o.resume_from, o.attempt};
  auto ckpt_tensors = [&] { return fsdp ? fsdp->shards() : module->parameters(); };
  int64_t start = 0;
  if (!o.checkpoint_dir.empty()) {
    prepare_checkpoint_dir(ckpt, dist);  // Note [Shared checkpoint directory]
    auto tensors = ckpt_tensors();
    if (auto s = load_checkpoint(ckpt, tensors, opt, dist)) {
      start = *s;
      if (chief) std::cout << "lockstep-trainer: resumed from " << o.checkpoint_dir << " at step " << start << std::endl;
    }
  }
  const double tokens_per_step = static_cast<double>(o.batch_size * o.grad_accum * gc.block_size);
  // Model FLOPs per token, the count MFU divides (docs/trainer.md, as PaLM's appendix B and
  // nanoGPT's estimate_mfu): 6 x the parameters less the position table (a lookup, no matmul;
  // the tied head counts the token table once) plus attention's 12 x layers x context x width.
  // Padding rows (--vocab-multiple) are no useful work and are not counted.
  const int64_t padding = (gc.vocab_size - data_vocab) * gc.n_embd;
  const double flops_per_token =
      gpt_model ? 6.0 * static_cast<double>(n_params - padding - gc.block_size * gc.n_embd) +
                      12.0 * static_cast<double>(gc.n_layer * gc.block_size * gc.n_embd)
                : 6.0 * static_cast<double>(n_params);
  double first_loss = 0;
  std::vector<double> step_times;
  double comm_total = 0, exposed_total = 0;

  // Note [Step speed]: the next step's batches are made on the host and copied (pinned, without
  // blocking) while the device still runs this step, and the loss is summed on the device and
  // read once the step is over, so nothing inside the step waits for the device.
  using Batch = std::pair<torch::Tensor, torch::Tensor>;
  auto load_batches = [&](int64_t step) {
    std::vector<Batch> batches;
    auto idx = sampler.indices(step);
    for (int micro = 0; micro < o.grad_accum; ++micro) {
      std::vector<int64_t> part(idx.begin() + micro * o.batch_size, idx.begin() + (micro + 1) * o.batch_size);
      auto [x, y] = make_batch(*data, part);
      if (device.is_cuda() && !o.sync_every_step) {
        x = x.pin_memory();
        y = y.pin_memory();
      }
      const bool async = device.is_cuda() && !o.sync_every_step;
      batches.emplace_back(x.to(device, /*non_blocking=*/async), y.to(device, /*non_blocking=*/async));
    }
    return batches;
  };
  std::vector<Batch> next;
  if (!o.sync_every_step && start < o.steps) next = load_batches(start);
  std::chrono::steady_clock::time_point window_start;  // the timed window: steady state, by the host's clock

  StepTimer timer(device);
  for (int64_t step = start; step < o.steps; ++step) {
    if (step == start + 3) window_start = std::chrono::steady_clock::now();
    std::unique_ptr<StepProfile> profile;
    if (step + 1 == o.profile_step) {
      profile = std::make_unique<StepProfile>(device);
      profile->start();
    }
    timer.mark(0);
    double lr = lr_at(o, step);
    for (auto& group : opt.param_groups()) static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
    opt.zero_grad();
    std::vector<Batch> batches = o.sync_every_step ? load_batches(step) : std::move(next);
    double loss_sum = 0;
    torch::Tensor loss_on_device;
    if (fsdp) fsdp->begin_step();
    for (int micro = 0; micro < o.grad_accum; ++micro) {
      const auto& [x, y] = batches[static_cast<size_t>(micro)];
      torch::Tensor logits;
      if (bf16) {  // autocast: matmuls in bf16, reductions and the loss in fp32
        at::autocast::set_autocast_enabled(at::kCUDA, true);
        at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
        logits = forward(x);
        at::autocast::set_autocast_enabled(at::kCUDA, false);
        at::autocast::clear_cache();
      } else {
        logits = forward(x);
      }
      auto loss = lm_loss(logits, y) / static_cast<double>(o.grad_accum);
      bool last = micro == o.grad_accum - 1;
      if (ddp) {
        ddp->set_sync(last);
        if (last) ddp->begin_backward();
      }
      loss.backward();
      if (o.sync_every_step) loss_sum += loss.item<double>();
      else loss_on_device = loss_on_device.defined() ? loss_on_device + loss.detach() : loss.detach();
    }
    timer.mark(1);
    CommStats comm;
    if (ddp) comm = ddp->finish_step();
    if (fsdp) comm = fsdp->finish_step();
    timer.mark(2);
    if (o.clip > 0) {
      if (fsdp) fsdp->clip_grad_norm(o.clip);
      else clip_grad_norm(module->parameters(), o.clip);
    }
    opt.step();
    timer.mark(3);
    if (!o.sync_every_step && step + 1 < o.steps) next = load_batches(step + 1);  // while the device works
    const double step_s = timer.seconds(0, 3);  // on a GPU: waits for the step to finish there
    if (loss_on_device.defined()) loss_sum = loss_on_device.item<double>();
    if (profile) profile->finish(step_s, o.profile_out, std::cout);
    if (device.is_cuda()) {  // the collectives' own time on the GPU, where host clocks see none
      if (ddp) ddp->device_figures(comm);
      if (fsdp) fsdp->device_figures(comm);
    }
    // Exposed communication, on the device's clock (Note [Communication figures]): DDP waits
    // after backward; FSDP inside forward and backward, which it measures itself.
    double waited_s = timer.seconds(1, 2);
    if (ddp) comm.ops["allreduce"].exposed_s = comm.exposed_s = waited_s;
    if (fsdp) waited_s = comm.exposed_s;
    if (step == start) first_loss = loss_sum;
    if (step - start >= 3) {  // steady state, for --stats-file
      step_times.push_back(step_s);
      comm_total += comm.comm_s;
      exposed_total += waited_s;
    }
    namespace key = contract::report;  // the names the agent parses (docs/metrics.md, "The step report")
    std::ostringstream line;
    line << key::kStep << '=' << step + 1 << ' ' << key::kStepSeconds << '=' << step_s << ' ' << key::kComputeSeconds << '='
         << std::max(0.0, step_s - waited_s) << ' ' << key::kCommSeconds << '=' << comm.comm_s << ' '
         << key::kExposedCommSeconds << '=' << waited_s;
    for (const auto& [op, s] : comm.ops)  // per collective kind: comm_s.<op>, comm_bytes.<op>, exposed_comm_s.<op>
      line << ' ' << key::kCommSeconds << '.' << op << '=' << s.comm_s << ' ' << key::kCommBytes << '.' << op << '='
           << s.bytes << ' ' << key::kExposedCommSeconds << '.' << op << '=' << s.exposed_s;
    line << ' ' << key::kTotalSteps << '=' << o.steps << ' ' << key::kTokens << '=' << tokens_per_step << ' ' << key::kFlops
         << '=' << flops_per_token * tokens_per_step << ' ' << key::kLoss << '=' << loss_sum;
    reporter.send(line.str());
    if (loss_log.is_open()) loss_log << step + 1 << " " << std::setprecision(8) << loss_sum << std::endl;
    // The last step is always saved as well: a gang rerun after the end (decide.hpp, Note
    // [Partly succeeded]) then resumes there and repeats nothing.
    if (!o.checkpoint_dir.empty() && o.checkpoint_every > 0 &&
        ((step + 1) % o.checkpoint_every == 0 || step + 1 == o.steps)) {
      save_checkpoint(ckpt, step + 1, ckpt_tensors(), opt, dist);
      if (chief) std::cout << "lockstep-trainer: checkpoint at step " << step + 1 << " in " << o.checkpoint_dir << std::endl;
    }
    if (o.exit_after_step > 0 && step + 1 == o.exit_after_step) std::_Exit(137);  // tests: a crash
    if (chief && ((step + 1) % o.log_every == 0 || step + 1 == o.steps))
      std::cout << "step " << std::setw(5) << step + 1 << "/" << o.steps << "  loss " << std::fixed << std::setprecision(4)
                << loss_sum << "  " << std::setprecision(0) << tokens_per_step * dist.world / step_s << " tok/s  "
                << std::setprecision(1) << step_s * 1000 << " ms/step  comm " << std::setprecision(0)
                << (step_s > 0 ? 100 * comm.comm_s / step_s : 0) << "% (exposed "
                << (step_s > 0 ? 100 * waited_s / step_s : 0) << "%)" << std::defaultfloat << std::endl;
  }
  const double window_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - window_start).count();
  if (chief)
    std::cout << std::setprecision(4) << "lockstep-trainer: done; loss at step 1 " << first_loss << ", uniform baseline "
              << data->uniform_loss() << std::endl;
  if (!o.stats_file.empty() && chief && !step_times.empty()) {
    std::sort(step_times.begin(), step_times.end());
    std::ofstream(o.stats_file) << "steps " << step_times.size() << "\nstep_s_median " << step_times[step_times.size() / 2]
                                << "\ncomm_s " << comm_total << "\nexposed_s " << exposed_total
                                // wall time per step over the same steps, host clock: what a user waits
                                << "\nwall_s_per_step " << window_s / static_cast<double>(step_times.size()) << "\n";
  }
  if (!o.dump_params.empty()) {
    std::vector<torch::Tensor> params;
    if (fsdp) {
      for (const auto& p : fsdp->full_parameters()) params.push_back(p.cpu());  // a collective: every rank takes part
    } else {
      for (const auto& p : module->parameters()) params.push_back(p.detach().cpu());
    }
    if (chief) torch::save(params, o.dump_params);
  }
  if (fsdp) {
    auto m = fsdp->memory(opt);
    double ideal = 16.0 * static_cast<double>(n_params) / dist.world;
    double padded_ideal = 16.0 * static_cast<double>(m.padded_numel) / dist.world;
    std::ostringstream report;
    report << "rank " << dist.rank << " FSDP bytes: parameters " << m.params << ", gradients " << m.grads
           << ", optimizer " << m.optimizer << ", total " << m.params + m.grads + m.optimizer << "; 16 x params / N = "
           << ideal << " (" << padded_ideal << " with padding)";
    if (chief) std::cout << "lockstep-trainer: " << report.str() << std::endl;
    if (!o.memory_report.empty())
      std::ofstream(o.memory_report + ".rank-" + std::to_string(dist.rank))
          << m.params + m.grads + m.optimizer << " " << ideal << " " << padded_ideal << "\n";
  }
  if (!o.collective_log.empty() && (ddp || fsdp)) {
    std::ofstream out(o.collective_log + ".rank-" + std::to_string(dist.rank));
    for (const auto& l : ddp ? ddp->collective_log() : fsdp->collective_log()) out << l << "\n";
  }
  barrier(dist);  // leave together, so rank 0's store outlives everyone's last use
  return 0;
}

}  // namespace lockstep::trainer
