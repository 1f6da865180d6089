#!/usr/bin/env bash
# Source this on the GPU machine (see ../shared/device/README.md) before running GPU tests or
# benchmarks from a checkout: installs the carried wheels (lark, cuDSS, nvmath-python) once per
# machine into ~/gpu and puts ust and them on the path.
#   first calls (carry .cudss/a, then .cudss/b, ...):  bash scripts/gpu-env.sh stage
#   last call   (carry the last piece and .whl):       source scripts/gpu-env.sh && python3 -m pytest -m gpu tests
if [ "${1:-}" = "stage" ] || [ "${1:-}" = "stage-a" ]; then
  mkdir -p ~/parts && for d in .cudss/?; do [ -d "$d" ] && cp "$d"/* ~/parts/; done
  echo "staged: $(ls ~/parts | tr '\n' ' ')" && exit 0
fi
if [ ! -e ~/gpu/.installed ]; then
  mkdir -p ~/parts
  for d in .cudss/?; do [ -d "$d" ] && cp "$d"/* ~/parts/; done
  if [ -e ~/parts/NAME ]; then
    n=$(cat ~/parts/NAME)
    cat ~/parts/piece.* > ~/"$n"
    python3 -m pip install -q --no-index --no-deps --target ~/gpu ~/"$n" .whl/*.whl && touch ~/gpu/.installed
  else
    python3 -m pip install -q --no-index --no-deps --target ~/gpu .whl/*.whl && touch ~/gpu/.installed
  fi
fi
export PYTHONPATH=$PWD:$HOME/gpu
export LD_LIBRARY_PATH=$HOME/gpu/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
