#!/usr/bin/env bash
# The one prepared run for a lent GPU machine (the `device` tool): every CUDA path's tests,
# then the numbers (host-to-GPU copies, nvjpeg decode). It has never run on a GPU yet.
#
# The machine's image has python3 with torch, torchvision, pillow, numpy, h5py, psutil,
# hypothesis, pytest and scikit-image, and nothing can be fetched there. Before the call, here:
#   python3 -m pip download simplejpeg --only-binary=:all: --python-version 3.12 \
#       --platform manylinux2014_x86_64 -d gpu-wheels      # gpu-wheels/ is git-ignored
# then call device.run with carry=["gpu-wheels"], timeout_s=540, and the command:
#   bash scripts/gpu_check.sh
# Results come back under $OUT: env.txt, tests.txt, h2d.json, gpu_decode.json.
set -uo pipefail
OUT=${OUT:-/tmp/chute-gpu-check}
mkdir -p "$OUT"
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
if [ -d gpu-wheels ]; then
    python3 -m pip install -q --no-index --find-links gpu-wheels simplejpeg 2>&1 | tail -2
fi
python3 - <<'PY' | tee "$OUT/env.txt"
import torch, torchvision
print("torch", torch.__version__, "torchvision", torchvision.__version__,
      "cuda", torch.cuda.is_available(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-")
PY
timeout 300 python3 -m pytest -q -rs -p no:cacheprovider -x \
    tests/test_device.py tests/image/test_on_device.py tests/loader/test_loader.py \
    tests/loader/test_dataloader.py tests/reader/test_dataset.py 2>&1 | tee "$OUT/tests.txt" | tail -20
(cd benchmarks && timeout 120 python3 h2d.py --json "$OUT/h2d.json" 2>&1 | tail -20)
(cd benchmarks && timeout 150 python3 gpu_decode.py --json "$OUT/gpu_decode.json" 2>&1 | tail -8)
