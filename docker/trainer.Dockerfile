# The training image: an official PyTorch CUDA image plus lockstep-agent (the pod's
# entrypoint) and lockstep-trainer, built against that image's own PyTorch (CUDA, NCCL).
# One image for every example: on a node without a GPU the trainer runs on the CPU with Gloo
# (examples/ddp.yaml and fsdp.yaml pass --device=cpu), so there is no separate CPU recipe.
#   docker build -f docker/trainer.Dockerfile -t lockstep/trainer:0.1.0 .
# Only the agent and trainer are built, so only their install components are installed
# (tests/images/images_test.cpp replays these lines).
# PYTORCH_IMAGE must carry PyTorch 2.11 (the version Lockstep pins) and CUDA.
ARG PYTORCH_IMAGE=pytorch/pytorch:2.11.0-cuda13.0-cudnn9-devel
FROM ${PYTORCH_IMAGE}
RUN apt-get update && apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build libgloo-dev libxxhash-dev prometheus-cpp-dev nlohmann-json3-dev libssl-dev \
 && rm -rf /var/lib/apt/lists/*
COPY . /src
RUN cmake -S /src -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOCKSTEP_BUILD_TESTS=OFF \
      -DLOCKSTEP_BUILD_OPERATOR=OFF \
      -DLOCKSTEP_LIBTORCH_DIR="$(python -c 'import torch, os; print(os.path.dirname(torch.__file__))')" \
      -DLOCKSTEP_TORCH_CXX11_ABI="$(python -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')" \
 && cmake --build /build --target lockstep-agent lockstep-trainer \
 && cmake --install /build --component agent --prefix /usr/local \
 && cmake --install /build --component trainer --prefix /usr/local \
 && rm -rf /build /src
# The operator runs `lockstep-agent -- <trainer command>` as the container's command.
RUN useradd --uid 1000 --create-home lockstep
USER 1000
