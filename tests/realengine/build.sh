#!/usr/bin/env bash
# Build the real llama.cpp `llama-server` and the tiny model the real-engine tests run against,
# into a cache directory, if they are not there already:
#   ${SPARKOPS_LLAMA_CACHE:-~/.cache/sparkops/llama.cpp}/<llama-cpp-python version>/bin/llama-server
#   ${SPARKOPS_LLAMA_CACHE:-~/.cache/sparkops/llama.cpp}/<llama-cpp-python version>/tiny-<generator hash>.gguf
# Everything comes from PyPI: llama.cpp's source from llama-cpp-python's sdist (it vendors the
# whole tree), the model from make_tiny_gguf.py run with the `gguf` package. Nothing is fetched
# at build or run time from anywhere else (the web UI download is switched off).
# Needs cmake, g++ and python3 with venv. PYTHON picks the interpreter whose pip downloads.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=/dev/null
. "$here/versions.env"
PYTHON="${PYTHON:-python3}"
JOBS="${JOBS:-$(nproc)}"
cache="${SPARKOPS_LLAMA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sparkops/llama.cpp}/$LLAMA_CPP_PYTHON_VERSION"
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9

server="$cache/bin/llama-server"
model="$cache/tiny-$(sha256sum "$here/make_tiny_gguf.py" | cut -c1-12).gguf"

if [ -x "$server" ] && "$server" --version >/dev/null 2>&1; then
  echo "llama-server: cached at $server"
else
  start=$(date +%s)
  work="$cache/work"
  rm -rf "$work" && mkdir -p "$work"
  sdist="llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz"
  for try in 1 2 3; do
    "$PYTHON" -m pip download --quiet --no-deps --no-binary :all: -d "$work" \
      "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" && break
    [ "$try" = 3 ] && { echo "could not download llama-cpp-python $LLAMA_CPP_PYTHON_VERSION from PyPI" >&2; exit 1; }
    sleep 5
  done
  echo "$LLAMA_CPP_PYTHON_SHA256  $work/$sdist" | sha256sum --check --quiet
  tar -xzf "$work/$sdist" -C "$work" "llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp"
  src="$work/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp"
  fetched=$(date +%s)
  cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DGGML_NATIVE=OFF -DGGML_OPENMP=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_COMMIT="$LLAMA_BUILD_COMMIT" \
    >"$work/configure.log" 2>&1 || { tail -n 40 "$work/configure.log" >&2; exit 1; }
  cmake --build "$work/build" --target llama-server -j "$JOBS" >"$work/build.log" 2>&1 ||
    { tail -n 60 "$work/build.log" >&2; exit 1; }
  mkdir -p "$cache/bin"
  cp "$work/build/bin/llama-server" "$server.tmp" && mv "$server.tmp" "$server"
  "$server" --version
  rm -rf "$work"
  echo "llama-server: built in $(($(date +%s) - start)) s ($((fetched - start)) s of it fetching the sdist) at $server"
fi

if [ -s "$model" ]; then
  echo "tiny model: cached at $model"
else
  venv="$cache/gguf-venv"
  if ! "$venv/bin/python" -c "import gguf, numpy" 2>/dev/null; then
    rm -rf "$venv"
    "$PYTHON" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet "gguf==$GGUF_VERSION" "numpy==$NUMPY_VERSION"
  fi
  "$venv/bin/python" "$here/make_tiny_gguf.py" "$model.tmp" && mv "$model.tmp" "$model"
  echo "tiny model: written at $model ($(stat -c %s "$model") bytes)"
fi
