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
# runs ./run under memcheck (tests/test_valgrind.py). libpcre2-dev and libcjson-dev: the
# tokenizer.json reader (bpe.c: its regexes, its JSON); libutf8proc-dev: its NFC normalizer (Qwen's
# tokenizer.json asks for NFC; Unicode's composition tables are data a library keeps up to date).
# nodejs and npm: the independent tokenizer the BPE tests compare with (tests/oracle).
# python3-jinja2 renders chat templates in the tests; python3-pytest-xdist runs them two at a time.
# npm comes with some builds of nodejs (NodeSource's, which conflict with Debian's npm package),
# so it is asked for only when missing.
PACKAGES="build-essential make libsentencepiece-dev libpcre2-dev libcjson-dev libutf8proc-dev python3 python3-torch
python3-numpy python3-pytest python3-pytest-xdist python3-sentencepiece python3-matplotlib python3-jinja2 libopenblas0-pthread valgrind
nodejs"
command -v npm >/dev/null 2>&1 || PACKAGES="$PACKAGES npm"
$SUDO apt-get update
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $PACKAGES
# The tests' npm packages, exactly as package-lock.json pins them, into tests/oracle/node_modules;
# after this the tests run offline.
(cd tests/oracle && npm ci --no-audit --no-fund)
make
