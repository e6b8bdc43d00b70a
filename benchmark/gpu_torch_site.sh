#!/usr/bin/env bash
# Builds DIR, the packages the torch scripts (ppo_atari_envpool.py, pqn_atari.py, ppo_procgen.py,
# ppo_continuous_mujoco.py) need on a CUDA image that cannot reach a package index but has CPython 3.12 with torch,
# numpy 2, tensorboard, scipy and pytest (docs/gpu.md#without-a-package-index). Run it where pip reaches an index,
# with any Python: the wheels are chosen for cp312 manylinux x86_64. benchmark/gpu_site.sh is the JAX scripts' folder.
#
#   bash benchmark/gpu_torch_site.sh DIR              then there: PYTHONPATH=DIR python3 cleanrl_scaling/ppo_procgen.py
#   PARTS="atari" bash benchmark/gpu_torch_site.sh DIR     envpool's Atari part only, no MuJoCo (20 MiB)
#   ARCHIVE=1 bash benchmark/gpu_torch_site.sh DIR    also DIR.tar.xz (xz -9), for a copy limited in bytes
#
# PARTS (default "atari procgen mujoco") picks the environments: envpool's Atari games (12 MiB), its Procgen games
# (36 MiB with their sprites, plus 56 MiB of the Qt, ICU and GL libraries its renderer links, envpool.libs), and
# MuJoCo 4.0.0 (mujoco and mujoco-core without the studio, with glfw, which gymnasium's MuJoCo envs import) for
# ppo_continuous_mujoco.py's default gymnasium backend. All three: 134 MiB, 47 MiB as DIR.tar.xz. envpool's other
# games (ViZDoom, MuJoCo, Box2D, ...) are cut; gym 0.26's pure-Python package, which envpool imports, has no wheel
# and comes from its source archive. A script whose part is left out stops at its environments; its gpu test skips.
set -euo pipefail
out=${1:?usage: bash benchmark/gpu_torch_site.sh DIR}
PARTS=${PARTS:-"atari procgen mujoco"}
PYTHON=${PYTHON:-python3}
for part in $PARTS; do
  case $part in atari|procgen|mujoco) ;; *) echo "error: PARTS holds $part; choose among atari procgen mujoco" >&2; exit 2 ;; esac
done
mkdir -p "$out"
out=$(cd "$out" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
WHEEL_FOR="--no-deps --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any"
has() { case " $PARTS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

PKGS=(tyro==1.0.16 docstring-parser==0.18.0 typeguard==4.6.1 shtab==1.13.0 gymnasium==1.3.0
      farama-notifications==0.0.6 dm-env==1.6 optree==0.20.0 dm-tree==0.1.10 gym-notices==0.1.0)
if has mujoco; then PKGS+=(mujoco==4.0.0 mujoco-core==4.0.0 glfw==2.11.0); fi
"$PYTHON" -m pip install -q --target "$out" --no-compile $WHEEL_FOR "${PKGS[@]}"

# gym 0.26.2: envpool's Python layer imports it; pure Python, published as a source archive only
"$PYTHON" -m pip download -q --no-deps --no-binary :all: -d "$tmp" gym==0.26.2
tar xzf "$tmp"/gym-0.26.2.tar.gz -C "$tmp" && rm -rf "$out/gym" && cp -r "$tmp/gym-0.26.2/gym" "$out/"

# envpool 1.0.1 (an 89 MB wheel of every game family): its core, Python layer and the chosen families
"$PYTHON" -m pip download -q $WHEEL_FOR -d "$tmp" envpool==1.0.1
(cd "$tmp" && unzip -q -o envpool-1.0.1-*.whl)
rm -rf "$out/envpool" "$out/envpool.libs"
cp -r "$tmp/envpool" "$out/"
for family in "$out"/envpool/*/; do
  case $(basename "$family") in core|python) ;; atari) has atari || rm -rf "$family" ;;
    procgen) has procgen || rm -rf "$family" ;; *) rm -rf "$family" ;; esac
done
if has procgen; then cp -r "$tmp/envpool.libs" "$out/"; fi   # procgen_envpool.so links Qt5, ICU and GL from here

cd "$out"
rm -rf bin mujoco/doc                       # console scripts; MuJoCo's docstring sources
find . -mindepth 2 -depth -type d -name tests -exec rm -rf {} +
find . -path "*.dist-info/*" ! -name METADATA ! -name entry_points.txt -delete
find . -depth -type d -empty -delete
for module in tyro gymnasium gym envpool; do  # what every torch script imports
  [ -e "$module" ] || { echo "error: $out lacks $module: pip did not install it" >&2; exit 1; }
done
echo "$out: $(find . -type f -printf '%s\n' | awk '{s += $1} END {printf "%.1f MiB", s / 2^20}') in $(find . -type f | wc -l) files (parts: $PARTS)"
if [ "${ARCHIVE:-0}" = 1 ]; then
  tar cf - -C "$(dirname "$out")" "$(basename "$out")" | xz -9 -T0 > "$out.tar.xz"
  echo "$out.tar.xz: $(du -m "$out.tar.xz" | cut -f1) MB; there: tar xJf $(basename "$out").tar.xz, then PYTHONPATH=$(basename "$out")"
fi
