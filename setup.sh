#!/bin/sh
# Install what the project needs from Debian 12's packages, then build ./run.
#   ./setup.sh        (uses sudo for apt-get when not run as root)
set -eu
cd "$(dirname "$0")"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
# Build: C compiler, make, the SentencePiece C++ library. Export and tests: Debian's python3 with
# torch, numpy, pytest, sentencepiece, matplotlib (plots). libopenblas0-pthread gives torch a fast
# BLAS; without it torch falls back to the reference BLAS, about 12x slower. valgrind: `make test`
# runs ./run under memcheck (tests/test_valgrind.py).
PACKAGES="build-essential make libsentencepiece-dev python3 python3-torch python3-numpy python3-pytest
python3-sentencepiece python3-matplotlib libopenblas0-pthread valgrind"
$SUDO apt-get update
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $PACKAGES
make
