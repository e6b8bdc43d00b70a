#!/usr/bin/env bash
# Builds DIR, the packages the JAX scripts (ppo_ewma_jax2d.py, sfl_kinetix_jax.py) need on a CUDA image that cannot
# reach a package index but has CPython 3.12 with jax and its CUDA plugin, numpy 2, flax, optax, chex, scipy, pandas,
# matplotlib, seaborn, orbax-checkpoint and tensorstore (docs/gpu.md#without-a-package-index lists them). Run it
# where pip reaches an index, with any Python: the wheels are chosen for cp312 manylinux x86_64.
#
#   bash benchmark/gpu_site.sh DIR                  then there: PYTHONPATH=DIR python3 cleanrl_scaling/sfl_kinetix_jax.py
#
# Any import of kinetix-env runs kinetix/__init__, which imports its training, saving and data code too (wandb, grain,
# zarr, omegaconf, distrax with TensorFlow Probability), so each of those is here as the real package, installed
# with --no-deps. Cut: what neither `import kinetix` nor the scripts load (wandb's service binaries, which only
# wandb.init starts, so --track does not run from this folder; TensorFlow Probability's numpy and TensorFlow code;
# bundled environments, tests, type stubs), the symbol tables of compiled modules, and the dist-info files other than
# what importlib.metadata reads. 34 MiB, whole by itself: it also holds what the torch scripts' folder
# (benchmark/gpu_torch_site.sh builds it) has, tyro and gymnasium among them, since the two folders and a checkout do
# not travel together under a 64 MiB limit, and a JAX run given this folder alone must not stop at its first import.
set -euo pipefail
out=${1:?usage: bash benchmark/gpu_site.sh DIR}
PYTHON=${PYTHON:-python3}
mkdir -p "$out"
out=$(cd "$out" && pwd)
WHEEL_FOR="--no-deps --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any"

# kinetix-env 3.0.2 pins jax2d 1.0.1, whose jnp.clip(a_min=, a_max=) jax 0.11 rejects; 1.0.2 differs only in spelling
# them min=, max=, so the physics is the same. array-record 0.8.1: the oldest grain 0.2.18 accepts (2 MiB smaller).
PKGS=(
  kinetix-env==3.0.2 jax2d==1.0.2 jaxgl==1.0.1 gymnax==1.0.1 gymnasium==1.3.0 farama-notifications==0.0.6
  distrax==0.1.9 tfp-nightly==0.26.0.dev20261027 dm-tree==0.1.10 decorator==4.4.2
  wandb==0.31.0 pydantic==2.13.4 pydantic-core==2.46.4 annotated-types==0.7.0 typing-inspection==0.4.2
  platformdirs==4.14.8 opentelemetry-api==1.45.2
  omegaconf==2.4.0 grain==0.2.18 array-record==0.8.1 portpicker==1.6.0 zarr==2.18.3 numcodecs==0.13.1
  asciitree==1.0.0 tyro==1.0.16 docstring-parser==0.18.0 typeguard==4.6.1 shtab==1.13.0
)
"$PYTHON" -m pip install -q --target "$out" --no-compile --pre $WHEEL_FOR "${PKGS[@]}"

keep_only() {  # keep_only FOLDER NAME...: delete FOLDER's subfolders but the NAMEs
  local folder=$1; shift
  [ -d "$folder" ] || return 0
  for sub in "$folder"/*/; do
    case " $* " in *" $(basename "$sub") "*) ;; *) rm -rf "$sub" ;; esac
  done
}

cd "$out"
rm -rf bin wandb/bin                       # console scripts; wandb-core and gpu_stats (50 MB)
rm -rf wandb/sdk/launch wandb/apis/public wandb/cli wandb/automations wandb/sdk/sweeps/scheduler
keep_only wandb/integration sagemaker torch weave     # what wandb/__init__ imports; the rest load on use
rm -rf tensorflow_probability/substrates/numpy     # distrax imports tfp.substrates.jax only, which loads
keep_only tensorflow_probability/python internal   # python/internal's backends and these five files of it
find tensorflow_probability/python/internal -maxdepth 1 -name "*.py" ! -name __init__.py ! -name all_util.py \
  ! -name docstring_util.py ! -name lazy_loader.py ! -name reparameterization.py -delete 2>/dev/null || true
keep_only gymnasium/envs                   # registered by name, imported by gymnasium.make only
rm -rf pydantic/v1 grain/_src/python/testdata
rm -f kinetix/editor.py                    # Kinetix's pygame level editor
find . -mindepth 2 -depth -type d -name tests -exec rm -rf {} +
find . \( -name "*_test.py" -o -name test_util.py -o -name test_combinations.py -o -name "*.pyi" \) -delete
if command -v strip >/dev/null; then find . -name "*.so" -exec strip --strip-unneeded {} +; fi
find . -path "*.dist-info/*" ! -name METADATA ! -name entry_points.txt -delete
for f in ./*.dist-info/METADATA; do sed -i '/^$/,$d' "$f"; done   # its headers end at the first blank line
find . -depth -type d -empty -delete
for module in kinetix jax2d jaxgl gymnax gymnasium tyro distrax tree omegaconf grain zarr; do  # what the scripts import
  [ -e "$module" ] || { echo "error: $out lacks $module, which the JAX scripts import: pip did not install it" >&2; exit 1; }
done
echo "$out: $(find . -type f -printf '%s\n' | awk '{s += $1} END {printf "%.1f MiB", s / 2^20}') in $(find . -type f | wc -l) files"
