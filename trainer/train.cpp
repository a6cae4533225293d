#include "train.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
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
#include <c10/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#endif

#include <ATen/SDPBackend.h>
#include <ATen/autocast_mode.h>
#include <c10/core/Event.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <array>

#include "checkpoint.hpp"
#include "lockstep/contract.hpp"
#include "lockstep/flags.hpp"
#include "recompute.hpp"
#include "data.hpp"
#include "stop.hpp"
#include "ddp.hpp"
#include "dist.hpp"
#include "fsdp.hpp"
#include "optim.hpp"
#include "lockstep/memory_plan.hpp"
#include "lockstep/time_text.hpp"
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
  --cuda-graph          capture the whole step as a CUDA graph after 3 steps and replay it
                        (one rank without DDP or FSDP, --grad-accum 1, on a GPU)
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
    // --name=value or --name value (lockstep/flags.hpp); a switch ignores a value given with '='.
    const std::string a = args[i].substr(0, args[i].find('='));
    auto value = [&]() -> std::string {
      std::string v;
      try {
        flags::match(args, i, a, v);
      } catch (const flags::FlagError& e) {  // "--model needs a value"
        throw std::invalid_argument(e.what());
      }
      return v;
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
    else if (a == "--cuda-graph") o.cuda_graph = true;
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

namespace {

// 1. The model: plain code, no parallelism in it.
struct Model {
  GptConfig gc;
  int64_t data_vocab = 0;  // the data's vocabulary; gc.vocab_size may be padded (--vocab-multiple)
  std::shared_ptr<torch::nn::Module> module;
  Gpt gpt{nullptr};  // null for the mlp
  std::function<torch::Tensor(const torch::Tensor&)> forward;
  int64_t n_params = 0;
};

Model build_model(const Options& o, const torch::Device& device) {
  Model m;
  torch::manual_seed(o.seed);
  GptConfig& gc = m.gc;
  gc = GptConfig::preset(o.model == "mlp" ? "tiny" : o.model);
  if (o.n_layer > 0) gc.n_layer = o.n_layer;
  if (o.n_head > 0) gc.n_head = o.n_head;
  if (o.n_embd > 0) gc.n_embd = o.n_embd;
  if (o.seq_len > 0) gc.block_size = o.seq_len;
  if (o.vocab_size > 0) gc.vocab_size = o.vocab_size;
  // Padded ids never occur in the data: it is made with the real vocabulary (Note [Step speed]).
  m.data_vocab = gc.vocab_size;
  gc.vocab_size = (gc.vocab_size + o.vocab_multiple - 1) / o.vocab_multiple * o.vocab_multiple;
  if (gc.n_embd % gc.n_head != 0)
    throw std::invalid_argument("--n-embd " + std::to_string(gc.n_embd) + " must be a multiple of --n-head " +
                                std::to_string(gc.n_head));
  if (o.model == "mlp") {
    Mlp mlp(gc.vocab_size, gc.n_embd);
    m.module = mlp.ptr();
    m.forward = [mlp](const torch::Tensor& x) mutable { return mlp->forward(x); };
  } else {
    Gpt gpt(gc);
    m.gpt = gpt;
    m.module = gpt.ptr();
    m.forward = [gpt](const torch::Tensor& x) mutable { return gpt->forward(x); };
  }
  m.module->to(device);
  if (o.activation_checkpointing && m.gpt && o.strategy != "FSDP")  // FSDP always recomputes
    m.gpt->run_block = [g = m.gpt.get()](size_t i, const torch::Tensor& x) {  // no self-owning cycle
      return CheckpointedBlock::apply(x, g->blocks[i]->as<Block>());
    };
  for (const auto& p : m.module->parameters()) m.n_params += p.numel();
  return m;
}

// Model FLOPs per token, the count MFU divides (docs/trainer.md, as PaLM's appendix B and
// nanoGPT's estimate_mfu): 6 x the parameters less the position table (a lookup, no matmul;
// the tied head counts the token table once) plus attention's 12 x layers x context x width.
// Padding rows (--vocab-multiple) are no useful work and are not counted.
double flops_per_token(const Model& m) {
  const GptConfig& gc = m.gc;
  if (!m.gpt) return 6.0 * static_cast<double>(m.n_params);
  const int64_t padding = (gc.vocab_size - m.data_vocab) * gc.n_embd;
  return 6.0 * static_cast<double>(m.n_params - padding - gc.block_size * gc.n_embd) +
         12.0 * static_cast<double>(gc.n_layer * gc.block_size * gc.n_embd);
}

// 3. Parallelism, applied from outside the model: FSDP or DDP, or at one rank neither.
struct Parallelism {
  std::unique_ptr<Fsdp> fsdp;
  std::unique_ptr<Ddp> ddp;
  std::string auto_why;  // why Auto chose, for the start line
};

// Auto: FSDP when DDP's full replicas do not fit a rank's memory (memory_plan.hpp).
bool auto_wants_fsdp(const Options& o, const Model& m, const Dist& dist, const torch::Device& device, std::string* why) {
  double memory = o.memory_per_rank_gb > 0 ? o.memory_per_rank_gb * 1e9 : 0;
#ifdef LOCKSTEP_WITH_CUDA
  if (memory == 0 && device.is_cuda()) memory = static_cast<double>(at::cuda::getDeviceProperties(device.index())->totalGlobalMem);
#endif
  if (memory == 0) {  // CPU: this machine's memory, shared by the ranks on it
    int local = 1;
    if (const char* l = std::getenv("LOCAL_WORLD_SIZE")) local = std::max(1, std::atoi(l));
    memory = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE)) / local;
  }
  const GptConfig& gc = m.gc;
  plan::TransformerShape shape{static_cast<double>(gc.n_layer), static_cast<double>(gc.n_embd),
                               static_cast<double>(gc.n_head), static_cast<double>(gc.block_size),
                               static_cast<double>(o.batch_size)};
  auto choice = plan::choose(static_cast<double>(m.n_params), dist.world,
                             plan::activation_bytes(shape, false, device.is_cuda() ? 2 : 4), memory);
  *why = choice.why;
  return choice.fsdp && dist.world > 1;
}

Parallelism apply_parallelism(const Options& o, Model& m, const Dist& dist, const torch::Device& device) {
  Parallelism p;
  bool want_fsdp = o.strategy == "FSDP";
  if (o.strategy == "Auto" && o.model != "mlp") want_fsdp = auto_wants_fsdp(o, m, dist, device, &p.auto_why);
  if (want_fsdp && dist.pg) {
    p.fsdp = std::make_unique<Fsdp>(m.gpt, dist.pg);
  } else if (dist.pg && (dist.world > 1 || o.ddp_at_one_rank)) {  // one rank: nothing to average
    p.ddp = std::make_unique<Ddp>(*m.module, dist.pg, o.bucket_mb << 20, std::min<int64_t>(1, o.bucket_mb) << 20, o.overlap);
    p.ddp->broadcast_parameters();
  }
  return p;
}

void print_start(const Options& o, const Model& m, const Parallelism& p, const Dist& dist, const torch::Device& device,
                 bool bf16) {
  const bool chief = dist.rank == 0;
  const GptConfig& gc = m.gc;
  if (chief)
    std::cout << "lockstep-trainer: " << o.model << " (" << m.n_params << " parameters), " << dist.world << " rank(s), "
              << "backend " << dist.backend << ", strategy " << (p.fsdp ? "FSDP" : "DDP")
              << (p.auto_why.empty() ? "" : " (Auto, " + p.auto_why + ")")
              << (p.ddp ? ", " + std::to_string(p.ddp->buckets()) + " bucket(s)" +
                              (o.overlap ? " overlapped with backward" : " after backward")
                        : "")
              << (!p.ddp && !p.fsdp && dist.world == 1 ? " (one rank: no gradient all-reduce)" : "")
              << ", global batch " << o.batch_size * o.grad_accum * dist.world << " x " << gc.block_size << " tokens"
              << (gc.vocab_size != m.data_vocab
                      ? ", vocabulary " + std::to_string(m.data_vocab) + " padded to " + std::to_string(gc.vocab_size)
                      : "")
              << std::endl;
  if (m.gpt) {
    const std::string attention = attention_backend(gc, device, bf16);
    if (attention.rfind("none available", 0) == 0)
      throw std::invalid_argument("--attention " + o.attention + ": no attention kernel allowed by it runs this model on " +
                                  device.str() + " (" + attention + "); valid: auto, flash, cudnn, efficient, math");
    if (chief) std::cout << "lockstep-trainer: attention " << attention << " (--attention " << o.attention << ")" << std::endl;
  }
  if (chief)  // what the step times below are measured with (the GPU tests check it)
    std::cout << "lockstep-trainer: step phases timed with " << (device.is_cuda() ? "CUDA events" : "the host clock")
              << std::endl;
}

// A step's inputs, (x, y) per micro-step, already on the device. Note [Step speed]: the next
// step's are made on the host and copied (pinned, without blocking) while the device still runs
// this step, unless --sync-every-step.
using Batch = std::pair<torch::Tensor, torch::Tensor>;

class BatchLoader {
 public:
  BatchLoader(const Options& o, const Dataset& data, const DistributedSampler& sampler, const torch::Device& device)
      : o_(o), data_(data), sampler_(sampler), device_(device) {}
  std::vector<Batch> load(int64_t step) const {
    std::vector<Batch> batches;
    auto idx = sampler_.indices(step);
    const bool async = device_.is_cuda() && !o_.sync_every_step;
    for (int micro = 0; micro < o_.grad_accum; ++micro) {
      std::vector<int64_t> part(idx.begin() + micro * o_.batch_size, idx.begin() + (micro + 1) * o_.batch_size);
      auto [x, y] = make_batch(data_, part);
      if (async) {
        x = x.pin_memory();
        y = y.pin_memory();
      }
      batches.emplace_back(x.to(device_, /*non_blocking=*/async), y.to(device_, /*non_blocking=*/async));
    }
    return batches;
  }

 private:
  const Options& o_;
  const Dataset& data_;
  const DistributedSampler& sampler_;
  torch::Device device_;
};

// 4. One optimizer step: forward and backward of each micro-step, the gradients' communication,
// clipping and AdamW, timed on the device's clock.
struct StepResult {
  double step_s = 0, waited_s = 0, loss = 0;
  CommStats comm;
};

// Note [CUDA graph step]
// With --cuda-graph the whole step (forward, loss, backward, clipping, AdamW) is captured once
// as a CUDA graph and replayed every step after, so the GPU runs it without waiting on the
// host to launch some 900 kernels one by one. The steps run on a side stream (a capture needs
// one, and its warm-up steps must run there too, so cuBLAS's workspaces exist before it); the
// first 3 are ordinary steps, the 4th is captured and replayed. What changes between steps
// is copied into the graph's own tensors before each replay: the batch, into fixed input
// tensors, and the learning rate, into a device tensor AdamW reads (FusedAdamW::use_lr_tensor).
// Gradients are created by the captured backward (they are cleared once, before the capture)
// and rewritten by each replay; autocast's weight-cast cache is off while capturing. AdamW's
// step counts advance on the device; FusedAdamW::sync_step_counts brings them to its saved
// state before a checkpoint. Only where nothing else must happen inside the step: one rank
// without DDP or FSDP, one micro-step.
class Stepper {
 public:
  Stepper(const Options& o, Model& m, Parallelism& p, FusedAdamW& opt, const torch::Device& device, bool bf16)
      : o_(o), m_(m), p_(p), opt_(opt), device_(device), bf16_(bf16), timer_(device) {
    if (!o.cuda_graph) return;
    if (!device.is_cuda() || p.ddp || p.fsdp || o.grad_accum != 1 || o.sync_every_step)
      throw std::invalid_argument(
          "--cuda-graph: needs a GPU, one rank without DDP or FSDP, --grad-accum 1 and no --sync-every-step");
#ifdef LOCKSTEP_WITH_CUDA
    graph_ = std::make_unique<Graph>(device);
#endif
  }

  // `prefetch` runs once the step is queued on the device and before waiting for it.
  StepResult run(int64_t step, const std::vector<Batch>& batches, const std::function<void()>& prefetch) {
#ifdef LOCKSTEP_WITH_CUDA
    if (graph_) return run_graphed(step, batches, prefetch);
#endif
    return run_eager(step, batches, prefetch);
  }

 private:
  StepResult run_eager(int64_t step, const std::vector<Batch>& batches, const std::function<void()>& prefetch) {
    timer_.mark(0);
    const double lr = lr_at(o_, step);
    for (auto& group : opt_.param_groups()) static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
    opt_.zero_grad();
    StepResult r;
    torch::Tensor loss_on_device;  // summed on the device, read after the step (Note [Step speed])
    if (p_.fsdp) p_.fsdp->begin_step();
    for (int micro = 0; micro < o_.grad_accum; ++micro) {
      const auto& [x, y] = batches[static_cast<size_t>(micro)];
      auto loss = lm_loss(forward(x), y) / static_cast<double>(o_.grad_accum);
      const bool last = micro == o_.grad_accum - 1;
      if (p_.ddp) {
        p_.ddp->set_sync(last);
        if (last) p_.ddp->begin_backward();
      }
      loss.backward();
      if (o_.sync_every_step) r.loss += loss.item<double>();
      else loss_on_device = loss_on_device.defined() ? loss_on_device + loss.detach() : loss.detach();
    }
    timer_.mark(1);
    if (p_.ddp) r.comm = p_.ddp->finish_step();
    if (p_.fsdp) r.comm = p_.fsdp->finish_step();
    timer_.mark(2);
    if (o_.clip > 0) {
      if (p_.fsdp) p_.fsdp->clip_grad_norm(o_.clip);
      else clip_grad_norm(m_.module->parameters(), o_.clip);
    }
    opt_.step();
    timer_.mark(3);
    if (prefetch) prefetch();
    r.step_s = timer_.seconds(0, 3);  // on a GPU: waits for the step to finish there
    if (loss_on_device.defined()) r.loss = loss_on_device.item<double>();
    if (device_.is_cuda()) {  // the collectives' own time on the GPU, where host clocks see none
      if (p_.ddp) p_.ddp->device_figures(r.comm);
      if (p_.fsdp) p_.fsdp->device_figures(r.comm);
    }
    // Exposed communication, on the device's clock (Note [Communication figures]): DDP waits
    // after backward; FSDP inside forward and backward, which it measures itself.
    r.waited_s = timer_.seconds(1, 2);
    if (p_.ddp) r.comm.ops["allreduce"].exposed_s = r.comm.exposed_s = r.waited_s;
    if (p_.fsdp) r.waited_s = r.comm.exposed_s;
    return r;
  }

#ifdef LOCKSTEP_WITH_CUDA
  struct Graph {
    explicit Graph(const torch::Device& d)
        : stream(c10::cuda::getStreamFromPool(false, d.index())), main(c10::cuda::getCurrentCUDAStream(d.index())) {}
    c10::cuda::CUDAStream stream, main;
    at::cuda::CUDAGraph graph;
    bool captured = false;
    int eager_steps = 0;
    torch::Tensor x, y, loss, lr;
  };

  // Note [CUDA graph step]
  StepResult run_graphed(int64_t step, const std::vector<Batch>& batches, const std::function<void()>& prefetch) {
    Graph& g = *graph_;
    {  // the side stream starts after what the main stream has queued (the first batch's copy)
      c10::cuda::CUDAEvent queued;
      queued.record(g.main);
      queued.block(g.stream);
    }
    c10::cuda::CUDAStreamGuard on_side(g.stream);
    if (!g.captured && g.eager_steps < 3) {
      ++g.eager_steps;
      return run_eager(step, batches, prefetch);
    }
    const auto& [x, y] = batches.front();
    StepResult r;
    const double lr = lr_at(o_, step);
    if (!g.captured) {
      g.x = x.clone();
      g.y = y.clone();
      g.lr = torch::full({}, lr, torch::TensorOptions().device(device_).dtype(torch::kFloat32));
      opt_.use_lr_tensor(g.lr);
      opt_.zero_grad();  // the captured backward creates the gradients in the graph's memory
      const bool cache = at::autocast::is_autocast_cache_enabled();
      at::autocast::set_autocast_cache_enabled(false);
      g.graph.capture_begin();
      auto loss = lm_loss(forward(g.x), g.y);
      loss.backward();
      if (o_.clip > 0) clip_grad_norm(m_.module->parameters(), o_.clip);
      opt_.step();
      g.loss = loss.detach();
      g.graph.capture_end();
      at::autocast::set_autocast_cache_enabled(cache);
      g.captured = true;
    }
    timer_.mark(0);
    g.x.copy_(x, /*non_blocking=*/true);
    g.y.copy_(y, /*non_blocking=*/true);
    g.lr.fill_(lr);
    g.graph.replay();
    timer_.mark(1);
    timer_.mark(2);
    timer_.mark(3);
    if (prefetch) prefetch();
    r.step_s = timer_.seconds(0, 3);
    r.loss = g.loss.item<double>();
    return r;
  }
  std::unique_ptr<Graph> graph_;
#endif

  torch::Tensor forward(const torch::Tensor& x) {
    if (!bf16_) return m_.forward(x);
    // autocast: matmuls in bf16, reductions in fp32; the logits' fp32 copy is lm_loss's
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
    auto logits = m_.forward(x);
    at::autocast::set_autocast_enabled(at::kCUDA, false);
    at::autocast::clear_cache();
    return logits;
  }

  const Options& o_;
  Model& m_;
  Parallelism& p_;
  FusedAdamW& opt_;
  torch::Device device_;
  bool bf16_;
  StepTimer timer_;
};

// The step's datagram to the agent (docs/metrics.md, "The step report").
std::string step_report(const Options& o, int64_t step, const StepResult& r, double tokens, double flops) {
  namespace key = contract::report;  // the names the agent parses
  std::ostringstream line;
  line << key::kStep << '=' << step + 1 << ' ' << key::kStepSeconds << '=' << r.step_s << ' ' << key::kComputeSeconds << '='
       << std::max(0.0, r.step_s - r.waited_s) << ' ' << key::kCommSeconds << '=' << r.comm.comm_s << ' '
       << key::kExposedCommSeconds << '=' << r.waited_s;
  for (const auto& [op, s] : r.comm.ops)  // per collective kind: comm_s.<op>, comm_bytes.<op>, exposed_comm_s.<op>
    line << ' ' << key::kCommSeconds << '.' << op << '=' << s.comm_s << ' ' << key::kCommBytes << '.' << op << '='
         << s.bytes << ' ' << key::kExposedCommSeconds << '.' << op << '=' << s.exposed_s;
  line << ' ' << key::kTotalSteps << '=' << o.steps << ' ' << key::kTokens << '=' << tokens << ' ' << key::kFlops << '='
       << flops << ' ' << key::kLoss << '=' << r.loss;
  return line.str();
}

void print_progress(const Options& o, int64_t step, const StepResult& r, double tokens_all_ranks) {
  std::cout << "step " << std::setw(5) << step + 1 << "/" << o.steps << "  loss " << std::fixed << std::setprecision(4)
            << r.loss << "  " << std::setprecision(0) << tokens_all_ranks / r.step_s << " tok/s  " << std::setprecision(1)
            << r.step_s * 1000 << " ms/step  comm " << std::setprecision(0)
            << (r.step_s > 0 ? 100 * r.comm.comm_s / r.step_s : 0) << "% (exposed "
            << (r.step_s > 0 ? 100 * r.waited_s / r.step_s : 0) << "%)" << std::defaultfloat << std::endl;
}

// What the run measured over its steady-state steps (from the fourth on), for --stats-file.
struct RunStats {
  std::vector<double> step_times;
  double comm = 0, exposed = 0;
  std::chrono::steady_clock::time_point window_start;  // the host's clock at the first of them

  void add(const StepResult& r) {
    step_times.push_back(r.step_s);
    comm += r.comm.comm_s;
    exposed += r.waited_s;
  }
  void write(const std::string& path) {
    if (step_times.empty()) return;
    const double window_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - window_start).count();
    std::sort(step_times.begin(), step_times.end());
    std::ofstream(path) << "steps " << step_times.size() << "\nstep_s_median " << step_times[step_times.size() / 2]
                        << "\ncomm_s " << comm << "\nexposed_s " << exposed
                        // wall time per step over the same steps, host clock: what a user waits
                        << "\nwall_s_per_step " << window_s / static_cast<double>(step_times.size()) << "\n";
  }
};

// 5. The step to start at: the latest checkpoint's, or 0.
int64_t resume(const Options& o, const CheckpointTarget& ckpt, std::vector<torch::Tensor> tensors, FusedAdamW& opt,
               const Dist& dist) {
  if (o.checkpoint_dir.empty()) return 0;
  prepare_checkpoint_dir(ckpt, dist);  // Note [Shared checkpoint directory]
  auto step = load_checkpoint(ckpt, tensors, opt, dist);
  if (!step) return 0;
  if (dist.rank == 0) std::cout << "lockstep-trainer: resumed from " << o.checkpoint_dir << " at step " << *step << std::endl;
  return *step;
}

// See Note [Stop vote]: whether every rank stops after `step` (0-based), just done; the same answer
// on every rank, read once the step has ended on the device. Says so when it does.
bool stop_agreed(const Options& o, const Parallelism& p, const Dist& dist, int64_t step) {
  bool agreed;
  if (p.ddp) agreed = p.ddp->vote_sum().item<float>() > 0;
  else if (p.fsdp && o.clip > 0) agreed = p.fsdp->vote_sum().item<float>() > 0;
  else if (!dist.pg || dist.world == 1) agreed = stop::signal_received() != 0;
  else {  // FSDP with --clip 0: a collective of its own
    std::vector<at::Tensor> t{torch::full({1}, stop::vote(), torch::TensorOptions().device(dist.device))};
    dist.pg->allreduce(t)->wait();
    agreed = t[0].item<float>() > 0;
  }
  // At the last step there is nothing left to stop: the run finishes (and saves) as always.
  if (!agreed || step + 1 == o.steps) return false;
  stop::stopping();
  const int sig = stop::signal_received();
  std::cout << "lockstep-trainer: rank " << dist.rank << ": stop agreed after step " << step + 1 << " ("
            << (sig ? std::string(stop::signal_name(sig)) + " here " + time_text::seconds(stop::seconds_since_signal(), 3) + " ago"
                    : "another rank's signal")
            << ")" << std::endl;
  return true;
}

// Saves after `step` (0-based) when --checkpoint-every says so, at the last step, and at a stop;
// the seconds the save took, 0 without one. The last step is always saved: a gang rerun after the
// end (decide.hpp, Note [Partly succeeded]) then resumes there and repeats nothing. A stop saves
// where it stops (Note [Stop on request]).
double save_if_due(const Options& o, const CheckpointTarget& ckpt, int64_t step, bool stop_now,
                   const std::function<std::vector<torch::Tensor>()>& tensors, FusedAdamW& opt, const Dist& dist) {
  const bool scheduled = o.checkpoint_every > 0 && ((step + 1) % o.checkpoint_every == 0 || step + 1 == o.steps);
  if (o.checkpoint_dir.empty() || !(scheduled || stop_now)) return 0;
  if (o.cuda_graph) opt.sync_step_counts();  // Note [CUDA graph step]
  const auto start = std::chrono::steady_clock::now();
  save_checkpoint(ckpt, step + 1, tensors(), opt, dist);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (dist.rank == 0) std::cout << "lockstep-trainer: checkpoint at step " << step + 1 << " in " << o.checkpoint_dir << std::endl;
  return took;
}

// See Note [Stop on request]: the lines of a stop agreed after step `done` (1-based), once its
// checkpoint is written (`save_s` seconds) or there is no directory; returns the exit code.
int stopped(const Options& o, int64_t done, double save_s, const Dist& dist) {
  const int sig = stop::signal_received();
  const bool chief = dist.rank == 0;
  if (chief && !o.checkpoint_dir.empty())
    std::cout << "lockstep-trainer: stop: checkpoint at step " << done << " written in " << std::fixed
              << std::setprecision(2) << save_s << " s in " << o.checkpoint_dir << std::defaultfloat << std::endl;
  if (chief && o.checkpoint_dir.empty())
    std::cout << "lockstep-trainer: stop: no checkpoint directory (--checkpoint-dir, LOCKSTEP_CHECKPOINT_PATH: "
                 "spec.checkpoint.path), so steps 1-" << done << " are not saved; stopping now" << std::endl;
  barrier(dist);  // leave together, so rank 0's store outlives everyone's last use
  const int code = 128 + (sig ? sig : SIGTERM);
  std::cout << "lockstep-trainer: rank " << dist.rank << ": stopped on request after step " << done << "; exit "
            << code << (o.checkpoint_dir.empty() ? "" : " (a resumed run starts at step " + std::to_string(done + 1) + ")")
            << std::endl;
  return code;
}

// 6. After the last step: parameters for comparison, FSDP's memory, the collective order.
void finish_run(const Options& o, const Model& m, Parallelism& p, FusedAdamW& opt, const Dist& dist) {
  const bool chief = dist.rank == 0;
  if (!o.dump_params.empty()) {
    std::vector<torch::Tensor> params;
    if (p.fsdp) {
      for (const auto& t : p.fsdp->full_parameters()) params.push_back(t.cpu());  // a collective: every rank takes part
    } else {
      for (const auto& t : m.module->parameters()) params.push_back(t.detach().cpu());
    }
    if (chief) torch::save(params, o.dump_params);
  }
  if (p.fsdp) {
    auto mem = p.fsdp->memory(opt);
    double ideal = 16.0 * static_cast<double>(m.n_params) / dist.world;
    double padded_ideal = 16.0 * static_cast<double>(mem.padded_numel) / dist.world;
    std::ostringstream report;
    report << "rank " << dist.rank << " FSDP bytes: parameters " << mem.params << ", gradients " << mem.grads
           << ", optimizer " << mem.optimizer << ", total " << mem.params + mem.grads + mem.optimizer
           << "; 16 x params / N = " << ideal << " (" << padded_ideal << " with padding)";
    if (chief) std::cout << "lockstep-trainer: " << report.str() << std::endl;
    if (!o.memory_report.empty())
      std::ofstream(o.memory_report + ".rank-" + std::to_string(dist.rank))
          << mem.params + mem.grads + mem.optimizer << " " << ideal << " " << padded_ideal << "\n";
  }
  if (!o.collective_log.empty() && (p.ddp || p.fsdp)) {
    std::ofstream out(o.collective_log + ".rank-" + std::to_string(dist.rank));
    for (const auto& l : p.ddp ? p.ddp->collective_log() : p.fsdp->collective_log()) out << l << "\n";
  }
}

}  // namespace

int run(const Options& o) {
  const torch::Device device = choose_device(o.device);
  Dist dist = init_distributed(o.backend, device);
  const bool chief = dist.rank == 0;
  if (o.strategy == "FSDP" && o.model == "mlp")
    throw std::invalid_argument("--strategy FSDP shards transformer blocks; use --strategy DDP for --model mlp");
  if (o.precision != "bf16" && o.precision != "fp32")
    throw std::invalid_argument("--precision: expected bf16 or fp32, got '" + o.precision + "'");
  const bool bf16 = device.is_cuda() && o.precision == "bf16";
  allow_attention(o.attention);

  Model m = build_model(o, device);  // 1. the model
  // 2. The data.
  std::unique_ptr<Dataset> data = o.data == "synthetic"
                                       ? make_synthetic(m.data_vocab, m.gc.block_size, o.examples, o.seed)
                                       : make_token_file(o.data, m.data_vocab, m.gc.block_size);
  DistributedSampler sampler(data->size(), o.batch_size * o.grad_accum, dist.rank, dist.world, o.seed);
  Parallelism p = apply_parallelism(o, m, dist, device);  // 3. parallelism
  if (p.ddp) p.ddp->set_vote(stop::vote);  // Note [Stop vote]
  if (p.fsdp) p.fsdp->set_vote(stop::vote);
  print_start(o, m, p, dist, device, bf16);
  // 4. The optimizer.
  FusedAdamW opt(p.fsdp ? p.fsdp->shards() : m.module->parameters(),
                 torch::optim::AdamWOptions(o.lr).weight_decay(o.weight_decay));
  // 5. Resume from the latest checkpoint, if there is one.
  CheckpointTarget ckpt{o.checkpoint_dir, dist.rank, dist.world, p.fsdp ? "FSDP" : "DDP", p.fsdp != nullptr,
                        o.checkpoint_keep, o.job_uid, o.resume_from, o.attempt};
  auto ckpt_tensors = [&] { return p.fsdp ? p.fsdp->shards() : m.module->parameters(); };
  const int64_t start = resume(o, ckpt, ckpt_tensors(), opt, dist);

  // The loop.
  const double tokens = static_cast<double>(o.batch_size * o.grad_accum * m.gc.block_size);
  const double flops = flops_per_token(m) * tokens;
  Reporter reporter;
  std::ofstream loss_log;
  if (!o.loss_log.empty() && chief) loss_log.open(o.loss_log);
  BatchLoader loader(o, *data, sampler, device);
  Stepper stepper(o, m, p, opt, device, bf16);
  RunStats stats;
  double first_loss = 0;
  std::vector<Batch> next;
  if (!o.sync_every_step && start < o.steps) next = loader.load(start);
  stop::install(dist.rank);  // Note [Stop on request]: from here a signal stops at an agreed step
  for (int64_t step = start; step < o.steps; ++step) {
    if (step == start + 3) stats.window_start = std::chrono::steady_clock::now();
    std::unique_ptr<StepProfile> profile;
    if (step + 1 == o.profile_step) {
      profile = std::make_unique<StepProfile>(device);
      profile->start();
    }
    std::vector<Batch> batches = o.sync_every_step ? loader.load(step) : std::move(next);
    stop::step_begins();  // Note [Stop watchdog]
    StepResult r = stepper.run(step, batches, [&] {
      if (!o.sync_every_step && step + 1 < o.steps) next = loader.load(step + 1);  // while the device works
    });
    const bool stop_now = stop_agreed(o, p, dist, step);  // Note [Stop vote]
    stop::step_ends();
    if (profile) profile->finish(r.step_s, o.profile_out, std::cout);
    if (step == start) first_loss = r.loss;
    if (step - start >= 3) stats.add(r);
    reporter.send(step_report(o, step, r, tokens, flops));
    if (loss_log.is_open()) loss_log << step + 1 << " " << std::setprecision(8) << r.loss << std::endl;
    const double save_s = save_if_due(o, ckpt, step, stop_now, ckpt_tensors, opt, dist);
    if (o.exit_after_step > 0 && step + 1 == o.exit_after_step) std::_Exit(137);  // tests: a crash
    if (chief && ((step + 1) % o.log_every == 0 || step + 1 == o.steps)) print_progress(o, step, r, tokens * dist.world);
    if (stop_now)  // Note [Stop on request]
      return stopped(o, step + 1, save_s, dist);
  }
  if (chief)
    std::cout << std::setprecision(4) << "lockstep-trainer: done; loss at step 1 " << first_loss << ", uniform baseline "
              << data->uniform_loss() << std::endl;
  if (!o.stats_file.empty() && chief) stats.write(o.stats_file);
  finish_run(o, m, p, opt, dist);
  barrier(dist);  // leave together, so rank 0's store outlives everyone's last use
  return 0;
}

}  // namespace lockstep::trainer
