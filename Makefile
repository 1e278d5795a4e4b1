# Build ./run and the test tools; `make test` runs every test.
CC ?= gcc
CXX ?= g++
# Debian's interpreter: the one that sees python3-torch, python3-numpy and python3-sentencepiece.
PYTHON ?= /usr/bin/python3

CFLAGS ?= -O3 -march=native
# -fno-trapping-math: nothing here reads floating-point exception flags, and without it GCC will
# not vectorize a loop that selects with a comparison (the softmax's e^x): no value changes.
# -Wswitch-enum: a switch on an enum lists every value, default or not, so a new weight type (dtype.h)
# or mode is a warning at each switch that must learn it, not a silent fall into another's case.
CFLAGS += -std=c11 -Wall -Wextra -Wswitch-enum -fopenmp -fno-trapping-math -D_DEFAULT_SOURCE
# -mprefer-vector-width=512: the loops GCC vectorizes itself (omp simd sums, the reference path) add
# in an order set by the vector width, and GCC's tuning picks 256 bits for some AVX-512 CPUs (Intel's)
# and 512 for others (AMD's): pinned, the logits' bits depend on the instruction set alone
# (tests/test_bit_identical.py). Without AVX-512 it changes nothing. x86 only: others lack the option.
ifneq ($(filter x86_64 i%86,$(shell uname -m)),)
CFLAGS += -mprefer-vector-width=512
endif
CXXFLAGS ?= -O2
CXXFLAGS += -std=c++17 -Wall -Wextra
LDLIBS = -lsentencepiece -lpcre2-8 -lcjson -lutf8proc -lstdc++ -lm -fopenmp

# The kernels: the fences and references, decode, prefill, attention, their x86 vector versions, and
# the weight types (kernels_internal.h says what each file holds; kernels_x86.c compiles to nothing
# without AVX2).
KERNELS = kernels.o kernels_decode.o kernels_prefill.o kernels_attention.o kernels_x86.o dtype.o
CORE = model.o loader.o gguf.o rope.o $(KERNELS)
# The program around the model: flags (cli), chat templates, the sampler; run.c is main.
APP = run.o cli.o chat.o sampler.o promptcache.o
TOOLS = tests/test_rope tests/test_model tests/tools/rope_dump tests/tools/dump_logits tests/tools/dump_logits_ref \
	tests/tools/tok_dump \
	tests/tools/chat_ids tests/tools/sample_dump $(KERNEL_TESTS)
# The kernel test, built for this machine, for plain C (what other machines compile), on x86-64
# for AVX2 without AVX-512, and where this machine has AVX512-BF16, without it (bf16's two fused
# multiply-adds in place of vdpbf16ps): each vector path is checked where it can run.
KERNEL_TESTS = tests/test_kernels tests/test_kernels_plain
ifeq ($(shell uname -m),x86_64)
KERNEL_TESTS += tests/test_kernels_avx2
ifneq ($(shell $(CC) $(CFLAGS) -dM -E - </dev/null 2>/dev/null | grep -c __AVX512BF16__),0)
KERNEL_TESTS += tests/test_kernels_nobf16
endif
endif

all: run

run: $(APP) $(CORE) tokenizer.o bpe.o
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

%.o: %.c *.h
	$(CC) $(CFLAGS) -c -o $@ $<

tokenizer.o: tokenizer.cpp tokenizer.h bpe.h gguf.h
	$(CXX) $(CXXFLAGS) -c -o $@ $<

tests/test_rope: tests/test_rope.c rope.o
	$(CC) $(CFLAGS) -I. -o $@ $^ -lm

tests/test_model: tests/test_model.c $(CORE)
	$(CC) $(CFLAGS) -I. -o $@ $^ -lm -fopenmp

tests/tools/rope_dump: tests/tools/rope_dump.c rope.o
	$(CC) $(CFLAGS) -I. -o $@ $^ -lm

tests/tools/dump_logits: tests/tools/dump_logits.c $(CORE)
	$(CC) $(CFLAGS) -I. -o $@ $^ -lm -fopenmp

tests/tools/tok_dump: tests/tools/tok_dump.c tokenizer.o bpe.o gguf.o
	$(CC) $(CFLAGS) -I. -o $@ $^ $(LDLIBS)

tests/tools/chat_ids: tests/tools/chat_ids.c chat.o tokenizer.o bpe.o gguf.o
	$(CC) $(CFLAGS) -I. -o $@ $^ $(LDLIBS)

tests/tools/sample_dump: tests/tools/sample_dump.c sampler.o
	$(CC) $(CFLAGS) -I. -o $@ $^ -lm

tests/test_kernels: tests/test_kernels.c $(KERNELS)
	$(CC) $(CFLAGS) -I. -o $@ $^ -lm

tests/test_kernels_plain: tests/test_kernels.c $(KERNELS:.o=.c) *.h
	$(CC) $(CFLAGS) -DKERNELS_PLAIN -I. -o $@ $(filter %.c,$^) -lm

tests/test_kernels_avx2: tests/test_kernels.c $(KERNELS:.o=.c) *.h
	$(CC) $(CFLAGS) -march=haswell -I. -o $@ $(filter %.c,$^) -lm

tests/test_kernels_nobf16: tests/test_kernels.c $(KERNELS:.o=.c) *.h
	$(CC) $(CFLAGS) -mno-avx512bf16 -I. -o $@ $(filter %.c,$^) -lm

tools: run run-ref $(TOOLS)

# `make run-ref`: ./run with model.c's products and attention through the plain references
# (matmul_ref, attention_ref; model.c, LRUN_REFERENCE), to hold the fast path against.
build/ref/model.o: model.c *.h
	@mkdir -p build/ref
	$(CC) $(CFLAGS) -DLRUN_REFERENCE -c -o $@ $<

run-ref: $(APP) build/ref/model.o loader.o gguf.o rope.o $(KERNELS) tokenizer.o bpe.o
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

# dump_logits on the same plain references (tests/test_bit_identical.py pins both paths' bits).
tests/tools/dump_logits_ref: tests/tools/dump_logits.c build/ref/model.o loader.o gguf.o rope.o $(KERNELS)
	$(CC) $(CFLAGS) -I. -o $@ $^ -lm -fopenmp

# glibc gives each allocation of 32 MiB and more its own mmap and returns it on free, so every large
# torch temporary in tests/reference.py is paged in again, one fault per 4 KiB. On the 2-vCPU VMs we
# test on a fault costs ~90 us, and a stories260K forward over 2048 tokens took 202 s this way and
# 10 s with the heap kept (no mmap, no trimming). This changes where memory comes from, not results.
TEST_MALLOC = MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=17179869184

# pytest runs its test files on TEST_JOBS processes (python3-pytest-xdist; each file's tests on one of
# them, so a file's shared runs are made once). Much of a test is one thread (torch's reference, the
# node oracle, Python): two at a time keep both cores of the 2-vCPU VMs busy, and beside another job
# that holds a core they get more of the machine than one would. Without xdist: one process.
TEST_JOBS ?= 2
XDIST = $(shell $(PYTHON) -c "import xdist" 2>/dev/null && echo "-n $(TEST_JOBS) --dist loadfile")

# The kernel tests run TEST_JOBS at a time, each one's output kept together (-O), their OpenMP
# threads spinning 1000 times before they sleep (as run.c and tests/conftest.py set it): with
# libgomp's 300,000 the two programs' threads spin against each other, or against another job.
.PHONY: $(KERNEL_TESTS:=.run)
$(KERNEL_TESTS:=.run): %.run: %
	GOMP_SPINCOUNT=$${GOMP_SPINCOUNT:-1000} ./$<

test: tools
	./tests/test_rope
	./tests/test_model data/stories260K/stories260K.bin
	$(MAKE) --no-print-directory -O -j$(TEST_JOBS) $(KERNEL_TESTS:=.run)
	$(TEST_MALLOC) $(PYTHON) -m pytest -q $(XDIST) tests

# `make bench`: tokens/s of ./run on the 110M and TinyLlama-1.1B shapes and stories260K, each weight
# type, 1 and 2 threads (bench/bench.py; checkpoints cached in ~/.cache/lrun-bench), into
# bench/results.md. A subset goes to build/bench-subset.md instead:
# make bench BENCH_ARGS="--shape 110m --dtype f32 --runs 3"
BENCH_TOOLS = bench/bwprobe bench/matmul_bench bench/stepread
BENCH_ARGS ?=

bench/bwprobe: bench/bwprobe.c bench/fold.h
	$(CC) $(CFLAGS) -o $@ $< -lm

bench/matmul_bench: bench/matmul_bench.c $(KERNELS)
	$(CC) $(CFLAGS) -I. -o $@ $^ -lm

bench/stepread: bench/stepread.c bench/fold.h $(CORE)
	$(CC) $(CFLAGS) -I. -o $@ $(filter-out %.h,$^) -lm

bench: run $(BENCH_TOOLS)
	$(PYTHON) bench/bench.py $(BENCH_ARGS)

# `make plots`: the RoPE figures in docs/ (scripts/plot_rope.py, frequencies from tests/tools/rope_dump).
plots: tests/tools/rope_dump
	$(PYTHON) scripts/plot_rope.py

# `make results`: the extension lab (scripts/ppl_results.py), once per lab, into docs/results/LAB/:
# tiny64 (the perplexity of tiny64x512, head_dim 64, theta 10000, on its held-out text, and the passkey
# retrieval of passkey64x512, tiny64x512 taught to retrieve at 512 tokens) and tiny128 (tiny128x512 and
# passkey128x512: head_dim 128, one kv head, theta 500000). Every mode with and without log-n,
# perplexity at 1x..32x and retrieval at 1x..16x (ten keys a cell), then perplexity at 64x and
# retrieval at 32x and 64x for the rows within 1.10x at 32x, and fifty keys at 32x and 1x for those
# that ten keys do not tell from the best.
# README, "Results", has how long it takes. RESULTS_ARGS="--ctx 512,2048 --lengths 512,2048 --modes
# none,rerope+logn" (any subset) writes build/ppl-quick/LAB/ instead.
RESULTS_ARGS ?=
results: run tests/tools/tok_dump build/tiny64.bin build/passkey64.bin build/tiny128.bin build/passkey128.bin
	$(PYTHON) scripts/ppl_results.py --lab tiny64 $(RESULTS_ARGS)
	$(PYTHON) scripts/ppl_results.py --lab tiny128 $(RESULTS_ARGS)

# The four trained models (data/README.md), each exported from data/NAMEx512-hf to build/NAME.bin.
build/%.bin: data/%x512-hf/config.json data/%x512-hf/model.safetensors export/export.py
	mkdir -p build
	$(PYTHON) export/export.py data/$*x512-hf $@ > /dev/null

clean:
	rm -f run run-ref *.o $(TOOLS) $(BENCH_TOOLS)
	rm -rf build/sanitize build/valgrind build/fuzz

# --- Hostile input: sanitizers, valgrind, fuzzing (see fuzz/README.md) ---------------------------

# `make sanitize`: the whole test suite against ./run and the test tools built with AddressSanitizer
# (with LeakSanitizer) and UBSan. It runs in a copy of the tree, build/sanitize/repo, so the normal
# build is left alone. UBSan stops at the first report, and a
# sanitizer's exit status (86) is one no test expects, so any report fails the run.
SANITIZE = -O1 -g -march=native -fno-omit-frame-pointer -fsanitize=address,undefined,float-cast-overflow \
	-fno-sanitize-recover=all
sanitize:
	rm -rf build/sanitize
	mkdir -p build/sanitize/repo
	git ls-files -z --cached --others --exclude-standard | tar --null -T - --ignore-failed-read -cf - | \
		tar -xf - -C build/sanitize/repo
	# the npm oracle that ./setup.sh installed (ignored by git, so not in the list above)
	if [ -d tests/oracle/node_modules ]; then cp -r tests/oracle/node_modules build/sanitize/repo/tests/oracle/; fi
	cd build/sanitize/repo && env -u MAKEFLAGS -u MFLAGS CFLAGS="$(SANITIZE)" CXXFLAGS="$(SANITIZE)" \
		ASAN_OPTIONS=exitcode=86:detect_leaks=1 UBSAN_OPTIONS=exitcode=86:print_stacktrace=1 \
		$(MAKE) test

# ./run for valgrind (tests/test_valgrind.py): -O2 -g without -march=native, because valgrind
# 3.19 cannot decode the AVX-512 instructions -march=native emits on recent x86 CPUs.
VALGRIND_CFLAGS = -O2 -g -std=c11 -Wall -Wextra -fopenmp -D_DEFAULT_SOURCE
build/valgrind/%.o: %.c *.h
	@mkdir -p build/valgrind
	$(CC) $(VALGRIND_CFLAGS) -c -o $@ $<

build/valgrind/tokenizer.o: tokenizer.cpp tokenizer.h bpe.h gguf.h
	@mkdir -p build/valgrind
	$(CXX) -O2 -g -std=c++17 -Wall -Wextra -c -o $@ $<

build/valgrind/run: $(APP:%=build/valgrind/%) $(CORE:%=build/valgrind/%) build/valgrind/tokenizer.o build/valgrind/bpe.o
	$(CC) $(VALGRIND_CFLAGS) -o $@ $^ $(LDLIBS)

# `make fuzz`: each libFuzzer target for FUZZ_SECONDS, from its seed corpus fuzz/corpus/NAME; what
# it finds goes to build/fuzz. Needs clang and its runtime (Debian: clang libclang-rt-14-dev).
# The targets are built without OpenMP (one thread: reproducible runs) and without -march=native:
# clang 14 has no _Float16 on x86 without AVX512-FP16, so __fp16 (the same IEEE half, as a storage
# type; its conversion is in compiler-rt's builtins) stands in for it, which the AVX-512 intrinsics
# headers do not accept. The fuzzers therefore run the plain C kernels; `make sanitize` runs the
# vector ones under AddressSanitizer.
FUZZ_SECONDS ?= 20
FUZZ_TARGETS = model tokenizer cli bpe gguf prompt_cache
FUZZ_CC = clang
FUZZ_CXX = clang++
FUZZ_FLAGS = -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined \
	-fno-sanitize-recover=all -D_Float16=__fp16 -Wall -Wextra
FUZZ_LIBS = -lsentencepiece -lpcre2-8 -lcjson -lutf8proc -lm $(shell $(FUZZ_CC) --rtlib=compiler-rt -print-libgcc-file-name)
FUZZ_OBJS = $(addprefix build/fuzz/,model.o loader.o gguf.o rope.o $(KERNELS) tokenizer.o bpe.o cli.o chat.o sampler.o \
	promptcache.o)

build/fuzz/%.o: %.c *.h
	@mkdir -p build/fuzz
	$(FUZZ_CC) $(FUZZ_FLAGS) -std=c11 -D_DEFAULT_SOURCE -c -o $@ $<

build/fuzz/tokenizer.o: tokenizer.cpp tokenizer.h bpe.h gguf.h
	@mkdir -p build/fuzz
	$(FUZZ_CXX) $(FUZZ_FLAGS) -std=c++17 -c -o $@ $<

build/fuzz/fuzz_%: fuzz/fuzz_%.c $(FUZZ_OBJS) *.h
	$(FUZZ_CC) $(FUZZ_FLAGS) -std=c11 -D_DEFAULT_SOURCE -DDATA_DIR='"$(abspath data)"' \
		-c -o $@.o $<
	$(FUZZ_CXX) -fsanitize=fuzzer,address,undefined -o $@ $@.o $(FUZZ_OBJS) $(FUZZ_LIBS)

.SECONDARY: $(FUZZ_OBJS) $(CORE:%=build/valgrind/%) $(APP:%=build/valgrind/%) build/valgrind/tokenizer.o build/valgrind/bpe.o

fuzz: $(FUZZ_TARGETS:%=build/fuzz/fuzz_%)
	for t in $(FUZZ_TARGETS); do fuzz/run.sh $$t $(FUZZ_SECONDS) || exit 1; done

.PHONY: all tools test clean sanitize fuzz bench plots results
